#!/usr/bin/env python3
"""Write pkg/diag/rrc/testdata/crafted.txt: RRC PDUs for procedures the
real captures lack (an NR primary cell handover to mmWave, NR and LTE
re-establishment requests with each cause, LTE measIds and measurement
objects beyond 32, EARFCNs beyond 65535, NR and LTE Rel-16 conditional
handover configurations, SIB1 of cells shared by several networks and the
connection setups that select one, connection releases redirecting to an
NR carrier or to an EARFCN beyond 65535, NR releases and suspensions, an
NR reconfiguration without reconfigurationWithSync and the NR
reconfiguration complete of SRB1, an LTE re-establishment complete),
encoded with pycrate.

The NR cell group is derived from the real EN-DC secondary cell group in
testdata/mobileinsight.txt (vector nr_rrc_reconfiguration_scg), with its
target moved to a mmWave cell, so every mandatory field holds a value a
network really sent.

Usage: make_vectors.py pkg/diag/rrc/testdata > pkg/diag/rrc/testdata/crafted.txt
"""
import sys

from pycrate_asn1dir import RRCLTE, RRCNR

LTE = RRCLTE.EUTRA_RRC_Definitions
NR = RRCNR.NR_RRC_Definitions

MMWAVE_SSB_ARFCN = 2079167  # n261, FR2
MMWAVE_PCI = 77

testdata_dir = None


def real_vector(testdata, name):
    with open(testdata + "/mobileinsight.txt") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 4 and parts[0] == name:
                return bytes.fromhex(parts[3])
    sys.exit("no vector %s" % name)


def encode(obj, value):
    obj.set_val(value)
    return obj.to_uper().hex()


def nr_pcell_handover(testdata):
    NR.RRCReconfiguration.from_uper(real_vector(testdata, "nr_rrc_reconfiguration_scg"))
    ies = NR.RRCReconfiguration.get_val()["criticalExtensions"][1]
    group = ies["secondaryCellGroup"][1]
    common = group["spCellConfig"]["reconfigurationWithSync"]["spCellConfigCommon"]
    common["physCellId"] = MMWAVE_PCI
    freq = common["downlinkConfigCommon"]["frequencyInfoDL"]
    freq["absoluteFrequencySSB"] = MMWAVE_SSB_ARFCN
    freq["frequencyBandList"] = [261]
    NR.CellGroupConfig.set_val(group)
    master = NR.CellGroupConfig.to_uper()
    return encode(NR.DL_DCCH_Message, {"message": ("c1", ("rrcReconfiguration", {
        "rrc-TransactionIdentifier": 1,
        "criticalExtensions": ("rrcReconfiguration", {
            "nonCriticalExtension": {"masterCellGroup": master},
        }),
    }))})


def nr_master_group(pci, ssb_arfcn, band):
    """The real EN-DC secondary cell group as a master cell group whose
    reconfigurationWithSync targets cell pci on ssb_arfcn."""
    NR.RRCReconfiguration.from_uper(real_vector(testdata_dir, "nr_rrc_reconfiguration_scg"))
    ies = NR.RRCReconfiguration.get_val()["criticalExtensions"][1]
    group = ies["secondaryCellGroup"][1]
    common = group["spCellConfig"]["reconfigurationWithSync"]["spCellConfigCommon"]
    common["physCellId"] = pci
    freq = common["downlinkConfigCommon"]["frequencyInfoDL"]
    freq["absoluteFrequencySSB"] = ssb_arfcn
    freq["frequencyBandList"] = [band]
    NR.CellGroupConfig.set_val(group)
    return NR.CellGroupConfig.to_uper()


def nr_conditional(add, remove=()):
    """An NR RRCReconfiguration (DL-DCCH) whose conditionalReconfiguration-r16
    (TS 38.331 6.3.2, in RRCReconfiguration-v1610-IEs) removes the ids in
    remove and adds, per (id, pci, ssb_arfcn, band) of add, an RRCReconfiguration
    handing the primary cell over to that cell once measId 1 triggers."""
    cond = {}
    if remove:
        cond["condReconfigToRemoveList-r16"] = list(remove)
    items = []
    for cid, pci, arfcn, band in add:
        NR.RRCReconfiguration.set_val({"rrc-TransactionIdentifier": 0, "criticalExtensions": ("rrcReconfiguration", {
            "nonCriticalExtension": {"masterCellGroup": nr_master_group(pci, arfcn, band)}})})
        items.append({"condReconfigId-r16": cid, "condExecutionCond-r16": [1],
                      "condRRCReconfig-r16": NR.RRCReconfiguration.to_uper()})
    if items:
        cond["condReconfigToAddModList-r16"] = items
    v1610 = {"conditionalReconfiguration-r16": cond}
    return encode(NR.DL_DCCH_Message, {"message": ("c1", ("rrcReconfiguration", {
        "rrc-TransactionIdentifier": 2,
        "criticalExtensions": ("rrcReconfiguration", {
            "nonCriticalExtension": {"nonCriticalExtension": {"nonCriticalExtension": {"nonCriticalExtension": v1610}}},
        }),
    }))})


