// Package rrc turns LTE and NR RRC messages (3GPP TS 36.331, TS 38.331)
// into the handover events of pkg/diag: measurement reports resolved
// through the measConfig in force, handover commands (primary cell and
// EN-DC secondary cell group), their completion (that of a command the
// log lost included), re-establishments and connection releases.
//
// PDUs are decoded natively with the schema-driven UPER reader of
// pkg/diag/rrc/uper; the schemas are data generated from the 3GPP ASN.1.
package rrc

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
)

// ErrUnresolvedMeasID means a measurement report names a measId that no
// measConfig seen so far defines (the capture started mid-connection).
var ErrUnresolvedMeasID = errors.New("rrc: measId not configured")

// Reasons of the *diag.ParseError values Decode returns, for
// diag.Stats.CountError.
const (
	// ReasonMalformed: the PDU does not decode (or its RAT is unknown).
	ReasonMalformed = "rrc_malformed"
	// ReasonUnresolvedMeasID: a report names a measId no measConfig seen
	// so far defines.
	ReasonUnresolvedMeasID = "rrc_unresolved_meas_id"
)

// measState is the measurement configuration in force for one RAT.
type measState struct {
	objects map[int]MeasObject
	reports map[int]diag.MeasEvent
	measIDs map[int]MeasIDLink
}

func newMeasState() *measState {
	return &measState{objects: map[int]MeasObject{}, reports: map[int]diag.MeasEvent{}, measIDs: map[int]MeasIDLink{}}
}

// apply updates the configuration in the order of TS 36.331 5.5.2 /
// TS 38.331 5.5.2: objects, report configurations, then measIds.
// Removing an object or a report configuration removes the measIds that
// use it.
func (m *measState) apply(d *MeasConfigDelta) {
	if d == nil {
		return
	}
	for _, id := range d.ObjectsRemoved {
		delete(m.objects, id)
		m.dropMeasIDs(func(l MeasIDLink) bool { return l.Object == id })
	}
	for _, o := range d.Objects {
		if prev, ok := m.objects[o.ID]; ok && o.Carrier == 0 && o.RAT == prev.RAT {
			o.Carrier = prev.Carrier // a modification that leaves the carrier as it was
		}
		m.objects[o.ID] = o
	}
	for _, id := range d.ReportsRemoved {
		delete(m.reports, id)
		m.dropMeasIDs(func(l MeasIDLink) bool { return l.Report == id })
	}
	for _, r := range d.Reports {
		m.reports[r.ID] = r.Event
	}
	for _, id := range d.MeasIDsRemoved {
		delete(m.measIDs, id)
	}
	for _, l := range d.MeasIDs {
		m.measIDs[l.ID] = l
	}
}

// followHandover re-links measIds after a handover from carrier source to
// carrier target (TS 36.331 / TS 38.331 5.5.6.1): measIds of the source
// carrier's object move to the target carrier's object and back; without
// an object for the target carrier, those of the source carrier go.
func (m *measState) followHandover(rat diag.RAT, source, target uint32) {
	if source == target {
		return
	}
	sourceObj, hasSource := m.objectOn(rat, source)
	if !hasSource {
		return
	}
	targetObj, hasTarget := m.objectOn(rat, target)
	if !hasTarget {
		m.dropMeasIDs(func(l MeasIDLink) bool { return l.Object == sourceObj })
		return
	}
	for id, l := range m.measIDs {
		switch l.Object {
		case sourceObj:
			l.Object = targetObj
		case targetObj:
			l.Object = sourceObj
		default:
			continue
		}
		m.measIDs[id] = l
	}
}

// objectOn returns the measurement object of a carrier, the lowest
// numbered when several share it.
func (m *measState) objectOn(rat diag.RAT, carrier uint32) (int, bool) {
	found, ok := 0, false
	for id, o := range m.objects {
		if o.RAT == rat && o.Carrier == carrier && (!ok || id < found) {
			found, ok = id, true
		}
	}
	return found, ok
}

func (m *measState) dropMeasIDs(match func(MeasIDLink) bool) {
	for id, l := range m.measIDs {
		if match(l) {
			delete(m.measIDs, id)
		}
	}
}

