package rrc

import (
	_ "embed"
	"errors"
	"fmt"
	"sync"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/rrc/uper"
)

// The schemas are generated from the 3GPP ASN.1 by
// tools/rrc-oracle/gen_schema.py (see schema/README.md).
var (
	//go:embed schema/lte.json
	lteSchemaJSON []byte
	//go:embed schema/nr.json
	nrSchemaJSON []byte
)

// rootTypes are the top-level types m2ho decodes, per RAT.
type rootTypes struct {
	dlDCCH, ulDCCH, ulCCCH *uper.Type
	// bcchDLSCH is the system information, read for the networks a cell
	// belongs to (SIB1).
	bcchDLSCH *uper.Type
	// reconfiguration is the bare (NR)RRC(Connection)Reconfiguration of
	// EN-DC containers and conditional configurations.
	reconfiguration *uper.Type
	// NR only: the bare messages of EN-DC containers and the cell group.
	reconfigurationComplete, cellGroupConfig *uper.Type
}

var loadSchemas = sync.OnceValues(func() (map[diag.RAT]*rootTypes, error) {
	lte, err := loadRoots(lteSchemaJSON, false)
	if err != nil {
		return nil, fmt.Errorf("rrc: LTE schema: %w", err)
	}
	nr, err := loadRoots(nrSchemaJSON, true)
	if err != nil {
		return nil, fmt.Errorf("rrc: NR schema: %w", err)
	}
	return map[diag.RAT]*rootTypes{diag.RATLTE: lte, diag.RATNR: nr}, nil
})

func loadRoots(data []byte, nr bool) (*rootTypes, error) {
	s, err := uper.LoadSchema(data)
	if err != nil {
		return nil, err
	}
	var missing []string
	root := func(name string) *uper.Type {
		t, ok := s.Root(name)
		if !ok {
			missing = append(missing, name)
		}
		return t
	}
	r := &rootTypes{dlDCCH: root("DL-DCCH-Message"), ulDCCH: root("UL-DCCH-Message"), ulCCCH: root("UL-CCCH-Message"),
		bcchDLSCH: root("BCCH-DL-SCH-Message")}
	if !nr {
		r.reconfiguration = root("RRCConnectionReconfiguration")
	}
	if nr {
		r.reconfiguration = root("RRCReconfiguration")
		r.reconfigurationComplete = root("RRCReconfigurationComplete")
		r.cellGroupConfig = root("CellGroupConfig")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("schema lacks %v", missing)
	}
	return r, nil
}

// ErrUnsupportedChannel means the channel carries no message m2ho uses
// (master information, paging, connection setup); such PDUs are not
// decoded.
var ErrUnsupportedChannel = errors.New("rrc: channel not decoded")

// MaxPDULen is the largest RRC PDU decoded: the maximum PDCP SDU of NR
// (TS 38.323), which LTE's (8188 bytes) stays below. Longer input is
// malformed.
const MaxPDULen = 9000

// Summarize decodes one RRC PDU and extracts what m2ho uses. It keeps no
// state; Decoder resolves summaries into events.
func Summarize(rat diag.RAT, channel diag.RRCChannel, pdu []byte) (Summary, error) {
	if len(pdu) > MaxPDULen {
		return Summary{}, fmt.Errorf("rrc: %d-byte PDU exceeds %d bytes", len(pdu), MaxPDULen)
	}
	schemas, err := loadSchemas()
	if err != nil {
		return Summary{}, err
	}
	roots, ok := schemas[rat]
	if !ok {
		return Summary{}, fmt.Errorf("rrc: unknown RAT %q", rat)
	}
	var root *uper.Type
	switch channel {
	case diag.ChannelRRCReconfiguration, diag.ChannelRRCReconfigurationComplete:
		if rat != diag.RATNR {
			return Summary{}, ErrUnsupportedChannel
		}
	}
	switch channel {
	case diag.ChannelDLDCCH:
		root = roots.dlDCCH
	case diag.ChannelULDCCH:
		root = roots.ulDCCH
	case diag.ChannelULCCCH:
		root = roots.ulCCCH
	case diag.ChannelBCCHDLSCH:
		root = roots.bcchDLSCH
	case diag.ChannelRRCReconfiguration:
		root = roots.reconfiguration
	case diag.ChannelRRCReconfigurationComplete:
		root = roots.reconfigurationComplete
	}
	if root == nil {
		return Summary{}, ErrUnsupportedChannel
	}
	msg, err := uper.Decode(root, pdu)
	if err != nil {
		return Summary{}, fmt.Errorf("rrc: %s %s: %w", rat, root.Name, err)
	}
	switch channel {
	case diag.ChannelRRCReconfiguration:
		return summarizeNRReconfiguration(roots, &msg)
	case diag.ChannelRRCReconfigurationComplete:
		return Summary{Message: "rrcReconfigurationComplete"}, nil
	}
	name, body := messageBody(&msg)
	s := Summary{Message: name}
	if rat == diag.RATLTE {
		err = summarizeLTE(roots, &s, body)
	} else {
		err = summarizeNR(roots, &s, body)
	}
	return s, err
}