def lte_conditional(testdata):
    """An LTE RRCConnectionReconfiguration whose conditionalReconfiguration-r16
    (TS 36.331 6.3.4, in RRCConnectionReconfiguration-v1610-IEs) stores the
    real handover command of lte_reconf_ho as candidate 1, to apply once
    measId 1 triggers."""
    LTE.DL_DCCH_Message.from_uper(real_vector(testdata, "lte_reconf_ho"))
    msg = LTE.DL_DCCH_Message.get_val()
    LTE.RRCConnectionReconfiguration.set_val(msg["message"][1][1])
    stored = LTE.RRCConnectionReconfiguration.to_uper()
    v1610 = {"conditionalReconfiguration-r16": {"condReconfigurationToAddModList-r16": [{
        "condReconfigurationId-r16": 1, "triggerCondition-r16": [1], "condReconfigurationToApply-r16": stored}]}}
    ext = v1610
    for _ in range(10):  # r8 down to v1530: each holds the next
        ext = {"nonCriticalExtension": ext}
    return encode(LTE.DL_DCCH_Message, {"message": ("c1", ("rrcConnectionReconfiguration", {
        "rrc-TransactionIdentifier": 3,
        "criticalExtensions": ("c1", ("rrcConnectionReconfiguration-r8", ext)),
    }))})


def lte_extended_meas(testdata):
    """The real A3 measConfig and report, moved to measId 40 on measurement
    object 33 (Rel-12/13 extended lists) and re-pointing measId 5 to it."""
    LTE.DL_DCCH_Message.from_uper(real_vector(testdata, "lte_reconf_measconfig_a3"))
    msg = LTE.DL_DCCH_Message.get_val()
    cfg = msg["message"][1][1]["criticalExtensions"][1][1]["measConfig"]
    _, eutra = cfg["measObjectToAddModList"][0]["measObject"]
    cfg["measObjectToAddModListExt-r13"] = [{"measObjectId-r13": 33, "measObject-r13": ("measObjectEUTRA-r13", eutra)}]
    cfg["measIdToAddModListExt-r12"] = [{"measId-v1250": 40, "measObjectId-r12": 1, "reportConfigId-r12": 7}]
    cfg["measIdToAddModListExt-v1310"] = [{"measObjectId-v1310": 33}]
    cfg["measIdToAddModList-v1310"] = [{"measObjectId-v1310": 33}]
    reconf = encode(LTE.DL_DCCH_Message, msg)
    LTE.UL_DCCH_Message.from_uper(real_vector(testdata, "lte_mr_a3"))
    msg = LTE.UL_DCCH_Message.get_val()
    msg["message"][1][1]["criticalExtensions"][1][1]["measResults"]["measId-v1250"] = 40
    return reconf, encode(LTE.UL_DCCH_Message, msg)


def lte_handover_high_earfcn(testdata):
    """The real handover command moved to EARFCN 66786 (band 66), which
    needs the Rel-9 extensions: carrierFreq-v9e0 in mobilityControlInfo and
    measObjectToAddModList-v9e0 for a measurement object on it."""
    LTE.DL_DCCH_Message.from_uper(real_vector(testdata, "lte_reconf_ho"))
    msg = LTE.DL_DCCH_Message.get_val()
    ies = msg["message"][1][1]["criticalExtensions"][1][1]
    mci = ies["mobilityControlInfo"]
    mci["carrierFreq"] = {"dl-CarrierFreq": 65535}
    mci["carrierFreq-v9e0"] = {"dl-CarrierFreq-v9e0": 66786}
    ies["measConfig"] = {
        "measObjectToAddModList": [{"measObjectId": 4, "measObject": ("measObjectEUTRA", {
            "carrierFreq": 65535, "allowedMeasBandwidth": "mbw100",
            "presenceAntennaPort1": False, "neighCellConfig": (1, 2)})}],
        "measObjectToAddModList-v9e0": [{"measObjectEUTRA-v9e0": {"carrierFreq-v9e0": 66786}}],
    }
    return encode(LTE.DL_DCCH_Message, msg)


def nr_reestablishment(cause):
    return encode(NR.UL_CCCH_Message, {"message": ("c1", ("rrcReestablishmentRequest", {
        "rrcReestablishmentRequest": {
            "ue-Identity": {"c-RNTI": 4660, "physCellId": 433, "shortMAC-I": (0xBEEF, 16)},
            "reestablishmentCause": cause,
            "spare": (0, 1),
        },
    }))})