// ratState is the per-RAT connection state.
type ratState struct {
	meas    *connectionMeas
	serving diag.Cell
	// servingPCIUnknown: the transport named the serving carrier but not
	// the cell (GSMTAP v2), and no signalling named it since.
	servingPCIUnknown bool
	// connected: dedicated signalling was seen since the last connection
	// release or establishment, the last at lastDedicated.
	connected     bool
	lastDedicated time.Time
	// lastMessage is when the last message of the RAT came.
	lastMessage time.Time
	// pending are the targets of handover commands awaiting their
	// reconfiguration complete.
	pending []diag.Cell
	// conditional are the stored conditional handover configurations:
	// the candidate cell of each, by identity. conditionalAttempt: the UE
	// may execute one after a failure (attemptCondReconfig).
	conditional        map[int]diag.Cell
	conditionalAttempt bool
	// awaitingComplete: a reconfiguration the network sent still awaits
	// its complete, which is then no conditional handover's.
	awaitingComplete bool
	// bearers: a reconfiguration of the connection completed since it
	// was set up or re-established. The network sends a handover command
	// only once SRB2 and a data bearer are set up and not suspended (TS
	// 36.331 and 38.331 5.3.5.2), which takes a reconfiguration after the
	// setup, and after a re-establishment, which suspends them until one
	// resumes them (TS 36.331 and 38.331 5.3.7.1).
	bearers bool
	// plmns are the networks of the last SIB1 of the RAT, which a
	// connection setup complete selects from, and plmnsCell its cell
	// (zero when the transport named none).
	plmns     []string
	plmnsCell diag.Cell
}

// observeServing updates the serving cell from the cell msg was exchanged
// with. A transport without PCIs (GSMTAP v2) names only the carrier: the
// cell stays the one the signalling named last (a handover's target) while
// the connection stays on that carrier, and is unknown once the carrier
// changes, a connection is set up or re-established (CCCH), or the UE is
// paged while idle (PCCH after a release, or pagedIdleAfter after the last
// dedicated message when the release was not logged: idle UEs reselect
// cells unannounced), or the log was silent (or jumped back) for
// silentAfter; each may be on another cell of the carrier. Cells of
// unknown PCI are never keyed as PCI 0.
func (st *ratState) observeServing(msg diag.RRCMessage) {
	silent := msg.Time.Sub(st.lastMessage).Abs() > silentAfter
	st.lastMessage = msg.Time
	switch {
	case msg.PCIUnknown:
		if msg.ARFCN == 0 {
			return
		}
		idle := !st.connected || msg.Time.Sub(st.lastDedicated) > pagedIdleAfter
		mayHaveMoved := silent || msg.Channel == diag.ChannelULCCCH || msg.Channel == diag.ChannelDLCCCH ||
			msg.Channel == diag.ChannelPCCH && idle
		if st.serving.RAT == msg.RAT && st.serving.ARFCN == msg.ARFCN && !mayHaveMoved {
			return
		}
		st.serving = diag.Cell{RAT: msg.RAT, ARFCN: msg.ARFCN}.Normalized()
		st.servingPCIUnknown = true
	case msg.PCI != 0 || msg.ARFCN != 0:
		st.serving = diag.Cell{RAT: msg.RAT, PCI: msg.PCI, ARFCN: msg.ARFCN}.Normalized()
		st.servingPCIUnknown = false
	}
}

// pagedIdleAfter: paging this long after the last dedicated message
// means the UE is idle even without a logged release. Connected UEs
// exchange dedicated messages (reports, reconfigurations) while moving;
// idle ones are paged every paging cycle (0.32 to 2.56 s).
const pagedIdleAfter = 5 * time.Second

// silentAfter: a log silent this long (a capture paused, messages lost)
// may resume anywhere.
const silentAfter = time.Minute

// followConnection tracks whether the UE is connected, from the channel
// and the name of msg.
func (st *ratState) followConnection(msg diag.RRCMessage, message string) {
	switch {
	case isRelease(message):
		st.connected = false
	case msg.Channel == diag.ChannelULCCCH || msg.Channel == diag.ChannelDLCCCH:
		st.connected = false
	case msg.Channel == diag.ChannelULDCCH || msg.Channel == diag.ChannelDLDCCH:
		st.connected, st.lastDedicated = true, msg.Time
	}
}

// observeUnnamed follows a message of a channel that carries nothing
// else m2ho uses, from a transport that names no PCI: its carrier, and
// its channel's word on the connection.
func (st *ratState) observeUnnamed(msg diag.RRCMessage) {
	st.observeServing(msg)
	st.followConnection(msg, "")
}

// servingCell is the serving cell as events name it: zero (unknown) while
// its PCI is unknown.
func (st *ratState) servingCell() diag.Cell {
	if st.servingPCIUnknown {
		return diag.Cell{}
	}
	return st.serving
}