// messageBody returns the message alternative of a *-Message: in c1, or
// in the c2 of messageClassExtension (LTE's later messages, such as
// ulInformationTransferMRDC-r15).
func messageBody(msg *uper.Value) (string, *uper.Value) {
	if name, body := msg.Path("message", "c1").Chosen(); body != nil {
		return name, body
	}
	return msg.Path("message", "messageClassExtension", "c2").Chosen()
}

// lteSync is the target of an LTE mobilityControlInfo, nil without one.
func lteSync(ies *uper.Value) *SyncTarget {
	mci := ies.Field("mobilityControlInfo")
	if !mci.Present() {
		return nil
	}
	sync := &SyncTarget{PCI: uint16(mci.Field("targetPhysCellId").Integer()), HasPCI: true}
	if dl, ok := intField(mci.Field("carrierFreq"), "dl-CarrierFreq"); ok {
		sync.Carrier = uint32(dl)
	}
	if dl, ok := intField(mci.Field("carrierFreq-v9e0"), "dl-CarrierFreq-v9e0"); ok {
		sync.Carrier = uint32(dl) // EARFCN above 65535
	}
	return sync
}

func summarizeLTE(roots *rootTypes, s *Summary, body *uper.Value) error {
	switch s.Message {
	case "rrcConnectionReconfiguration":
		ies := body.Path("criticalExtensions", "c1", "rrcConnectionReconfiguration-r8")
		s.MeasConfig = measConfig(ies.Field("measConfig"), lteMeasObject, lteReportEvent)
		lteMeasConfigExt(ies.Field("measConfig"), s.MeasConfig)
		s.Sync = lteSync(ies)
		var err error
		if s.Conditional, err = lteConditional(roots, ies); err != nil {
			return err
		}
		return lteENDC(s, ies)
	case "measurementReport":
		results := body.Path("criticalExtensions", "c1", "measurementReport-r8", "measResults")
		s.Report = &MeasReport{MeasID: int(results.Field("measId").Integer())}
		if ext, ok := intField(results, "measId-v1250"); ok {
			s.Report.MeasID = int(ext) // measIds 33 to 64
		}
		switch name, list := results.Field("measResultNeighCells").Chosen(); name {
		case "measResultListEUTRA":
			s.Report.Neighbors = neighbors(list, diag.RATLTE, "physCellId")
		case "measResultNeighCellListNR-r15":
			s.Report.Neighbors = neighbors(list, diag.RATNR, "pci-r15")
		}
	case "ulInformationTransferMRDC-r15":
		ies := body.Path("criticalExtensions", "c1", "ulInformationTransferMRDC-r15")
		if nested := ies.Field("ul-DCCH-MessageNR-r15"); nested.Present() {
			nr, err := Summarize(diag.RATNR, diag.ChannelULDCCH, nested.Bytes)
			if err != nil {
				return fmt.Errorf("ul-DCCH-MessageNR-r15: %w", err)
			}
			s.NestedNR = &nr
		}
	case "rrcConnectionReestablishmentRequest":
		s.ReestablishmentCause = body.Path("criticalExtensions", "rrcConnectionReestablishmentRequest-r8", "reestablishmentCause").Enumerant()
	case "systemInformationBlockType1":
		var ids []uper.Value
		for _, info := range body.Path("cellAccessRelatedInfo", "plmn-IdentityList").Items() {
			ids = append(ids, *info.Field("plmn-Identity"))
		}
		s.PLMNs = plmnList(ids)
	case "rrcConnectionSetupComplete":
		s.SelectedPLMN = int(body.Path("criticalExtensions", "c1", "rrcConnectionSetupComplete-r8", "selectedPLMN-Identity").Integer())
	case "rrcConnectionRelease":
		s.Redirect = lteRedirect(body.Path("criticalExtensions", "c1", "rrcConnectionRelease-r8", "redirectedCarrierInfo"))
	}
	return nil
}

