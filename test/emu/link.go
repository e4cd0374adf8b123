package emu

import (
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/scenario"
)

// RBReportInterval is how much slot history one rb_alloc event carries.
const RBReportInterval = 10 * time.Millisecond

// cell is a scenario cell with its runtime state.
type cell struct {
	spec     scenario.Cell
	id       diag.Cell
	capacity *Capacity // scaled
	buffer   int       // scaled buffer in bytes
	queue    packetQueue
}

type actionKind int

const (
	actReport actionKind = iota
	actCommand
	actExecute
	actComplete
	actFailure
)

type action struct {
	at     time.Duration
	kind   actionKind
	record int // index into truth.Handovers for handover actions
	report scenario.Report
	// order keeps actions at the same time in timeline order.
	order int
}

// Link is the emulated radio link in virtual time: a one-way delay line,
// the cell buffers, the slot scheduler and the timeline. It is not safe for
// concurrent use; the Emulator serialises calls.
type Link struct {
	sc    *scenario.Scenario
	cells map[string]*cell
	epoch time.Time

	serving *cell
	// During an interruption target is the cell that will serve next and
	// resumeAt the end of the interruption.
	interrupted bool
	target      *cell
	resumeAt    time.Duration
	// current is the record of the last procedure, for drop attribution.
	current int

	// holding is the handover whose context release holds packets back
	// until execution; heldBack are those packets, which the UE gets once
	// the target cell serves. With discardHeld the source discards them
	// instead, as it holds them.
	holding     *HandoverRecord
	heldBack    []*Packet
	discardHeld bool

	delayLine   []*Packet
	lastRelease time.Duration
	lastUplink  time.Duration

	slotStart time.Duration
	headSent  float64

	rbStart time.Duration
	rbCell  *cell
	rbSlots []diag.Slot

	actions []action
	next    int

	lastAck map[FlowKey]uint32
	// tapped is set when the receiver's ACKs are read before the UE's
	// datapath (TappedAck): they replace the receiver model, and
	// lastTapped follows them.
	tapped     bool
	lastTapped map[FlowKey]uint32
	held       map[FlowKey][]*HeldPacket
	// receiver predicts the duplicate ACKs the UE generates.
	receiver receiverModel

	emit    func(diag.Event)
	deliver func(p *Packet, at time.Duration)
	truth   GroundTruth
}

// LoadCapacity reads or builds the capacity a cell spec names, unscaled.
func LoadCapacity(sc *scenario.Scenario, spec scenario.CapacitySpec) (*Capacity, error) {
	switch {
	case spec.ConstantMbps > 0:
		return ConstantCapacity(spec.ConstantMbps * 1e6)
	case len(spec.Steps) > 0:
		segs := make([]Segment, len(spec.Steps))
		for i, s := range spec.Steps {
			segs[i] = Segment{Duration: s.Duration, BitsPerSecond: s.Mbps * 1e6}
		}
		return NewCapacity(segs)
	case spec.Mahimahi != "":
		return parseTraceFile(sc.ResolvePath(spec.Mahimahi), ParseMahimahi)
	case spec.Lumos5G != "":
		return parseTraceFile(sc.ResolvePath(spec.Lumos5G), ParseLumos5G)
	}
	return nil, fmt.Errorf("capacity spec names no source")
}

// CellCapacity is the capacity a cell gives the emulated UE: its trace
// scaled by the scenario's scale factor, less the background share.
func CellCapacity(sc *scenario.Scenario, c scenario.Cell) (*Capacity, error) {
	capacity, err := LoadCapacity(sc, c.Capacity)
	if err != nil {
		return nil, fmt.Errorf("cell %s: %w", c.Name, err)
	}
	return capacity.Scaled(sc.Scale * (1 - c.BackgroundShare)), nil
}

// CellCapacities is CellCapacity of every cell of the scenario, by name.
func CellCapacities(sc *scenario.Scenario) (map[string]*Capacity, error) {
	capacities := make(map[string]*Capacity, len(sc.Cells))
	for _, c := range sc.Cells {
		capacity, err := CellCapacity(sc, c)
		if err != nil {
			return nil, err
		}
		capacities[c.Name] = capacity
	}
	return capacities, nil
}

func parseTraceFile(path string, parse func(r io.Reader) (*Capacity, error)) (*Capacity, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening trace: %w", err)
	}
	defer f.Close()
	c, err := parse(f)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	return c, nil
}