def lte_reestablishment(cause):
    return encode(LTE.UL_CCCH_Message, {"message": ("c1", ("rrcConnectionReestablishmentRequest", {
        "criticalExtensions": ("rrcConnectionReestablishmentRequest-r8", {
            "ue-Identity": {"c-RNTI": (4660, 16), "physCellId": 142, "shortMAC-I": (0xBEEF, 16)},
            "reestablishmentCause": cause,
            "spare": (0, 2),
        }),
    }))})


def digits(s):
    return [int(c) for c in s]


def plmn_identity(mcc, mnc):
    """A PLMN-Identity; mcc None leaves it out (the previous one's)."""
    ident = {"mnc": digits(mnc)}
    if mcc is not None:
        ident["mcc"] = digits(mcc)
    return ident


def lte_sib1(plmns):
    """An LTE SystemInformationBlockType1 (BCCH-DL-SCH) listing the PLMNs
    (mcc, mnc) in order, with only the mandatory fields otherwise."""
    return encode(LTE.BCCH_DL_SCH_Message, {"message": ("c1", ("systemInformationBlockType1", {
        "cellAccessRelatedInfo": {
            "plmn-IdentityList": [{"plmn-Identity": plmn_identity(mcc, mnc), "cellReservedForOperatorUse": "notReserved"}
                                  for mcc, mnc in plmns],
            "trackingAreaCode": (0x1234, 16), "cellIdentity": (0xABCDE01, 28),
            "cellBarred": "notBarred", "intraFreqReselection": "allowed", "csg-Indication": False,
        },
        "cellSelectionInfo": {"q-RxLevMin": -64},
        "freqBandIndicator": 3,
        "schedulingInfoList": [{"si-Periodicity": "rf16", "sib-MappingInfo": []}],
        "si-WindowLength": "ms20",
        "systemInfoValueTag": 1,
    }))})


def lte_setup_complete(selected):
    return encode(LTE.UL_DCCH_Message, {"message": ("c1", ("rrcConnectionSetupComplete", {
        "rrc-TransactionIdentifier": 0,
        "criticalExtensions": ("c1", ("rrcConnectionSetupComplete-r8", {
            "selectedPLMN-Identity": selected, "dedicatedInfoNAS": b"\x07\x41"})),
    }))})


def nr_sib1(entries):
    """An NR SIB1 (BCCH-DL-SCH) whose plmn-IdentityInfoList holds one entry
    per list of PLMNs (mcc, mnc) in entries."""
    return encode(NR.BCCH_DL_SCH_Message, {"message": ("c1", ("systemInformationBlockType1", {
        "cellAccessRelatedInfo": {"plmn-IdentityInfoList": [{
            "plmn-IdentityList": [plmn_identity(mcc, mnc) for mcc, mnc in plmns],
            "cellIdentity": (0x123456789, 36), "cellReservedForOperatorUse": "notReserved"} for plmns in entries]},
    }))})


def nr_setup_complete(selected):
    return encode(NR.UL_DCCH_Message, {"message": ("c1", ("rrcSetupComplete", {
        "rrc-TransactionIdentifier": 0,
        "criticalExtensions": ("rrcSetupComplete", {"selectedPLMN-Identity": selected, "dedicatedNAS-Message": b"\x7e\x00"}),
    }))})


def lte_release(redirect=None, late=None):
    """An LTE RRCConnectionRelease (releaseCause other) with the
    redirectedCarrierInfo choice redirect and the v9e0 extension late (its
    lateNonCriticalExtension, RRCConnectionRelease-v9e0-IEs), when given."""
    ies = {"releaseCause": "other"}
    if redirect is not None:
        ies["redirectedCarrierInfo"] = redirect
    if late is not None:
        LTE.RRCConnectionRelease_v9e0_IEs.set_val(late)
        ies["nonCriticalExtension"] = {"lateNonCriticalExtension": LTE.RRCConnectionRelease_v9e0_IEs.to_uper()}
    return encode(LTE.DL_DCCH_Message, {"message": ("c1", ("rrcConnectionRelease", {
        "rrc-TransactionIdentifier": 1,
        "criticalExtensions": ("c1", ("rrcConnectionRelease-r8", ies)),
    }))})