// maxEARFCN is the largest value of ARFCN-ValueEUTRA. As a carrier it
// says that the EARFCN, above 65535, is in an extension of the message
// (TS 36.331 6.3.4, ARFCN-ValueEUTRA).
const maxEARFCN = 65535

// lteRedirect is the LTE or NR carrier of an RRCConnectionRelease's
// redirectedCarrierInfo (TS 36.331 6.2.2), nil for none or for a carrier
// of another RAT (GERAN, UTRA, CDMA2000). The extension holding an
// EARFCN above 65535 (redirectedCarrierInfo-v9e0) is in the release's
// lateNonCriticalExtension, which the schema leaves undecoded: such a
// redirection is left out rather than given carrier 65535.
func lteRedirect(info *uper.Value) *diag.Carrier {
	switch name, c := info.Chosen(); name {
	case "eutra":
		if c.Integer() == maxEARFCN {
			return nil
		}
		return &diag.Carrier{RAT: diag.RATLTE, ARFCN: uint32(c.Integer())}
	case "nr-r15":
		return &diag.Carrier{RAT: diag.RATNR, ARFCN: uint32(c.Field("carrierFreq-r15").Integer())}
	case "nr-r17":
		return &diag.Carrier{RAT: diag.RATNR, ARFCN: uint32(c.Field("carrierFreq-r17").Integer())}
	}
	return nil
}

// nrRedirect is the carrier of an RRCRelease's redirectedCarrierInfo (TS
// 38.331 6.2.2): the SSB's NR-ARFCN of an NR carrier, or an EARFCN.
func nrRedirect(info *uper.Value) *diag.Carrier {
	switch name, c := info.Chosen(); name {
	case "nr":
		return &diag.Carrier{RAT: diag.RATNR, ARFCN: uint32(c.Field("carrierFreq").Integer())}
	case "eutra":
		return &diag.Carrier{RAT: diag.RATLTE, ARFCN: uint32(c.Field("eutraFrequency").Integer())}
	}
	return nil
}

// plmnList formats the PLMN identities of a SIB1 in their order. An
// identity without its mcc has the one before it (TS 36.331 and 38.331
// 6.3.4, PLMN-Identity). A list in which one identity is not a PLMN (the
// first without an mcc) is left out whole: the UE's selectedPLMN-Identity
// indexes it, so a list with a gap would resolve to the wrong network.
func plmnList(ids []uper.Value) []string {
	var out []string
	var mcc []int
	for i := range ids {
		if m := ids[i].Field("mcc"); m.Present() {
			mcc = intItems(m)
		}
		p := diag.FormatPLMN(mcc, intItems(ids[i].Field("mnc")))
		if p == "" {
			return nil
		}
		out = append(out, p)
	}
	return out
}

// lteENDC finds nr-Config-r15 at the end of the non-critical extension
// chain (v890 ... v1510) and decodes the NR RRCReconfiguration it carries.
func lteENDC(s *Summary, ies *uper.Value) error {
	for ext := ies; ext.Present(); ext = ext.Field("nonCriticalExtension") {
		switch name, cfg := ext.Field("nr-Config-r15").Chosen(); name {
		case "release":
			s.ENDC = &ENDCConfig{Release: true}
			return nil
		case "setup":
			s.ENDC = &ENDCConfig{ReleaseAndAdd: cfg.Field("endc-ReleaseAndAdd-r15").Integer() == 1}
			if nested := cfg.Field("nr-SecondaryCellGroupConfig-r15"); nested.Present() {
				scg, err := Summarize(diag.RATNR, diag.ChannelRRCReconfiguration, nested.Bytes)
				if err != nil {
					return fmt.Errorf("nr-SecondaryCellGroupConfig-r15: %w", err)
				}
				s.ENDC.SecondaryCellGroup, s.ENDC.nested = &scg, nested.Bytes
			}
			return nil
		}
	}
	return nil
}

