package rrc

import (
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/rrc/uper"
)

// Summary is what m2ho takes from one RRC message, before the
// per-connection state resolves it into events. tools/rrc-oracle/oracle.py
// produces the same structure (same JSON) from pycrate's decoding, which
// the differential test compares field by field.
type Summary struct {
	// Message is the message's alternative name in its channel's
	// message type, e.g. "measurementReport", "rrcReconfiguration".
	Message string `json:"message"`

	MeasConfig *MeasConfigDelta `json:"meas_config,omitempty"`
	Report     *MeasReport      `json:"report,omitempty"`
	// Sync is the target of a primary cell change: LTE
	// mobilityControlInfo, NR reconfigurationWithSync in the master cell
	// group.
	Sync *SyncTarget `json:"sync,omitempty"`
	// SecondarySync is reconfigurationWithSync in an NR secondary cell
	// group (NR-DC, or EN-DC inside the LTE container).
	SecondarySync *SyncTarget `json:"secondary_sync,omitempty"`
	// ENDC is the LTE nr-Config-r15 of an EN-DC reconfiguration.
	ENDC *ENDCConfig `json:"endc,omitempty"`
	// NestedNR summarises the NR UL-DCCH message an LTE
	// ulInformationTransferMRDC-r15 carries (EN-DC NR measurement reports
	// without SRB3).
	NestedNR *Summary `json:"nested_nr,omitempty"`
	// ReestablishmentCause is the enumerant of a re-establishment request.
	ReestablishmentCause string `json:"reestablishment_cause,omitempty"`
	// Conditional is the conditionalReconfiguration-r16 of a
	// reconfiguration (Rel-16 conditional handover).
	Conditional *CondReconfig `json:"conditional,omitempty"`
	// PLMNs are the networks a SystemInformationBlockType1 says its
	// cell belongs to, "MCC-MNC" in the order listed (the first is the
	// primary one); none when one of them is not a PLMN identity.
	PLMNs []string `json:"plmns,omitempty"`
	// SelectedPLMN is the selectedPLMN-Identity of a connection setup
	// complete: which of the PLMNs of the cell's SIB1, from 1, the UE
	// registers with.
	SelectedPLMN int `json:"selected_plmn,omitempty"`
	// Redirect is the LTE or NR carrier the redirectedCarrierInfo of a
	// connection release (LTE RRCConnectionRelease, NR RRCRelease) sends
	// the UE to; nil when it names none, or a carrier of another RAT.
	Redirect *diag.Carrier `json:"redirect,omitempty"`
}

// CondReconfig is a ConditionalReconfiguration-r16 (TS 38.331 6.3.2,
// TS 36.331 6.3.4): the stored conditional configurations to remove,
// then those to add or modify, each a complete reconfiguration the UE
// applies by itself once its execution condition holds.
type CondReconfig struct {
	Removed []int           `json:"removed,omitempty"`
	Added   []CondCandidate `json:"added,omitempty"`
	// Attempt: attemptCondReconfig, the UE tries a candidate after a
	// radio link or handover failure instead of re-establishing.
	Attempt bool `json:"attempt,omitempty"`
}

// CondCandidate is one stored conditional configuration. Target is the
// primary cell it hands over to, nil when it changes none (a conditional
// PSCell change, or a modification that leaves the reconfiguration out).
type CondCandidate struct {
	ID     int         `json:"id"`
	Target *SyncTarget `json:"target,omitempty"`
}

// MeasConfigDelta is the list part of a measConfig: what to remove and
// what to add or modify, in the order 3GPP applies them.
type MeasConfigDelta struct {
	ObjectsRemoved []int          `json:"objects_removed,omitempty"`
	Objects        []MeasObject   `json:"objects,omitempty"`
	ReportsRemoved []int          `json:"reports_removed,omitempty"`
	Reports        []ReportConfig `json:"reports,omitempty"`
	MeasIDsRemoved []int          `json:"meas_ids_removed,omitempty"`
	MeasIDs        []MeasIDLink   `json:"meas_ids,omitempty"`
}

// MeasObject is a measurement object's carrier. RAT is empty for objects
// m2ho does not follow (UTRA, GERAN, CDMA2000, WLAN, sidelink...); Carrier
// is 0 when the object does not carry one.
type MeasObject struct {
	ID      int      `json:"id"`
	RAT     diag.RAT `json:"rat,omitempty"`
	Carrier uint32   `json:"carrier,omitempty"`
}

// ReportConfig is a report configuration's trigger: Event is empty for
// periodical and other non-A/B triggers.
type ReportConfig struct {
	ID    int            `json:"id"`
	Event diag.MeasEvent `json:"event,omitempty"`
}

// MeasIDLink binds a measId to its object and report configuration.
type MeasIDLink struct {
	ID     int `json:"id"`
	Object int `json:"object"`
	Report int `json:"report"`
}

// MeasReport is a measurement report: its measId and the neighbour cells
// it lists, in the order the UE put them (best first, TS 36.331 and
// 38.331 5.5.5).
type MeasReport struct {
	MeasID    int            `json:"meas_id"`
	Neighbors []NeighborCell `json:"neighbors,omitempty"`
}

// NeighborCell is one reported neighbour with a physical cell identity.
type NeighborCell struct {
	RAT diag.RAT `json:"rat"`
	PCI uint16   `json:"pci"`
}

// SyncTarget is the cell a synchronous reconfiguration moves to. Carrier
// is 0 when the message leaves it unchanged (intra-frequency) or omits
// it; HasPCI is false when the NR spCellConfigCommon omits the PCI.
type SyncTarget struct {
	PCI     uint16 `json:"pci"`
	HasPCI  bool   `json:"has_pci"`
	Carrier uint32 `json:"carrier,omitempty"`
}

// ENDCConfig is LTE's nr-Config-r15.
type ENDCConfig struct {
	Release       bool `json:"release,omitempty"`
	ReleaseAndAdd bool `json:"release_and_add,omitempty"`
	// SecondaryCellGroup summarises the NR RRCReconfiguration carried in
	// nr-SecondaryCellGroupConfig-r15.
	SecondaryCellGroup *Summary `json:"secondary_cell_group,omitempty"`
	// nested is the raw NR RRCReconfiguration, to recognise the same PDU
	// when the modem also logs it on its own.
	nested []byte
}

// eventOf maps a 3GPP eventId alternative name ("eventA3", "eventA6-r10",
// "eventB1-NR-r15") to the events m2ho knows; other triggers map to "".
func eventOf(alternative string) diag.MeasEvent {
	if len(alternative) < 7 || alternative[:5] != "event" {
		return ""
	}
	if len(alternative) > 7 && alternative[7] != '-' {
		return "" // eventA3H1-r18 and other combined triggers
	}
	if e := diag.MeasEvent(alternative[5:7]); e.Known() {
		return e
	}
	return ""
}

// intItems returns the INTEGER items of a SEQUENCE OF.
func intItems(v *uper.Value) []int {
	items := v.Items()
	if len(items) == 0 {
		return nil
	}
	out := make([]int, len(items))
	for i := range items {
		out[i] = int(items[i].Integer())
	}
	return out
}

// intField returns the named INTEGER component and whether it is present.
func intField(v *uper.Value, name string) (int64, bool) {
	f := v.Field(name)
	return f.Integer(), f.Present()
}