// Decoder is the stateful RRC decoder of one modem. It is not safe for
// concurrent use: feed it the modem's messages in order.
type Decoder struct {
	logger *slog.Logger
	state  map[diag.RAT]*ratState
	// scg is the secondary cell (EN-DC, or NR-DC) in force, zero when
	// none. scgMerged is the one as if no connection had ended since the
	// last release the log confirmed, the counterpart of
	// connectionMeas.merged: it comes back when the log proves that the
	// releases since were another connection's (undoRelease).
	scg, scgMerged diag.Cell
	// released: of the messages that start or end a connection, the
	// last was a release, which no message since confirmed or undid
	// (followRelease).
	released bool
	// lastSCGReconfig is the last NR RRCReconfiguration handled for the
	// secondary cell group, received at lastSCGReconfigAt. Modems log it
	// twice, inside the LTE container and on its own, in either order a
	// few ms apart: the second copy must not count as a second procedure.
	lastSCGReconfig   []byte
	lastSCGReconfigAt time.Time
	// reportSeen is told of every measurement report (ObserveReports).
	reportSeen func(ReportSeen)
	// network is the PLMN the UE registered with (Network).
	network string
}

// ReportSeen is one measurement report as the decoder resolved it,
// including those that yield no event: periodical reports and reports
// whose measId no measConfig seen so far defines.
type ReportSeen struct {
	Time   time.Time
	RAT    diag.RAT
	MeasID int
	// Resolved: the measId names a report configuration in force.
	Resolved bool
	// Event is the trigger of a resolved report; empty for periodical
	// reports and other triggers m2ho does not follow.
	Event diag.MeasEvent
}

// ObserveReports makes the decoder call fn with every measurement report
// it decodes, before it returns the report's events (nil: none). Events
// leave out the reports that carry nothing to predict from; whoever
// judges prediction on a capture needs to know that they were there.
func (d *Decoder) ObserveReports(fn func(ReportSeen)) { d.reportSeen = fn }

// scgCopySpread bounds how far apart the two copies of one SCG
// reconfiguration are logged. In the shared EN-DC captures the copies are
// at most 5.4 ms apart and two distinct SCG reconfigurations at least
// 80 ms apart: the network sends the next one only after the UE completed
// the previous one and reported again. The same bytes beyond this spread
// are a new procedure (the network re-adding the same configuration in
// a new connection, or after a release and setup the log missed).
const scgCopySpread = 50 * time.Millisecond

// repeatsSCGReconfig reports whether pdu, received at at, is the second
// copy of the last SCG reconfiguration; otherwise it remembers pdu as the
// last one.
func (d *Decoder) repeatsSCGReconfig(pdu []byte, at time.Time) bool {
	if d.lastSCGReconfig != nil && bytes.Equal(pdu, d.lastSCGReconfig) && at.Sub(d.lastSCGReconfigAt).Abs() <= scgCopySpread {
		return true
	}
	d.lastSCGReconfig = bytes.Clone(pdu) // the transport may reuse its buffer
	d.lastSCGReconfigAt = at
	return false
}

// forgetSCGReconfig ends the SCG the last reconfiguration configured: a
// later addition with the same bytes (a cell edge ping-pong keeps the
// C-RNTI and the configuration) is a new procedure, not a copy.
func (d *Decoder) forgetSCGReconfig() {
	d.lastSCGReconfig, d.lastSCGReconfigAt = nil, time.Time{}
}

// NewDecoder returns a decoder with no measurement configuration yet.
func NewDecoder(logger *slog.Logger) *Decoder {
	if logger == nil {
		logger = slog.Default()
	}
	// Parse the embedded schemas now rather than on the first message; a
	// broken schema fails every Decode with this same error.
	if _, err := loadSchemas(); err != nil {
		logger.Error("rrc: schemas unusable, no RRC message will decode", "err", err)
	}
	return &Decoder{
		logger: logger,
		state: map[diag.RAT]*ratState{
			diag.RATLTE: {meas: newConnectionMeas()},
			diag.RATNR:  {meas: newConnectionMeas()},
		},
	}
}

var _ diag.RRCDecoder = (*Decoder)(nil)

// Decode decodes one RRC PDU, updates the connection state and returns
// the events it implies (often none). PDUs of channels that carry nothing
// m2ho uses (master information, paging, connection setup) are ignored;
// of the system information, only the networks of SIB1. Errors are
// *diag.ParseError values (ReasonMalformed, ReasonUnresolvedMeasID); a
// PDU that does not decode leaves the state unchanged.
func (d *Decoder) Decode(msg diag.RRCMessage) ([]diag.Event, error) {
	if _, ok := d.state[msg.RAT]; !ok {
		return nil, &diag.ParseError{Reason: ReasonMalformed, Err: fmt.Errorf("rrc: unknown RAT %q", msg.RAT)}
	}
	if msg.Channel == diag.ChannelBCCHDLSCH {
		return d.systemInformation(msg)
	}
	s, err := Summarize(msg.RAT, msg.Channel, msg.PDU)
	switch {
	case errors.Is(err, ErrUnsupportedChannel):
		if msg.PCIUnknown {
			// Paging and connection setup say the serving cell may have
			// changed, when no PCI does.
			d.state[msg.RAT].observeUnnamed(msg)
		}
		return nil, nil
	case err != nil:
		return nil, &diag.ParseError{Reason: ReasonMalformed, Err: err}
	}
	events, err := d.handle(msg, &s)
	if err != nil {
		return nil, &diag.ParseError{Reason: ReasonUnresolvedMeasID, Err: err}
	}
	return events, nil
}