func summarizeNR(roots *rootTypes, s *Summary, body *uper.Value) error {
	switch s.Message {
	case "rrcReconfiguration":
		nested, err := summarizeNRReconfiguration(roots, body)
		*s = nested
		return err
	case "measurementReport":
		results := body.Path("criticalExtensions", "measurementReport", "measResults")
		s.Report = &MeasReport{MeasID: int(results.Field("measId").Integer())}
		switch name, list := results.Field("measResultNeighCells").Chosen(); name {
		case "measResultListNR":
			s.Report.Neighbors = neighbors(list, diag.RATNR, "physCellId")
		case "measResultListEUTRA":
			s.Report.Neighbors = neighbors(list, diag.RATLTE, "eutra-PhysCellId")
		}
	case "rrcReestablishmentRequest":
		s.ReestablishmentCause = body.Path("rrcReestablishmentRequest", "reestablishmentCause").Enumerant()
	case "systemInformationBlockType1":
		// The identities of every entry in turn: selectedPLMN-Identity
		// counts them across the entries (TS 38.331 6.2.2,
		// RRCSetupComplete).
		var ids []uper.Value
		for _, info := range body.Path("cellAccessRelatedInfo", "plmn-IdentityInfoList").Items() {
			ids = append(ids, info.Field("plmn-IdentityList").Items()...)
		}
		s.PLMNs = plmnList(ids)
	case "rrcSetupComplete":
		s.SelectedPLMN = int(body.Path("criticalExtensions", "rrcSetupComplete", "selectedPLMN-Identity").Integer())
	case "rrcResume":
		// The resumed connection's measurement configuration (TS 38.331
		// 5.3.13.4).
		s.MeasConfig = measConfig(body.Path("criticalExtensions", "rrcResume", "measConfig"), nrMeasObject, nrReportEvent)
	case "rrcRelease":
		s.Redirect = nrRedirect(body.Path("criticalExtensions", "rrcRelease", "redirectedCarrierInfo"))
	}
	return nil
}

// summarizeNRReconfiguration handles an NR RRCReconfiguration, whether it
// came on DL-DCCH or inside LTE's EN-DC container.
func summarizeNRReconfiguration(roots *rootTypes, msg *uper.Value) (Summary, error) {
	s := Summary{Message: "rrcReconfiguration"}
	ies := msg.Path("criticalExtensions", "rrcReconfiguration")
	s.MeasConfig = measConfig(ies.Field("measConfig"), nrMeasObject, nrReportEvent)
	var err error
	if scg := ies.Field("secondaryCellGroup"); scg.Present() {
		if s.SecondarySync, err = cellGroupSync(roots, scg.Bytes); err != nil {
			return s, fmt.Errorf("secondaryCellGroup: %w", err)
		}
	}
	if mcg := ies.Path("nonCriticalExtension", "masterCellGroup"); mcg.Present() {
		if s.Sync, err = cellGroupSync(roots, mcg.Bytes); err != nil {
			return s, fmt.Errorf("masterCellGroup: %w", err)
		}
	}
	s.Conditional, err = nrConditional(roots, ies)
	return s, err
}

// extension returns the named component of the first non-critical
// extension of ies (itself included) that has it.
func extension(ies *uper.Value, name string) *uper.Value {
	for ext := ies; ext.Present(); ext = ext.Field("nonCriticalExtension") {
		if v := ext.Field(name); v.Present() {
			return v
		}
	}
	return nil
}

// nrConditional reads the conditionalReconfiguration-r16 of
// RRCReconfiguration-v1610-IEs (TS 38.331 6.2.2 and 6.3.2, Rel-16):
// each CondReconfigToAddMod-r16 carries in condRRCReconfig-r16 the
// RRCReconfiguration to apply, whose masterCellGroup names the candidate.
func nrConditional(roots *rootTypes, ies *uper.Value) (*CondReconfig, error) {
	cfg := extension(ies, "conditionalReconfiguration-r16")
	if !cfg.Present() {
		return nil, nil
	}
	c := &CondReconfig{Removed: intItems(cfg.Field("condReconfigToRemoveList-r16")), Attempt: cfg.Field("attemptCondReconfig-r16").Present()}
	for _, item := range cfg.Field("condReconfigToAddModList-r16").Items() {
		cand := CondCandidate{ID: int(item.Field("condReconfigId-r16").Integer())}
		if nested := item.Field("condRRCReconfig-r16"); nested.Present() {
			msg, err := uper.Decode(roots.reconfiguration, nested.Bytes)
			if err != nil {
				return nil, fmt.Errorf("condRRCReconfig-r16 %d: %w", cand.ID, err)
			}
			s, err := summarizeNRReconfiguration(roots, &msg)
			if err != nil {
				return nil, fmt.Errorf("condRRCReconfig-r16 %d: %w", cand.ID, err)
			}
			cand.Target = s.Sync
		}
		c.Added = append(c.Added, cand)
	}
	return c, nil
}

