#!/usr/bin/env python3
"""Reference decoder for the differential test of pkg/diag/rrc.

Reads one RRC PDU per line on stdin: "<rat> <channel> <hex>" with rat
lte|nr and channel dl_dcch|ul_dcch|ul_ccch|bcch_dl_sch|rrc_reconfiguration|
rrc_reconfiguration_complete. Decodes it with pycrate (an independent UPER
implementation) and writes one JSON object per line: {"summary": {...}}
with the same fields, names and omissions as rrc.Summary, or
{"error": "..."} when pycrate cannot decode it. Test-time only; m2ho
never runs this.
"""
import json
import sys

from pycrate_asn1dir import RRCLTE, RRCNR

LTE = RRCLTE.EUTRA_RRC_Definitions
NR = RRCNR.NR_RRC_Definitions

ROOTS = {
    ("lte", "dl_dcch"): LTE.DL_DCCH_Message,
    ("lte", "ul_dcch"): LTE.UL_DCCH_Message,
    ("lte", "ul_ccch"): LTE.UL_CCCH_Message,
    ("lte", "bcch_dl_sch"): LTE.BCCH_DL_SCH_Message,
    ("nr", "dl_dcch"): NR.DL_DCCH_Message,
    ("nr", "ul_dcch"): NR.UL_DCCH_Message,
    ("nr", "ul_ccch"): NR.UL_CCCH_Message,
    ("nr", "bcch_dl_sch"): NR.BCCH_DL_SCH_Message,
    ("nr", "rrc_reconfiguration"): NR.RRCReconfiguration,
    ("nr", "rrc_reconfiguration_complete"): NR.RRCReconfigurationComplete,
}

EVENTS = {"A1", "A2", "A3", "A4", "A5", "A6", "B1", "B2"}


def decode(obj, pdu):
    obj.from_uper(pdu)
    return obj.get_val()


def path(value, *names):
    """Walk SEQUENCE dicts and CHOICE (name, value) tuples; None if absent."""
    for name in names:
        if isinstance(value, dict):
            value = value.get(name)
        elif isinstance(value, tuple) and len(value) == 2 and value[0] == name:
            value = value[1]
        else:
            return None
    return value


def chosen(value):
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return value
    return (None, None)


def event_of(name):
    """eventA3 / eventA6-r10 / eventB1-NR-r15 -> A3 / A6 / B1."""
    if not name or not name.startswith("event") or len(name) < 7:
        return None
    if len(name) > 7 and name[7] != "-":
        return None
    event = name[5:7]
    return event if event in EVENTS else None


def meas_config(cfg, rat):
    if cfg is None:
        return None
    out = {}
    for key, field in (("objects_removed", "measObjectToRemoveList"),
                       ("reports_removed", "reportConfigToRemoveList"),
                       ("meas_ids_removed", "measIdToRemoveList")):
        if cfg.get(field):
            out[key] = list(cfg[field])
    objects = [object_of(item, rat) for item in cfg.get("measObjectToAddModList") or []]
    if objects:
        out["objects"] = objects
    reports = []
    for item in cfg.get("reportConfigToAddModList") or []:
        rep = {"id": item["reportConfigId"]}
        _, rc = chosen(item["reportConfig"])
        trigger = ("triggerType", "event", "eventId") if rat == "lte" else ("reportType", "eventTriggered", "eventId")
        name, _ = chosen(path(rc, *trigger))
        event = event_of(name)
        if event:
            rep["event"] = event
        reports.append(rep)
    if reports:
        out["reports"] = reports
    links = [{"id": i["measId"], "object": i["measObjectId"], "report": i["reportConfigId"]}
             for i in cfg.get("measIdToAddModList") or []]
    if links:
        out["meas_ids"] = links
    if rat == "lte":
        lte_meas_config_ext(cfg, out)
    return out


def object_of(item, rat):
    obj = {"id": item["measObjectId"]}
    name, mo = chosen(item["measObject"])
    if rat == "lte" and name in ("measObjectEUTRA", "measObjectEUTRA-r13"):
        obj.update(rat="lte", carrier=mo["carrierFreq"])
    elif rat == "lte" and name == "measObjectNR-r15":
        obj.update(rat="nr", carrier=mo["carrierFreq-r15"])
    elif rat == "nr" and name == "measObjectNR":
        obj.update(rat="nr", carrier=mo.get("ssbFrequency", 0))
    elif rat == "nr" and name == "measObjectEUTRA":
        obj.update(rat="lte", carrier=mo["carrierFreq"])
    if obj.get("carrier") == 0:
        del obj["carrier"]
    return obj