// Network returns the PLMN the UE registered with at its last connection
// setup, "MCC-MNC"; "" until one was seen.
func (d *Decoder) Network() string { return d.network }

// systemInformation keeps the networks of a SIB1 for the connection
// setup that selects among them. A SIB1 alone does not say the UE is in
// its network: a UE searching for networks reads the SIB1 of every
// operator's cells it finds (the shared captures hold such searches,
// four operators within seconds), and a cell shared by several
// operators lists each.
func (d *Decoder) systemInformation(msg diag.RRCMessage) ([]diag.Event, error) {
	st := d.state[msg.RAT]
	if msg.PCIUnknown {
		// Like paging, system information says the serving cell may
		// have changed.
		st.observeUnnamed(msg)
	}
	s, err := Summarize(msg.RAT, msg.Channel, msg.PDU)
	if err != nil {
		return nil, &diag.ParseError{Reason: ReasonMalformed, Err: err}
	}
	if len(s.PLMNs) > 0 {
		st.plmns, st.plmnsCell = s.PLMNs, namedCell(msg)
	}
	return nil, nil
}

// namedCell is the cell the transport says msg was exchanged with, zero
// when it names none.
func namedCell(msg diag.RRCMessage) diag.Cell {
	if msg.PCIUnknown || (msg.PCI == 0 && msg.ARFCN == 0) {
		return diag.Cell{}
	}
	return diag.Cell{RAT: msg.RAT, PCI: msg.PCI, ARFCN: msg.ARFCN}.Normalized()
}

// selectedNetwork takes the network a connection setup complete
// registers with: its selectedPLMN-Identity indexes the networks of the
// SIB1 of the cell it connects in (TS 36.331 and 38.331 5.3.3.4), the
// last one read. An index beyond them, or a SIB1 of another cell (the
// log missed the one of this cell), says nothing.
func (d *Decoder) selectedNetwork(msg diag.RRCMessage, st *ratState, index int) []diag.Event {
	if index < 1 || index > len(st.plmns) {
		return nil
	}
	cell := namedCell(msg)
	if !cell.IsZero() && !st.plmnsCell.IsZero() && cell.Key() != st.plmnsCell.Key() {
		return nil
	}
	return d.setNetwork(msg.Time, st.plmns[index-1], st.servingCell())
}

// setNetwork returns a network event when plmn is not the network the
// UE was in.
func (d *Decoder) setNetwork(at time.Time, plmn string, cell diag.Cell) []diag.Event {
	if plmn == d.network {
		return nil
	}
	d.network = plmn
	return []diag.Event{{Type: diag.TypeNetwork, Time: at, PLMN: plmn, Cell: cell}}
}