def nr_release(redirect=None, suspend=False):
    """An NR RRCRelease with the redirectedCarrierInfo choice redirect, and
    a suspendConfig (to RRC_INACTIVE) when suspend."""
    ies = {}
    if redirect is not None:
        ies["redirectedCarrierInfo"] = redirect
    if suspend:
        ies["suspendConfig"] = {"fullI-RNTI": (0x123456789A, 40), "shortI-RNTI": (0x12345, 24),
                                "ran-PagingCycle": "rf64", "t380": "min30", "nextHopChainingCount": 2}
    return encode(NR.DL_DCCH_Message, {"message": ("c1", ("rrcRelease", {
        "rrc-TransactionIdentifier": 1,
        "criticalExtensions": ("rrcRelease", ies),
    }))})


def nr_reconfiguration_plain():
    """An NR RRCReconfiguration (DL-DCCH) that changes no cell: no
    reconfigurationWithSync, nothing but its transaction."""
    return encode(NR.DL_DCCH_Message, {"message": ("c1", ("rrcReconfiguration", {
        "rrc-TransactionIdentifier": 1,
        "criticalExtensions": ("rrcReconfiguration", {}),
    }))})


def nr_reconfiguration_complete():
    """The NR RRCReconfigurationComplete a UE sends on SRB1 (UL-DCCH)."""
    return encode(NR.UL_DCCH_Message, {"message": ("c1", ("rrcReconfigurationComplete", {
        "rrc-TransactionIdentifier": 1,
        "criticalExtensions": ("rrcReconfigurationComplete", {}),
    }))})


def lte_reestablishment_complete():
    return encode(LTE.UL_DCCH_Message, {"message": ("c1", ("rrcConnectionReestablishmentComplete", {
        "rrc-TransactionIdentifier": 1,
        "criticalExtensions": ("rrcConnectionReestablishmentComplete-r8", {}),
    }))})


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_vectors.py TESTDATA_DIR")
    testdata = sys.argv[1]
    global testdata_dir
    testdata_dir = testdata
    print("# Crafted RRC PDUs, written by tools/rrc-oracle/make_vectors.py (pycrate).")
    print("# Format: name rat channel hex")
    print("nr_dl_reconf_pcell_mmwave nr dl_dcch " + nr_pcell_handover(testdata))
    print("lte_reconf_ho_earfcn_ext lte dl_dcch " + lte_handover_high_earfcn(testdata))
    reconf, report = lte_extended_meas(testdata)
    print("lte_reconf_meas_ext lte dl_dcch " + reconf)
    print("lte_mr_meas_id_ext lte ul_dcch " + report)
    print("nr_reconf_cho_two nr dl_dcch " + nr_conditional([(1, 401, 632628, 78), (2, 402, 632628, 78)]))
    print("nr_reconf_cho_remove_one nr dl_dcch " + nr_conditional([], remove=[1]))
    print("lte_reconf_cho lte dl_dcch " + lte_conditional(testdata))
    for cause, tag in (("otherFailure", "rlf"), ("handoverFailure", "hof"), ("reconfigurationFailure", "reconf")):
        print("nr_reestablishment_%s nr ul_ccch %s" % (tag, nr_reestablishment(cause)))
        print("lte_reestablishment_%s lte ul_ccch %s" % (tag, lte_reestablishment(cause)))
    print("lte_sib1_shared lte bcch_dl_sch " + lte_sib1([("460", "00"), (None, "01"), ("001", "001")]))
    print("lte_sib1_no_mcc lte bcch_dl_sch " + lte_sib1([(None, "01")]))
    print("lte_setup_complete_plmn2 lte ul_dcch " + lte_setup_complete(2))
    print("nr_sib1_shared nr bcch_dl_sch " + nr_sib1([[("228", "01")], [(None, "02"), ("310", "410")]]))
    print("nr_setup_complete_plmn3 nr ul_dcch " + nr_setup_complete(3))
    print("lte_release_redirect_nr lte dl_dcch " + lte_release(("nr-r15", {
        "carrierFreq-r15": 632628, "subcarrierSpacingSSB-r15": "kHz30"})))
    print("lte_release_redirect_earfcn_ext lte dl_dcch " + lte_release(("eutra", 65535),
                                                                       {"redirectedCarrierInfo-v9e0": {"eutra-v9e0": 66786}}))
    print("nr_release_redirect_eutra nr dl_dcch " + nr_release(("eutra", {"eutraFrequency": 1300})))
    print("nr_release_suspend nr dl_dcch " + nr_release(("nr", {"carrierFreq": 2079167, "ssbSubcarrierSpacing": "kHz120"}),
                                                        suspend=True))
    print("nr_dl_reconf_plain nr dl_dcch " + nr_reconfiguration_plain())
    print("nr_ul_reconf_complete nr ul_dcch " + nr_reconfiguration_complete())
    print("lte_reest_complete lte ul_dcch " + lte_reestablishment_complete())


if __name__ == "__main__":
    main()