// lteConditional reads the conditionalReconfiguration-r16 of
// RRCConnectionReconfiguration-v1610-IEs (TS 36.331 6.2.2 and 6.3.4,
// Rel-16): each CondReconfigurationAddMod-r16 carries in
// condReconfigurationToApply-r16 the RRCConnectionReconfiguration to
// apply, whose mobilityControlInfo names the candidate.
func lteConditional(roots *rootTypes, ies *uper.Value) (*CondReconfig, error) {
	cfg := extension(ies, "conditionalReconfiguration-r16")
	if !cfg.Present() {
		return nil, nil
	}
	c := &CondReconfig{Removed: intItems(cfg.Field("condReconfigurationToRemoveList-r16")), Attempt: cfg.Field("attemptCondReconf-r16").Present()}
	for _, item := range cfg.Field("condReconfigurationToAddModList-r16").Items() {
		cand := CondCandidate{ID: int(item.Field("condReconfigurationId-r16").Integer())}
		if nested := item.Field("condReconfigurationToApply-r16"); nested.Present() {
			msg, err := uper.Decode(roots.reconfiguration, nested.Bytes)
			if err != nil {
				return nil, fmt.Errorf("condReconfigurationToApply-r16 %d: %w", cand.ID, err)
			}
			cand.Target = lteSync(msg.Path("criticalExtensions", "c1", "rrcConnectionReconfiguration-r8"))
		}
		c.Added = append(c.Added, cand)
	}
	return c, nil
}

// cellGroupSync decodes a CellGroupConfig and returns the target of its
// reconfigurationWithSync, nil when there is none.
func cellGroupSync(roots *rootTypes, encoded []byte) (*SyncTarget, error) {
	cg, err := uper.Decode(roots.cellGroupConfig, encoded)
	if err != nil {
		return nil, fmt.Errorf("CellGroupConfig: %w", err)
	}
	sync := cg.Path("spCellConfig", "reconfigurationWithSync")
	if !sync.Present() {
		return nil, nil
	}
	target := &SyncTarget{}
	common := sync.Field("spCellConfigCommon")
	if pci, ok := intField(common, "physCellId"); ok {
		target.PCI, target.HasPCI = uint16(pci), true
	}
	if ssb, ok := intField(common.Path("downlinkConfigCommon", "frequencyInfoDL"), "absoluteFrequencySSB"); ok {
		target.Carrier = uint32(ssb)
	}
	return target, nil
}

// measConfig extracts the add/modify/remove lists, common to LTE and NR;
// object and event read the RAT-specific choices.
func measConfig(cfg *uper.Value, object func(*uper.Value) MeasObject, event func(*uper.Value) diag.MeasEvent) *MeasConfigDelta {
	if !cfg.Present() {
		return nil
	}
	d := &MeasConfigDelta{
		ObjectsRemoved: intItems(cfg.Field("measObjectToRemoveList")),
		ReportsRemoved: intItems(cfg.Field("reportConfigToRemoveList")),
		MeasIDsRemoved: intItems(cfg.Field("measIdToRemoveList")),
	}
	for _, item := range cfg.Field("measObjectToAddModList").Items() {
		o := object(item.Field("measObject"))
		o.ID = int(item.Field("measObjectId").Integer())
		d.Objects = append(d.Objects, o)
	}
	for _, item := range cfg.Field("reportConfigToAddModList").Items() {
		d.Reports = append(d.Reports, ReportConfig{
			ID:    int(item.Field("reportConfigId").Integer()),
			Event: event(item.Field("reportConfig")),
		})
	}
	for _, item := range cfg.Field("measIdToAddModList").Items() {
		d.MeasIDs = append(d.MeasIDs, MeasIDLink{
			ID:     int(item.Field("measId").Integer()),
			Object: int(item.Field("measObjectId").Integer()),
			Report: int(item.Field("reportConfigId").Integer()),
		})
	}
	return d
}