// handle applies one summarised message to the connection state.
func (d *Decoder) handle(msg diag.RRCMessage, s *Summary) ([]diag.Event, error) {
	st := d.state[msg.RAT]
	before := st.servingCell()
	// The serving cell may be anywhere after a silence (observeServing).
	silent := msg.Time.Sub(st.lastMessage).Abs() > silentAfter
	st.observeServing(msg)
	st.followConnection(msg, s.Message)
	d.followRelease(msg)
	switch {
	case s.Report != nil:
		return d.measReport(msg.Time, msg.RAT, st.servingCell(), s.Report)
	case s.NestedNR != nil && s.NestedNR.Report != nil:
		// An EN-DC NR report relayed by LTE: the NR cell serving is the
		// secondary cell.
		serving := d.scg
		if serving.IsZero() {
			serving = d.state[diag.RATNR].servingCell()
		}
		return d.measReport(msg.Time, diag.RATNR, serving, s.NestedNR.Report)
	case s.SelectedPLMN != 0:
		return d.selectedNetwork(msg, st, s.SelectedPLMN), nil
	case s.ReestablishmentCause != "":
		// Re-establishment abandons pending handovers and, on LTE, the
		// EN-DC secondary cell group (TS 36.331 5.3.7.2); the stored
		// conditional handovers too, unless the UE may execute one
		// instead (attemptCondReconfig, TS 38.331 5.3.7.3).
		st.pending, st.bearers = nil, false
		if !st.conditionalAttempt {
			st.conditional = nil
		}
		if msg.RAT == diag.RATLTE {
			d.setSCG(diag.Cell{})
			d.forgetSCGReconfig()
		}
		return []diag.Event{{Type: diag.TypeHOFailure, Time: msg.Time, Cause: failureCause(s.ReestablishmentCause)}}, nil
	case s.Message == "rrcConnectionReconfigurationComplete" || s.Message == "rrcReconfigurationComplete":
		awaited, bearers := st.awaitingComplete, st.bearers
		st.awaitingComplete, st.bearers = false, true
		switch {
		case len(st.pending) == 0 && len(st.conditional) > 0:
			return d.conditionalExecution(msg, st, before, awaited), nil
		case len(st.pending) == 0 && !awaited && bearers && !silent && msg.Channel == diag.ChannelULDCCH:
			return d.lostCommand(msg, st, before), nil
		}
		var events []diag.Event
		for _, target := range st.pending {
			events = append(events, diag.Event{Type: diag.TypeHOComplete, Time: msg.Time, Cell: target})
			if target.RAT == msg.RAT {
				st.serving, st.servingPCIUnknown = target, false
			}
		}
		st.pending = nil
		return events, nil
	case s.Message == "rrcConnectionReconfiguration" || s.Message == "rrcReconfiguration":
		return d.reconfiguration(msg, st, s), nil
	case leavesConnection(msg.RAT, s.Message):
		d.resetConnection(msg.RAT)
		d.released = isRelease(s.Message)
		st.meas.apply(s.MeasConfig) // an NR resume carries the new one
		var events []diag.Event
		if len(st.conditional) > 0 {
			// Leaving RRC_CONNECTED releases the stored conditional
			// handovers (TS 38.331 5.3.11): none will execute.
			st.conditional = nil
			events = append(events, diag.Event{Type: diag.TypeCHOConfig, Time: msg.Time, Serving: before})
		}
		if d.released {
			events = append(events, release(msg, st.servingCell(), s.Redirect))
		}
		return events, nil
	}
	return nil, nil
}

// isRelease: the message releases (or, NR, suspends) the RRC connection.
func isRelease(message string) bool {
	return message == "rrcConnectionRelease" || message == "rrcRelease"
}

// release is the rrc_release event of a connection release the network
// sent on cell, redirecting the UE to redirect when not nil. Whatever
// procedure of the connection was under way ends with it (TS 36.331
// 5.3.12, TS 38.331 5.3.11): a handover pending or predicted will not
// come, and no data flows until the UE connects again. An NR release
// with suspendConfig, which moves the UE to RRC_INACTIVE, is one too:
// the UE suspends every radio bearer but SRB0 (TS 38.331 5.3.8.3) until
// an RRCResume, which the decoder takes as a new connection
// (leavesConnection). A release the log later proves to be another
// subscription's (undoRelease) was told all the same: what it ended of
// this connection's prediction does not come back.
func release(msg diag.RRCMessage, cell diag.Cell, redirect *diag.Carrier) diag.Event {
	ev := diag.Event{Type: diag.TypeRRCRelease, Time: msg.Time, Cell: cell}
	if redirect != nil {
		ev.Redirect = *redirect
	}
	return ev
}

// applyConditional updates the stored conditional handovers of rat with
// c (removals first, TS 38.331 5.3.5.13.2 and 5.3.5.13.3) and returns a
// cho_config event when their candidates changed. A modification
// without a new reconfiguration keeps the stored one's candidate; a
// configuration that changes no primary cell (a conditional PSCell
// change) has none and predicts nothing here.
func (st *ratState) applyConditional(at time.Time, rat diag.RAT, c *CondReconfig) []diag.Event {
	if c == nil {
		return nil
	}
	before := st.candidates()
	for _, id := range c.Removed {
		delete(st.conditional, id)
	}
	for _, cand := range c.Added {
		if cand.Target == nil {
			continue
		}
		if st.conditional == nil {
			st.conditional = map[int]diag.Cell{}
		}
		st.conditional[cand.ID] = syncCell(rat, cand.Target, st.serving)
	}
	st.conditionalAttempt = c.Attempt
	after := st.candidates()
	if slices.Equal(before, after) {
		return nil
	}
	return []diag.Event{{Type: diag.TypeCHOConfig, Time: at, Serving: st.servingCell(), Candidates: after}}
}

