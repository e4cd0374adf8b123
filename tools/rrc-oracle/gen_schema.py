#!/usr/bin/env python3
"""Export the UPER-relevant structure of the 3GPP RRC ASN.1 (TS 36.331 and
TS 38.331, as compiled by pycrate) to the compact JSON schema that
pkg/diag/rrc/uper interprets.

Only what PER encoding depends on is kept: component order, optionality,
extension markers and additions (groups included), value and size
constraints, enumeration root/extension counts and names. Types are
hash-consed by structure so the output holds each distinct node once.

Usage: gen_schema.py lte|nr > pkg/diag/rrc/schema/<rat>.json
"""
import json
import sys

from pycrate_asn1dir import RRCLTE, RRCNR

ROOTS = {
    "lte": (RRCLTE.EUTRA_RRC_Definitions,
            ["DL-DCCH-Message", "UL-DCCH-Message", "UL-CCCH-Message",
             "RRCConnectionReconfiguration", "BCCH-DL-SCH-Message"]),
    "nr": (RRCNR.NR_RRC_Definitions,
           ["DL-DCCH-Message", "UL-DCCH-Message", "UL-CCCH-Message",
            "RRCReconfiguration", "RRCReconfigurationComplete", "CellGroupConfig",
            "BCCH-DL-SCH-Message"]),
}


def bounds(const):
    """Effective PER bounds of a value or size constraint set:
    [lb, ub, extensible (0 or 1)] with None for an absent bound."""
    if const is None:
        return [None, None, 0]
    return [const.lb, const.ub, 1 if const.ext is not None else 0]


def type_name(obj):
    """The ASN.1 type name of a constructed node, for error messages."""
    ref = getattr(obj, "_typeref", None)
    return ref.called[1] if ref is not None else obj._name


class Exporter:
    def __init__(self):
        self.nodes = []
        self.index = {}
        self.by_obj = {}

    def intern(self, node):
        key = json.dumps(node, sort_keys=True)
        if key not in self.index:
            self.index[key] = len(self.nodes)
            self.nodes.append(node)
        return self.index[key]

    def component(self, parent, name):
        return [name, self.export(parent._cont[name]), 1 if name in parent._root_opt else 0]

    def export(self, obj):
        if id(obj) in self.by_obj:
            cached = self.by_obj[id(obj)]
            if cached is None:
                raise ValueError("recursive type %s" % obj._name)
            return cached
        self.by_obj[id(obj)] = None
        node = self.build(obj)
        ref = self.intern(node)
        self.by_obj[id(obj)] = ref
        return ref

    def build(self, obj):
        t = obj.TYPE
        if t == "NULL":
            return {"k": "null"}
        if t == "BOOLEAN":
            return {"k": "bool"}
        if t == "INTEGER":
            return {"k": "int", "v": bounds(obj._const_val)}
        if t == "ENUMERATED":
            return {"k": "enum", "r": list(obj._root), "x": list(obj._ext) if obj._ext is not None else None}
        if t in ("BIT STRING", "OCTET STRING"):
            return {"k": "bits" if t == "BIT STRING" else "octets", "s": bounds(obj._const_sz)}
        if t == "SEQUENCE OF":
            return {"k": "seqof", "s": bounds(obj._const_sz), "c": self.export(obj._cont)}
        if t == "CHOICE":
            node = {"k": "choice", "n": type_name(obj), "r": [[n, self.export(obj._cont[n])] for n in obj._root]}
            node["x"] = None if obj._ext is None else [[n, self.export(obj._cont[n])] for n in obj._ext]
            return node
        if t == "SEQUENCE":
            node = {"k": "seq", "n": type_name(obj), "r": [self.component(obj, n) for n in obj._root]}
            if obj._ext is None:
                node["x"] = None
                return node
            ident = getattr(obj, "_ext_ident", {}) or {}
            groups = getattr(obj, "_ext_group_obj", {}) or {}
            additions, seen = [], set()
            for name in obj._ext:
                if name in ident:
                    group = ident[name]
                    if group in seen:
                        continue
                    seen.add(group)
                    additions.append(["", self.export(groups[group]), 1])
                else:
                    additions.append([name, self.export(obj._cont[name]), 1])
            node["x"] = additions
            return node
        raise ValueError("unsupported ASN.1 type %s for %s" % (t, obj._name))


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ROOTS:
        sys.exit("usage: gen_schema.py lte|nr")
    module, roots = ROOTS[sys.argv[1]]
    exporter = Exporter()
    out_roots = {name: exporter.export(getattr(module, name.replace("-", "_"))) for name in roots}
    json.dump({"source": "3GPP %s ASN.1 via pycrate 0.8.1 pycrate_asn1dir" % ("TS 36.331" if sys.argv[1] == "lte" else "TS 38.331"),
               "roots": out_roots, "types": exporter.nodes}, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