// lteMeasConfigExt adds LTE's extended lists to d: EARFCNs above 65535
// (Rel-9, item by item over measObjectToAddModList), measIds 33 to 64
// (Rel-12), measurement objects 33 to 64 (Rel-13) and the Rel-13
// re-pointing of measIds to those objects, item by item.
func lteMeasConfigExt(cfg *uper.Value, d *MeasConfigDelta) {
	if !cfg.Present() {
		return
	}
	for i, item := range cfg.Field("measObjectToAddModList-v9e0").Items() {
		if carrier, ok := intField(item.Field("measObjectEUTRA-v9e0"), "carrierFreq-v9e0"); ok && i < len(d.Objects) {
			d.Objects[i].Carrier = uint32(carrier)
		}
	}
	d.ObjectsRemoved = append(d.ObjectsRemoved, intItems(cfg.Field("measObjectToRemoveListExt-r13"))...)
	for _, item := range cfg.Field("measObjectToAddModListExt-r13").Items() {
		o := lteMeasObject(item.Field("measObject-r13"))
		o.ID = int(item.Field("measObjectId-r13").Integer())
		d.Objects = append(d.Objects, o)
	}
	d.MeasIDsRemoved = append(d.MeasIDsRemoved, intItems(cfg.Field("measIdToRemoveListExt-r12"))...)
	repoint(d.MeasIDs, cfg.Field("measIdToAddModList-v1310"))
	var ext []MeasIDLink
	for _, item := range cfg.Field("measIdToAddModListExt-r12").Items() {
		ext = append(ext, MeasIDLink{
			ID:     int(item.Field("measId-v1250").Integer()),
			Object: int(item.Field("measObjectId-r12").Integer()),
			Report: int(item.Field("reportConfigId-r12").Integer()),
		})
	}
	repoint(ext, cfg.Field("measIdToAddModListExt-v1310"))
	d.MeasIDs = append(d.MeasIDs, ext...)
}

// repoint applies a list of MeasIdToAddMod-v1310, parallel to links, whose
// items may move a measId to an object numbered 33 to 64.
func repoint(links []MeasIDLink, v1310 *uper.Value) {
	for i, item := range v1310.Items() {
		if object, ok := intField(&item, "measObjectId-v1310"); ok && i < len(links) {
			links[i].Object = int(object)
		}
	}
}

// lteMeasObject reads a MeasObjectToAddMod measObject, or the
// measObject-r13 of the extended list (whose alternatives are suffixed).
func lteMeasObject(choice *uper.Value) MeasObject {
	switch name, o := choice.Chosen(); name {
	case "measObjectEUTRA", "measObjectEUTRA-r13":
		return MeasObject{RAT: diag.RATLTE, Carrier: uint32(o.Field("carrierFreq").Integer())}
	case "measObjectNR-r15":
		return MeasObject{RAT: diag.RATNR, Carrier: uint32(o.Field("carrierFreq-r15").Integer())}
	}
	return MeasObject{}
}

func nrMeasObject(choice *uper.Value) MeasObject {
	switch name, o := choice.Chosen(); name {
	case "measObjectNR":
		ssb, _ := intField(o, "ssbFrequency")
		return MeasObject{RAT: diag.RATNR, Carrier: uint32(ssb)}
	case "measObjectEUTRA":
		return MeasObject{RAT: diag.RATLTE, Carrier: uint32(o.Field("carrierFreq").Integer())}
	}
	return MeasObject{}
}

func lteReportEvent(choice *uper.Value) diag.MeasEvent {
	_, cfg := choice.Chosen()
	name, _ := cfg.Path("triggerType", "event", "eventId").Chosen()
	return eventOf(name)
}

func nrReportEvent(choice *uper.Value) diag.MeasEvent {
	_, cfg := choice.Chosen()
	name, _ := cfg.Path("reportType", "eventTriggered", "eventId").Chosen()
	return eventOf(name)
}

// neighbors lists the reported cells that carry a PCI.
func neighbors(list *uper.Value, rat diag.RAT, pciField string) []NeighborCell {
	var out []NeighborCell
	for _, item := range list.Items() {
		if pci, ok := intField(&item, pciField); ok {
			out = append(out, NeighborCell{RAT: rat, PCI: uint16(pci)})
		}
	}
	return out
}