// NewLink builds the link of a validated scenario. emit receives the diag
// events (with modem times from epoch); deliver receives each packet the UE
// gets, with the virtual time it was due.
func NewLink(sc *scenario.Scenario, epoch time.Time, emit func(diag.Event), deliver func(p *Packet, at time.Duration)) (*Link, error) {
	l := &Link{
		sc:         sc,
		cells:      map[string]*cell{},
		epoch:      epoch,
		current:    -1,
		lastAck:    map[FlowKey]uint32{},
		lastTapped: map[FlowKey]uint32{},
		held:       map[FlowKey][]*HeldPacket{},
		receiver:   newReceiverModel(),
		emit:       emit,
		deliver:    deliver,
	}
	l.truth = GroundTruth{Scenario: sc.Name, Scale: sc.Scale, Start: epoch, GeneratedFrom: GeneratedFromModel}
	for _, cs := range sc.Cells {
		capacity, err := CellCapacity(sc, cs)
		if err != nil {
			return nil, err
		}
		c := &cell{
			spec:     cs,
			id:       cs.DiagCell(),
			capacity: capacity,
			buffer:   scenario.ScaledBytes(cs.BufferBytes, sc.Scale),
		}
		c.queue.limit = c.buffer
		l.cells[cs.Name] = c
	}
	l.serving = l.cells[sc.InitialCell]
	l.compileTimeline()
	return l, nil
}

// compileTimeline turns the scenario's timeline into timed actions and the
// ground-truth records they fill.
func (l *Link) compileTimeline() {
	serving := l.sc.InitialCell
	for i, e := range l.sc.Timeline {
		switch e.Type {
		case scenario.TypeHandover:
			idx := len(l.truth.Handovers)
			l.truth.Handovers = append(l.truth.Handovers, HandoverRecord{
				Index: idx, Procedure: ProcedureHandover, Kind: e.Kind,
				Class:  diag.HandoverClass(l.cells[e.Source].spec.Band, l.cells[e.Target].spec.Band),
				Source: e.Source, Target: e.Target, MeasEvent: e.MeasEvent,
				MeasAt: e.At - e.MeasLead, CommandAt: e.At - e.CommandLead,
				ExecAt: e.At, CompleteAt: e.At + e.Interruption,
				Reordered: e.ContextRelease != nil,
			})
			if !e.Unreported {
				l.actions = append(l.actions, action{at: e.At - e.MeasLead, kind: actReport, record: idx, order: i})
			}
			l.actions = append(l.actions,
				action{at: e.At - e.CommandLead, kind: actCommand, record: idx, order: i},
				action{at: e.At, kind: actExecute, record: idx, order: i},
				action{at: e.At + e.Interruption, kind: actComplete, record: idx, order: i},
			)
			serving = e.Target
		case scenario.TypeRLF:
			idx := len(l.truth.Handovers)
			l.truth.Handovers = append(l.truth.Handovers, HandoverRecord{
				Index: idx, Procedure: ProcedureRLF,
				Class:  diag.HandoverClass(l.cells[serving].spec.Band, l.cells[e.Target].spec.Band),
				Source: serving, Target: e.Target,
				ExecAt: e.At, CompleteAt: e.At + e.Interruption,
			})
			l.actions = append(l.actions,
				action{at: e.At, kind: actFailure, record: idx, order: i},
				action{at: e.At + e.Interruption, kind: actComplete, record: idx, order: i},
			)
			serving = e.Target
		case scenario.TypeReport:
			for _, r := range e.Reports {
				l.actions = append(l.actions, action{at: e.At + r.After, kind: actReport, record: -1, report: r, order: i})
			}
		}
	}
	sort.SliceStable(l.actions, func(i, j int) bool {
		if l.actions[i].at != l.actions[j].at {
			return l.actions[i].at < l.actions[j].at
		}
		return l.actions[i].order < l.actions[j].order
	})
}

// Arrive takes a downlink IP packet the server sent at virtual time at.
func (l *Link) Arrive(p *Packet, at time.Duration) {
	l.truth.Totals.DownlinkPackets++
	p.Arrived = at
	delay := l.serving.spec.DelayDown
	if l.interrupted {
		delay = l.target.spec.DelayDown
	}
	// A one-way delay line keeps order even when the delay shrinks.
	p.release = max(at+delay, l.lastRelease)
	l.lastRelease = p.release
	l.delayLine = append(l.delayLine, p)
}

// UplinkRelease is when an uplink packet read at virtual time at reaches
// the server: after the serving cell's uplink delay, and not before the end
// of an interruption. It also records duplicate ACKs in the ground truth.
func (l *Link) UplinkRelease(at time.Duration, tcp TCPHeader) time.Duration {
	l.truth.Totals.UplinkPackets++
	if tcp.Valid {
		l.classifyAck(at, tcp)
	}
	c, start := l.serving, at
	if l.interrupted {
		c, start = l.target, max(at, l.resumeAt)
	}
	release := max(start+c.spec.DelayUp, l.lastUplink)
	l.lastUplink = release
	return release
}