def lte_meas_config_ext(cfg, out):
    """LTE's extended lists: EARFCNs above 65535 (Rel-9, item by item over
    measObjectToAddModList), measIds 33-64 (Rel-12), objects 33-64 and the
    item-by-item re-pointing of measIds to them (Rel-13)."""
    objects = out.get("objects", [])
    for i, item in enumerate(cfg.get("measObjectToAddModList-v9e0") or []):
        carrier = path(item, "measObjectEUTRA-v9e0", "carrierFreq-v9e0")
        if carrier is not None and i < len(objects):
            objects[i]["carrier"] = carrier
    removed = list(cfg.get("measObjectToRemoveListExt-r13") or [])
    if removed:
        out["objects_removed"] = out.get("objects_removed", []) + removed
    for item in cfg.get("measObjectToAddModListExt-r13") or []:
        obj = object_of({"measObjectId": item["measObjectId-r13"], "measObject": item["measObject-r13"]}, "lte")
        out.setdefault("objects", []).append(obj)
    removed = list(cfg.get("measIdToRemoveListExt-r12") or [])
    if removed:
        out["meas_ids_removed"] = out.get("meas_ids_removed", []) + removed

    def repoint(links, v1310):
        for i, item in enumerate(v1310 or []):
            if "measObjectId-v1310" in item and i < len(links):
                links[i]["object"] = item["measObjectId-v1310"]

    repoint(out.get("meas_ids", []), cfg.get("measIdToAddModList-v1310"))
    ext = [{"id": i["measId-v1250"], "object": i["measObjectId-r12"], "report": i["reportConfigId-r12"]}
           for i in cfg.get("measIdToAddModListExt-r12") or []]
    repoint(ext, cfg.get("measIdToAddModListExt-v1310"))
    if ext:
        out["meas_ids"] = out.get("meas_ids", []) + ext


def neighbors(items, rat, field):
    out = [{"rat": rat, "pci": item[field]} for item in items or [] if field in item]
    return out


def report(results, rat):
    out = {"meas_id": results.get("measId-v1250", results["measId"])}
    name, cells = chosen(results.get("measResultNeighCells"))
    listed = []
    if rat == "lte" and name == "measResultListEUTRA":
        listed = neighbors(cells, "lte", "physCellId")
    elif rat == "lte" and name == "measResultNeighCellListNR-r15":
        listed = neighbors(cells, "nr", "pci-r15")
    elif rat == "nr" and name == "measResultListNR":
        listed = neighbors(cells, "nr", "physCellId")
    elif rat == "nr" and name == "measResultListEUTRA":
        listed = neighbors(cells, "lte", "eutra-PhysCellId")
    if listed:
        out["neighbors"] = listed
    return out


def cell_group_sync(group):
    # pycrate decodes OCTET STRING (CONTAINING CellGroupConfig) itself and
    # returns (type name, value); raw bytes are decoded here.
    cg = group[1] if isinstance(group, tuple) else decode(NR.CellGroupConfig, group)
    sync = path(cg, "spCellConfig", "reconfigurationWithSync")
    if sync is None:
        return None
    common = sync.get("spCellConfigCommon") or {}
    target = {"pci": common.get("physCellId", 0), "has_pci": "physCellId" in common}
    ssb = path(common, "downlinkConfigCommon", "frequencyInfoDL", "absoluteFrequencySSB")
    if ssb:
        target["carrier"] = ssb
    return target


def extension(ies, name):
    """The named component of the first non-critical extension of ies
    (itself included) that has it."""
    ext = ies
    while isinstance(ext, dict):
        if name in ext:
            return ext[name]
        ext = ext.get("nonCriticalExtension")
    return None


def contained(value, obj):
    """An OCTET STRING (CONTAINING ...): pycrate decodes it itself to
    (type name, value); raw bytes are decoded here."""
    return value[1] if isinstance(value, tuple) else decode(obj, value)


def conditional(cfg, remove, add, ident, nested, attempt, target):
    out = {}
    if cfg.get(remove):
        out["removed"] = list(cfg[remove])
    added = []
    for item in cfg.get(add) or []:
        cand = {"id": item[ident]}
        if nested in item:
            sync = target(item[nested])
            if sync:
                cand["target"] = sync
        added.append(cand)
    if added:
        out["added"] = added
    if attempt in cfg:
        out["attempt"] = True
    return out