// candidates are the stored conditional handovers' cells in the order of
// their identities, each once.
func (st *ratState) candidates() []diag.Cell {
	ids := slices.Sorted(maps.Keys(st.conditional))
	var out []diag.Cell
	for _, id := range ids {
		if c := st.conditional[id]; !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// conditionalExecution recognises, in a reconfiguration complete that no
// command awaits, the UE executing a stored conditional handover (TS
// 38.331 5.3.5.13.4; LTE's Rel-16 CHO alike): the complete goes to the
// candidate, after its random access. The candidate is the cell the log
// says the complete went to; a log that names no cell points to the only
// candidate, unless a reconfiguration of the network awaited that
// complete. Executing one releases every stored configuration.
func (d *Decoder) conditionalExecution(msg diag.RRCMessage, st *ratState, before diag.Cell, awaited bool) []diag.Event {
	var target diag.Cell
	cands := st.candidates()
	switch {
	case !msg.PCIUnknown && (msg.PCI != 0 || msg.ARFCN != 0):
		sent := diag.Cell{RAT: msg.RAT, PCI: msg.PCI, ARFCN: msg.ARFCN}.Normalized()
		if sent.Key() == before.Key() {
			return nil // the complete of a reconfiguration on the serving cell
		}
		i := slices.IndexFunc(cands, func(c diag.Cell) bool { return c.Key() == sent.Key() })
		if i < 0 {
			return nil
		}
		target = cands[i]
	case !awaited && len(cands) == 1:
		target = cands[0]
	default:
		return nil
	}
	st.conditional, st.conditionalAttempt = nil, false
	st.serving, st.servingPCIUnknown = target, false
	if before.RAT == msg.RAT && before.ARFCN != 0 {
		st.meas.followHandover(msg.RAT, before.ARFCN, target.ARFCN)
	}
	return []diag.Event{
		{Type: diag.TypeHOCommand, Time: msg.Time, Kind: diag.HOPCell, Source: before, Target: target, Conditional: true},
		{Type: diag.TypeHOComplete, Time: msg.Time, Cell: target},
	}
}

// lostCommand recognises, in a reconfiguration complete that no
// reconfiguration the log holds awaits, the completion of a handover
// whose command the log lost: the UE answers a handover command (LTE
// mobilityControlInfo, NR reconfigurationWithSync) with its complete on
// the target cell, after its random access there (TS 36.331 5.3.5.4,
// TS 38.331 5.3.5.3 and 5.3.5.5.2), and answers any other
// reconfiguration on the cell it is served by. A complete from a cell
// the transport names, other than the serving ones (the primary cell,
// and the EN-DC secondary cell, which NR messages name), completes a
// handover to that cell, on a connection that could be handed over
// (ratState.bearers) and in a log that was not silent since it named
// the serving cell. Without a cell, or without a serving cell to tell it
// from, the complete says nothing. Only a complete the UE sent on the
// RAT's own signalling bearer counts: the copy a modem logs of the NR
// complete an LTE complete carries (EN-DC) answers the LTE
// reconfiguration, which the LTE complete itself completes.
//
// The measIds follow the handover as its command would have made them
// (TS 36.331 and 38.331 5.5.6.1); what else the lost command
// configured (measurements, the secondary cell group) stays unknown
// until the network configures it again.
func (d *Decoder) lostCommand(msg diag.RRCMessage, st *ratState, before diag.Cell) []diag.Event {
	target := namedCell(msg)
	if target.IsZero() || before.IsZero() || target.Key() == before.Key() || target.Key() == d.scg.Key() {
		return nil
	}
	if before.ARFCN != 0 {
		st.meas.followHandover(msg.RAT, before.ARFCN, target.ARFCN)
	}
	return []diag.Event{{Type: diag.TypeHOComplete, Time: msg.Time, Cell: target}}
}

// leavesConnection reports whether a message ends the RRC connection the
// measConfig belongs to, or starts a new one: a release (TS 36.331
// 5.3.8, TS 38.331 5.3.8), a connection (or setup) request (the UE is
// idle, even when the log missed the release), and an NR resume, whose
// measurement configuration the network sends again.
func leavesConnection(rat diag.RAT, message string) bool {
	if rat == diag.RATLTE {
		return message == "rrcConnectionRelease" || message == "rrcConnectionRequest"
	}
	return message == "rrcRelease" || message == "rrcSetupRequest" || message == "rrcResume"
}

// resetConnection ends what belongs to the connection of rat. Leaving
// RRC_CONNECTED releases all radio resources and stops every timer of a
// procedure under way (TS 36.331 5.3.8.1 and 5.3.12, TS 38.331 5.3.8.1
// and 5.3.11):
//   - the measurement configuration starts afresh, so a report of the
//     next connection resolves only through what that connection
//     configured;
//   - the secondary cell group goes with the connection (38.331 5.3.11
//     also discards its keys, S-KgNB and S-KeNB, and its conditional
//     configurations), so the next connection's SCG addition is an
//     addition, and no SCG release or change starts from the old cell;
//   - no handover of the connection completes any more (T304 of either
//     cell group stops): a later complete answers a reconfiguration of
//     the next connection, on whatever cell it was set up in.
//
// Leaving an LTE connection also ends the NR measConfig and
// reconfigurations of its EN-DC secondary cell group. The serving cells
// stay: an idle UE camps on a cell, and the next connection's messages
// name theirs (observeServing).
// A release of another connection in the same log (see connectionMeas)
// is undone by undoRelease.
func (d *Decoder) resetConnection(rat diag.RAT) {
	ended := []diag.RAT{rat}
	if rat == diag.RATLTE {
		ended = append(ended, diag.RATNR)
	}
	for _, r := range ended {
		st := d.state[r]
		st.meas.reset()
		st.pending, st.awaitingComplete, st.bearers = nil, false, false
	}
	d.scg = diag.Cell{}
}

// followRelease tells from the message after a release whose
// connection the release ended. A UE that left RRC_CONNECTED exchanges
// nothing dedicated until it has requested a new connection (or its
// resumption, or a re-establishment) on CCCH (TS 36.331 and 38.331
// 5.3.3, 5.3.7, 5.3.13): a request after the release confirms it;
// dedicated signalling before any request proves that the connection
// going on is not the one the release ended.
func (d *Decoder) followRelease(msg diag.RRCMessage) {
	if !d.released {
		return
	}
	switch msg.Channel {
	case diag.ChannelULCCCH:
		d.released = false
		d.scgMerged = d.scg
	case diag.ChannelDLDCCH, diag.ChannelULDCCH, diag.ChannelRRCReconfiguration, diag.ChannelRRCReconfigurationComplete:
		d.released = false
		d.undoRelease()
	}
}

// undoRelease brings back the secondary cell that connection requests
// and releases ended since the last confirmed release, once the log
// proved them another connection's: a modem logs the signalling of its
// other subscriptions in the same stream when the transport drops the
// subscription (see connectionMeas), a request, a setup and a release
// within 150 ms in the shared EN-DC captures. Dedicated signalling right
// after the release (followRelease) proves it, and so does a report that
// only the measConfig from before resolves. Handovers awaiting their
// completion are not brought back: they last tens of ms, where an SCG
// lasts until the network releases it.
func (d *Decoder) undoRelease() {
	d.scg = d.scgMerged
}

// setSCG sets the secondary cell after a procedure of the connection.
func (d *Decoder) setSCG(c diag.Cell) {
	d.scg, d.scgMerged = c, c
}

// measReport resolves a report's measId through the measConfig of rat:
// the event from the report configuration, the neighbour's carrier from
// the measurement object.
func (d *Decoder) measReport(at time.Time, rat diag.RAT, serving diag.Cell, r *MeasReport) ([]diag.Event, error) {
	meas, restored, err := d.state[rat].meas.resolving(r.MeasID)
	if restored {
		d.undoRelease()
	}
	seen := ReportSeen{Time: at, RAT: rat, MeasID: r.MeasID, Resolved: err == nil}
	if err != nil {
		if d.reportSeen != nil {
			d.reportSeen(seen)
		}
		return nil, fmt.Errorf("%w: %s %w", ErrUnresolvedMeasID, rat, err)
	}
	link := meas.measIDs[r.MeasID]
	event := meas.reports[link.Report]
	if d.reportSeen != nil {
		seen.Event = event
		d.reportSeen(seen)
	}
	if event == "" {
		return nil, nil // periodical or another trigger m2ho does not follow
	}
	ev := diag.Event{Type: diag.TypeMeasReport, Time: at, Meas: event, Serving: serving}
	object := meas.objects[link.Object]
	for _, n := range r.Neighbors {
		if n.RAT == object.RAT {
			ev.Neighbor = diag.Cell{RAT: n.RAT, PCI: n.PCI, ARFCN: object.Carrier}.Normalized()
			break
		}
	}
	return []diag.Event{ev}, nil
}

// reconfiguration applies a (NR)RRC(Connection)Reconfiguration: the
// mobility it orders and its measConfig, in the order of TS 36.331
// 5.3.5.4 / TS 38.331 5.3.5.5 (measIds follow the handover first).
func (d *Decoder) reconfiguration(msg diag.RRCMessage, st *ratState, s *Summary) []diag.Event {
	var events []diag.Event
	command := func(kind diag.HOKind, source, target diag.Cell) {
		events = append(events, diag.Event{Type: diag.TypeHOCommand, Time: msg.Time, Kind: kind, Source: source, Target: target})
	}
	// anchor is the primary cell once this reconfiguration executed: the
	// serving cell changes only at the completion, so a handover ordered
	// by the same message must name its target here.
	anchor := st.servingCell()
	st.awaitingComplete = true
	if msg.RAT == diag.RATNR && msg.Channel == diag.ChannelRRCReconfiguration {
		// The copy a modem logs of an EN-DC container's NR
		// reconfiguration: the LTE reconfiguration that carried it awaits
		// its complete too, even when the log lost that reconfiguration.
		d.state[diag.RATLTE].awaitingComplete = true
	}
	if s.Sync != nil {
		// A handover the network orders releases the stored conditional
		// ones (TS 38.331 5.3.5.5.2): its command ends their prediction.
		st.conditional = nil
		// The carrier of an intra-frequency target is the serving one.
		// Its PCI is known even from GSMTAP v2: mobilityControlInfo
		// always names targetPhysCellId.
		target := syncCell(msg.RAT, s.Sync, st.serving)
		anchor = target
		command(diag.HOPCell, st.servingCell(), target)
		st.pending = append(st.pending, target)
		if st.serving.RAT == msg.RAT && st.serving.ARFCN != 0 {
			st.meas.followHandover(msg.RAT, st.serving.ARFCN, target.ARFCN)
		}
	}
	st.meas.apply(s.MeasConfig)
	events = append(events, st.applyConditional(msg.Time, msg.RAT, s.Conditional)...)
	if msg.RAT == diag.RATLTE && s.ENDC != nil {
		nested := s.ENDC.SecondaryCellGroup
		if nested != nil {
			d.state[diag.RATNR].meas.apply(nested.MeasConfig)
			if d.repeatsSCGReconfig(s.ENDC.nested, msg.Time) {
				d.logger.Debug("rrc: EN-DC container repeats the SCG reconfiguration logged on its own", "time", msg.Time)
				return events
			}
		}
		if s.ENDC.Release && nested == nil {
			// A release-and-add carries the new SCG's reconfiguration,
			// remembered above; a plain release leaves none.
			d.forgetSCGReconfig()
		}
		if s.ENDC.Release || s.ENDC.ReleaseAndAdd {
			if !d.scg.IsZero() {
				// The data path moves to the LTE anchor, the release's
				// target: the new one when the message also hands the
				// anchor over.
				command(diag.HOSCGRelease, d.scg, anchor)
			}
			d.setSCG(diag.Cell{})
		}
		if nested != nil {
			events = append(events, d.secondarySync(msg, st, nested.SecondarySync)...)
		}
		return events
	}
	if msg.RAT == diag.RATNR && s.SecondarySync != nil {
		if msg.Channel == diag.ChannelRRCReconfiguration && d.repeatsSCGReconfig(msg.PDU, msg.Time) {
			d.logger.Debug("rrc: SCG reconfiguration repeats the one of its EN-DC container", "time", msg.Time)
			return events
		}
		events = append(events, d.secondarySync(msg, st, s.SecondarySync)...)
	}
	return events
}

// secondarySync turns a reconfigurationWithSync of the secondary cell group
// into an SCG addition (no SCG before) or change.
func (d *Decoder) secondarySync(msg diag.RRCMessage, st *ratState, sync *SyncTarget) []diag.Event {
	if sync == nil {
		return nil
	}
	target := syncCell(diag.RATNR, sync, d.scg)
	kind := diag.HOSCGChange
	if d.scg.IsZero() {
		kind = diag.HOSCGAdd
	}
	ev := diag.Event{Type: diag.TypeHOCommand, Time: msg.Time, Kind: kind, Source: d.scg, Target: target}
	d.setSCG(target)
	st.pending = append(st.pending, target)
	return []diag.Event{ev}
}

// syncCell is the target cell of a synchronous reconfiguration; what the
// message leaves out (intra-frequency carrier, PCI) stays as in current.
func syncCell(rat diag.RAT, t *SyncTarget, current diag.Cell) diag.Cell {
	c := diag.Cell{RAT: rat, PCI: current.PCI, ARFCN: current.ARFCN}
	if current.RAT != rat {
		c.PCI, c.ARFCN = 0, 0
	}
	if t.HasPCI {
		c.PCI = t.PCI
	}
	if t.Carrier != 0 {
		c.ARFCN = t.Carrier
	}
	return c.Normalized()
}

// failureCause maps a reestablishmentCause enumerant to the contract's
// causes: otherFailure is a radio link failure, handoverFailure a
// handover failure, reconfigurationFailure (and spares) a plain
// re-establishment.
func failureCause(enumerant string) diag.FailureCause {
	switch enumerant {
	case "otherFailure":
		return diag.CauseRLF
	case "handoverFailure":
		return diag.CauseHOF
	}
	return diag.CauseReestablishment
}