// pureDuplicate tells whether tcp is a pure ACK repeating the last
// acknowledgement seen of its flow, keeping that in last.
func pureDuplicate(last map[FlowKey]uint32, tcp TCPHeader) bool {
	if tcp.Flags&(tcpSYN|tcpFIN|tcpRST) != 0 || tcp.Flags&tcpACK == 0 {
		return false
	}
	prev, seen := last[tcp.Flow]
	last[tcp.Flow] = tcp.Ack
	return seen && tcp.Payload == 0 && prev == tcp.Ack
}

// classifyAck records a pure duplicate ACK seen on the uplink and its
// cause.
func (l *Link) classifyAck(at time.Duration, tcp TCPHeader) {
	if !pureDuplicate(l.lastAck, tcp) {
		return
	}
	// The emulator reads an ACK as the UE sends it; the uplink delay
	// comes after.
	d := l.dupAckCause(tcp.Flow, tcp.Ack, at)
	if len(l.truth.DupAcks) >= MaxDupAcksRecorded {
		l.truth.DupAcksNotRecorded++
		return
	}
	l.truth.DupAcks = append(l.truth.DupAcks, d)
}

// dupAckCause classifies a duplicate ACK the UE sent at sentAt: a context
// release caused it when it asks for a segment held back and not yet
// delivered by then (and not lost at the source or the target), a drop
// otherwise.
func (l *Link) dupAckCause(flow FlowKey, ack uint32, sentAt time.Duration) DupAck {
	d := DupAck{At: sentAt, Ack: ack, Cause: DupAckLoss, Handover: -1}
	for _, h := range l.held[flow] {
		if h.Seq != ack {
			continue
		}
		if !h.Dropped && (h.DeliveredAt == 0 || h.DeliveredAt > sentAt) {
			d.Cause = DupAckReorder
			d.Handover = l.heldHandover(h)
		}
		break
	}
	return d
}

func (l *Link) heldHandover(h *HeldPacket) int {
	for i := range l.truth.Handovers {
		for j := range l.truth.Handovers[i].Held {
			if &l.truth.Handovers[i].Held[j] == h {
				return i
			}
		}
	}
	return -1
}

// NextWake is the virtual time at which Advance has work next, given that
// nothing new arrives; ok is false when only an arrival can create work.
// Advance applies an action at the first slot boundary at or after its
// time, so that boundary is when there is work: naming the action's own
// time would have the scheduler wake, find nothing to do and wake again
// at once until the boundary.
func (l *Link) NextWake() (at time.Duration, ok bool) {
	at = time.Duration(math.MaxInt64)
	slot := l.slotDuration()
	if l.next < len(l.actions) {
		at, ok = l.boundaryAtOrAfter(l.actions[l.next].at, slot), true
	}
	if l.activeQueue().len() > 0 {
		return min(at, l.slotStart+slot), true
	}
	if len(l.delayLine) > 0 {
		// The end of the first slot that starts at or after the release.
		due := l.boundaryAtOrAfter(l.delayLine[0].release, slot) + slot
		return min(at, due), true
	}
	return at, ok
}

// boundaryAtOrAfter is the first boundary of the current slot grid at or
// after t (the grid's current start when t is before it).
func (l *Link) boundaryAtOrAfter(t, slot time.Duration) time.Duration {
	return l.slotStart + (max(t-l.slotStart, 0)+slot-1)/slot*slot
}

func (l *Link) slotDuration() time.Duration {
	if l.interrupted {
		return l.target.spec.Slot
	}
	return l.serving.spec.Slot
}

func (l *Link) activeQueue() *packetQueue {
	if l.interrupted {
		return &l.target.queue
	}
	return &l.serving.queue
}

// Advance runs the link up to virtual time now: every slot that ended by
// now and every timeline action due.
func (l *Link) Advance(now time.Duration) {
	for {
		slot := l.slotDuration()
		end := l.slotStart + slot
		if l.next < len(l.actions) && l.actions[l.next].at <= l.slotStart && l.actions[l.next].at <= now {
			l.apply(l.actions[l.next])
			l.next++
			continue
		}
		if end > now {
			return
		}
		if l.activeQueue().len() == 0 && !l.interrupted {
			// Idle: jump over the slots in which nothing can happen.
			idleUntil := now
			if len(l.delayLine) > 0 {
				idleUntil = min(idleUntil, l.delayLine[0].release)
			}
			if l.next < len(l.actions) {
				idleUntil = min(idleUntil, l.actions[l.next].at)
			}
			if skip := (idleUntil - l.slotStart) / slot; skip > 0 {
				l.flushRB()
				l.headSent = 0
				l.slotStart += skip * slot
				continue
			}
		}
		l.runSlot(l.slotStart, slot)
		l.slotStart = end
	}
}