def nr_conditional(ies):
    cfg = extension(ies, "conditionalReconfiguration-r16")
    if cfg is None:
        return None
    return conditional(cfg, "condReconfigToRemoveList-r16", "condReconfigToAddModList-r16", "condReconfigId-r16",
                       "condRRCReconfig-r16", "attemptCondReconfig-r16",
                       lambda v: nr_reconfiguration(contained(v, NR.RRCReconfiguration)).get("sync"))


def lte_sync(ies):
    mci = ies.get("mobilityControlInfo") if ies else None
    if mci is None:
        return None
    sync = {"pci": mci["targetPhysCellId"], "has_pci": True}
    dl = path(mci, "carrierFreq", "dl-CarrierFreq")
    if dl:
        sync["carrier"] = dl
    dl = path(mci, "carrierFreq-v9e0", "dl-CarrierFreq-v9e0")
    if dl:
        sync["carrier"] = dl
    return sync


def lte_conditional(ies):
    cfg = extension(ies, "conditionalReconfiguration-r16")
    if cfg is None:
        return None
    return conditional(cfg, "condReconfigurationToRemoveList-r16", "condReconfigurationToAddModList-r16",
                       "condReconfigurationId-r16", "condReconfigurationToApply-r16", "attemptCondReconf-r16",
                       lambda v: lte_sync(path(contained(v, LTE.RRCConnectionReconfiguration),
                                               "criticalExtensions", "c1", "rrcConnectionReconfiguration-r8")))


def nr_reconfiguration(msg):
    out = {"message": "rrcReconfiguration"}
    ies = path(msg, "criticalExtensions", "rrcReconfiguration")
    if ies is None:
        return out
    mc = meas_config(ies.get("measConfig"), "nr")
    if mc is not None:
        out["meas_config"] = mc
    if "secondaryCellGroup" in ies:
        sync = cell_group_sync(ies["secondaryCellGroup"])
        if sync:
            out["secondary_sync"] = sync
    mcg = path(ies, "nonCriticalExtension", "masterCellGroup")
    if mcg is not None:
        sync = cell_group_sync(mcg)
        if sync:
            out["sync"] = sync
    cond = nr_conditional(ies)
    if cond is not None:
        out["conditional"] = cond
    return out


def lte_endc(ies):
    ext = ies
    while isinstance(ext, dict):
        name, cfg = chosen(ext.get("nr-Config-r15"))
        if name == "release":
            return {"release": True}
        if name == "setup":
            out = {}
            if cfg["endc-ReleaseAndAdd-r15"]:
                out["release_and_add"] = True
            nested = cfg.get("nr-SecondaryCellGroupConfig-r15")
            if nested is not None:
                out["secondary_cell_group"] = nr_reconfiguration(decode(NR.RRCReconfiguration, nested))
            return out
        ext = ext.get("nonCriticalExtension")
    return None


def message_body(msg):
    """The message alternative of a *-Message: in c1, or in the c2 of
    messageClassExtension (LTE's later messages, such as
    ulInformationTransferMRDC-r15)."""
    name, body = chosen(path(msg, "message", "c1"))
    if name is None:
        name, body = chosen(path(msg, "message", "messageClassExtension", "c2"))
    return name or "", body


def plmn_list(ids):
    """MCC-MNC of each PLMN-Identity, an absent mcc being the previous
    one's; None when one of them is not a PLMN identity."""
    out, mcc = [], None
    for ident in ids:
        if ident.get("mcc") is not None:
            mcc = list(ident["mcc"])
        mnc = list(ident["mnc"])
        if mcc is None or len(mcc) != 3 or not 2 <= len(mnc) <= 3:
            return None
        out.append("".join(map(str, mcc)) + "-" + "".join(map(str, mnc)))
    return out or None


MAX_EARFCN = 65535


def lte_redirect(info):
    """The LTE or NR carrier of an RRCConnectionRelease's
    redirectedCarrierInfo; None for another RAT's, or for maxEARFCN (its
    EARFCN is in the v9e0 extension, which the Go decoder does not read)."""
    name, value = chosen(info)
    if name == "eutra" and value != MAX_EARFCN:
        return {"rat": "lte", "arfcn": value}
    if name == "nr-r15":
        return {"rat": "nr", "arfcn": value["carrierFreq-r15"]}
    if name == "nr-r17":
        return {"rat": "nr", "arfcn": value["carrierFreq-r17"]}
    return None