// runSlot moves released packets into the active buffer and serves the
// slot [start, start+slot).
func (l *Link) runSlot(start, slot time.Duration) {
	q := l.activeQueue()
	for len(l.delayLine) > 0 && l.delayLine[0].release <= start {
		p := l.delayLine[0]
		l.delayLine[0] = nil
		l.delayLine = l.delayLine[1:]
		if !q.push(p) {
			l.countDrop(start)
		}
	}
	if len(l.delayLine) == 0 {
		l.delayLine = nil
	}
	if l.interrupted {
		return
	}
	c := l.serving
	full := c.capacity.Bytes(start, start+slot)
	budget := full
	for budget > 0 && q.len() > 0 {
		need := float64(q.peek().Size) - l.headSent
		if budget < need {
			l.headSent += budget
			budget = 0
			break
		}
		budget -= need
		l.headSent = 0
		l.hand(q.pop(), start+slot)
	}
	if q.len() == 0 {
		l.headSent = 0
	}
	rbs := 0
	if full > 0 {
		available := float64(c.spec.CarrierRBs) * (1 - c.spec.BackgroundShare)
		rbs = int(math.Ceil((full - budget) / full * available))
	}
	l.recordRB(c, start, diag.Slot{Given: uint16(rbs), Total: uint16(c.spec.CarrierRBs)})
}

// hand gives a packet to the UE, unless a context release holds it back
// (or discards it).
func (l *Link) hand(p *Packet, at time.Duration) {
	if rec := l.holding; rec != nil {
		if len(rec.Held) < cap(rec.Held) {
			rec.Held = append(rec.Held, HeldPacket{Flow: p.TCP.Flow, Seq: p.TCP.Seq, Len: p.TCP.Payload})
			held := &rec.Held[len(rec.Held)-1]
			if p.TCP.Valid {
				l.held[p.TCP.Flow] = append(l.held[p.TCP.Flow], held)
			}
			if l.discardHeld {
				// Lost from the command on: a duplicate ACK asking for
				// it is a loss signal even before execution.
				held.Dropped = true
				rec.Discarded++
				l.truth.Totals.BufferDrops++
				return
			}
			p.held = held
			l.heldBack = append(l.heldBack, p)
			return
		}
		rec.Released++
	}
	if p.held != nil {
		p.held.DeliveredAt = at
	}
	l.truth.Totals.DeliveredPackets++
	l.truth.Totals.DeliveredBytes += uint64(p.Size)
	l.receive(p.TCP, at)
	l.deliver(p, at)
}

func (l *Link) countDrop(at time.Duration) {
	l.truth.Totals.BufferDrops++
	if l.current < 0 {
		return
	}
	rec := &l.truth.Handovers[l.current]
	switch {
	case l.interrupted:
		rec.OverflowDrops++
	case at < rec.CompleteAt+PostHandoverWindow:
		rec.DropsAfter++
	}
}

func (l *Link) recordRB(c *cell, start time.Duration, s diag.Slot) {
	if l.rbCell != c || (len(l.rbSlots) > 0 && start != l.rbStart+time.Duration(len(l.rbSlots))*c.spec.Slot) {
		l.flushRB()
	}
	if len(l.rbSlots) == 0 {
		l.rbStart, l.rbCell = start, c
	}
	l.rbSlots = append(l.rbSlots, s)
	if time.Duration(len(l.rbSlots))*c.spec.Slot >= RBReportInterval {
		l.flushRB()
	}
}

// flushRB reports the slots gathered so far, unless the UE got nothing in
// any of them.
func (l *Link) flushRB() {
	if len(l.rbSlots) == 0 {
		return
	}
	used := false
	for _, s := range l.rbSlots {
		used = used || s.Given > 0
	}
	if used {
		l.send(diag.Event{
			Type: diag.TypeRBAlloc, Time: l.epoch.Add(l.rbStart),
			Cell: l.rbCell.id, SlotDuration: l.rbCell.spec.Slot,
			Slots: append([]diag.Slot(nil), l.rbSlots...),
		})
	}
	l.rbSlots = l.rbSlots[:0]
}

func (l *Link) send(ev diag.Event) {
	l.truth.Totals.DiagEvents++
	if ev.Type != diag.TypeRBAlloc {
		// An event that does not encode is counted when it is sent.
		if raw, err := diag.MarshalJSON(ev); err == nil {
			l.truth.Signalling = append(l.truth.Signalling, raw)
		}
	}
	l.emit(ev)
}

func (l *Link) apply(a action) {
	t := l.epoch.Add(a.at)
	if a.kind == actReport && a.record < 0 {
		r := a.report
		ev := diag.Event{Type: diag.TypeMeasReport, Time: t, Meas: r.Event, Serving: l.serving.id}
		rec := ReportRecord{At: a.at, Event: r.Event, Serving: l.serving.spec.Name, Neighbor: r.Neighbor}
		if r.Neighbor != "" {
			ev.Neighbor = l.cells[r.Neighbor].id
		}
		l.truth.Reports = append(l.truth.Reports, rec)
		l.send(ev)
		return
	}
	rec := &l.truth.Handovers[a.record]
	source, target := l.cells[rec.Source], l.cells[rec.Target]
	switch a.kind {
	case actReport:
		l.send(diag.Event{Type: diag.TypeMeasReport, Time: t, Meas: rec.MeasEvent, Serving: source.id, Neighbor: target.id})
	case actCommand:
		l.send(diag.Event{Type: diag.TypeHOCommand, Time: t, Kind: rec.Kind, Source: source.id, Target: target.id})
		if rec.Reordered {
			l.contextRelease(a, rec, source)
		}
	case actExecute:
		l.execute(a, rec, source, target)
	case actFailure:
		l.flushRB()
		l.current = a.record
		l.interrupted, l.target, l.resumeAt = true, target, rec.CompleteAt
		// A failed link loses what its buffer held.
		rec.Discarded = len(source.queue.drain())
		l.truth.Totals.BufferDrops += uint64(rec.Discarded)
		l.headSent = 0
		l.send(diag.Event{Type: diag.TypeHOFailure, Time: t, Cause: diag.CauseRLF})
	case actComplete:
		l.interrupted = false
		l.serving = target
		target.queue.limit = target.buffer
		l.target = nil
		l.alignSlots(a.at)
		l.send(diag.Event{Type: diag.TypeHOComplete, Time: t, Cell: target.id})
	}
}

// contextRelease is the UE releasing its link-layer context with the
// source cell on the handover command (paper section 3.3, finding 2): the
// packets the UE's reordering buffer was waiting for (in retransmission at
// the source) only come later through the target cell, or never when the
// source discards them, while everything after them goes up the stack at
// once, out of order. The first held_packets the source has (queued, or
// scheduled next when its queue is empty) are held back or discarded; the
// source keeps serving the rest until execution.
func (l *Link) contextRelease(a action, rec *HandoverRecord, source *cell) {
	release := l.sc.Timeline[a.order].ContextRelease
	// Fixed capacity: held packets point into this slice.
	rec.Held = make([]HeldPacket, 0, release.HeldPackets)
	l.holding, l.discardHeld = rec, release.Discard
	l.headSent = 0
	for _, p := range source.queue.drain() {
		l.hand(p, a.at)
	}
}

// execute starts a handover's interruption: packets a context release held
// back, then the rest of the source buffer, move to the target's buffer
// (forwarding), where they and new arrivals wait out the interruption.
func (l *Link) execute(a action, rec *HandoverRecord, source, target *cell) {
	l.flushRB()
	l.current = a.record
	l.interrupted, l.target, l.resumeAt = true, target, rec.CompleteAt
	if ev := l.sc.Timeline[a.order]; ev.TargetBufferBytes > 0 {
		target.queue.limit = scenario.ScaledBytes(ev.TargetBufferBytes, l.sc.Scale)
	}
	l.headSent = 0
	forward := append(append([]*Packet(nil), l.heldBack...), source.queue.drain()...)
	l.heldBack, l.holding = nil, nil
	for _, p := range forward {
		if target.queue.push(p) {
			rec.Forwarded++
			continue
		}
		if p.held != nil {
			p.held.Dropped = true
		}
		l.countDrop(a.at)
	}
	l.alignSlots(a.at)
}

// alignSlots restarts the slot grid at t (a new cell has its own timing).
func (l *Link) alignSlots(t time.Duration) {
	if t > l.slotStart {
		l.flushRB()
		l.slotStart = t
	}
}

// Busy reports whether packets wait in the delay line or a buffer, or an
// interruption is under way: then the link needs Advance at NextWake even
// if nothing arrives.
func (l *Link) Busy() bool {
	return l.interrupted || len(l.delayLine) > 0 || l.activeQueue().len() > 0
}

// Truth returns the ground truth gathered so far.
func (l *Link) Truth() *GroundTruth { return &l.truth }