def nr_redirect(info):
    name, value = chosen(info)
    if name == "nr":
        return {"rat": "nr", "arfcn": value["carrierFreq"]}
    if name == "eutra":
        return {"rat": "lte", "arfcn": value["eutraFrequency"]}
    return None


def summarize(rat, channel, pdu):
    msg = decode(ROOTS[(rat, channel)], pdu)
    if channel == "rrc_reconfiguration":
        return nr_reconfiguration(msg)
    if channel == "rrc_reconfiguration_complete":
        return {"message": "rrcReconfigurationComplete"}
    name, body = message_body(msg)
    out = {"message": name}
    if rat == "lte" and name == "rrcConnectionReconfiguration":
        ies = path(body, "criticalExtensions", "c1", "rrcConnectionReconfiguration-r8")
        mc = meas_config(ies.get("measConfig"), "lte")
        if mc is not None:
            out["meas_config"] = mc
        sync = lte_sync(ies)
        if sync is not None:
            out["sync"] = sync
        cond = lte_conditional(ies)
        if cond is not None:
            out["conditional"] = cond
        endc = lte_endc(ies)
        if endc is not None:
            out["endc"] = endc
    elif rat == "lte" and name == "measurementReport":
        out["report"] = report(path(body, "criticalExtensions", "c1", "measurementReport-r8", "measResults"), rat)
    elif rat == "lte" and name == "ulInformationTransferMRDC-r15":
        ies = path(body, "criticalExtensions", "c1", "ulInformationTransferMRDC-r15")
        nested = ies.get("ul-DCCH-MessageNR-r15") if ies else None
        if nested is not None:
            out["nested_nr"] = summarize("nr", "ul_dcch", nested)
    elif rat == "lte" and name == "rrcConnectionReestablishmentRequest":
        out["reestablishment_cause"] = path(body, "criticalExtensions", "rrcConnectionReestablishmentRequest-r8", "reestablishmentCause")
    elif rat == "nr" and name == "rrcReconfiguration":
        return nr_reconfiguration(body)
    elif rat == "nr" and name == "measurementReport":
        out["report"] = report(path(body, "criticalExtensions", "measurementReport", "measResults"), rat)
    elif rat == "nr" and name == "rrcReestablishmentRequest":
        out["reestablishment_cause"] = path(body, "rrcReestablishmentRequest", "reestablishmentCause")
    elif rat == "lte" and name == "systemInformationBlockType1":
        infos = path(body, "cellAccessRelatedInfo", "plmn-IdentityList") or []
        plmns = plmn_list([info["plmn-Identity"] for info in infos])
        if plmns:
            out["plmns"] = plmns
    elif rat == "nr" and name == "systemInformationBlockType1":
        infos = path(body, "cellAccessRelatedInfo", "plmn-IdentityInfoList") or []
        plmns = plmn_list([ident for info in infos for ident in info["plmn-IdentityList"]])
        if plmns:
            out["plmns"] = plmns
    elif rat == "lte" and name == "rrcConnectionSetupComplete":
        selected = path(body, "criticalExtensions", "c1", "rrcConnectionSetupComplete-r8", "selectedPLMN-Identity")
        if selected:
            out["selected_plmn"] = selected
    elif rat == "nr" and name == "rrcSetupComplete":
        selected = path(body, "criticalExtensions", "rrcSetupComplete", "selectedPLMN-Identity")
        if selected:
            out["selected_plmn"] = selected
    elif rat == "lte" and name == "rrcConnectionRelease":
        redirect = lte_redirect(path(body, "criticalExtensions", "c1", "rrcConnectionRelease-r8", "redirectedCarrierInfo"))
        if redirect:
            out["redirect"] = redirect
    elif rat == "nr" and name == "rrcRelease":
        redirect = nr_redirect(path(body, "criticalExtensions", "rrcRelease", "redirectedCarrierInfo"))
        if redirect:
            out["redirect"] = redirect
    return out


def main():
    for line in sys.stdin:
        parts = line.split()
        if len(parts) != 3:
            continue
        rat, channel, hexpdu = parts
        try:
            result = {"summary": summarize(rat, channel, bytes.fromhex(hexpdu))}
        except Exception as exc:  # any pycrate failure is a reported result, not a crash
            result = {"error": "%s: %s" % (type(exc).__name__, exc)}
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
