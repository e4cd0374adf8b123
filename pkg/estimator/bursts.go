package estimator

import (
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
)

// Slot thresholds of the burst definition (paper section 4.3, footnote 3):
// a burst starts at a slot with more than 90% of the resource blocks given
// to the UE and ends at a slot with less than 40% followed by an empty one.
const (
	fullSlotPercent    = 90
	partialSlotPercent = 40
)

// slotContinuity is how far from the end of the previous rb_alloc event
// of a cell the next one may start and still continue it: timestamps
// taken on receipt jitter by a few milliseconds, while a longer hole
// means slot logs were lost and a burst cannot be followed across.
const slotContinuity = 2 * time.Millisecond

// maxPendingBursts bounds the slot bursts waiting for byte samples; the
// oldest is dropped (and counted) when a byte poller has stopped.
const maxPendingBursts = 64

// AddBurst records a datapath packet-train burst against the serving cell.
// A burst that started before the serving cell changed is dropped: a
// train that runs into a handover's interruption ends only with the first
// packet after it, so it carries the previous cell's data.
func (e *Estimator) AddBurst(b Burst) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.serving.RAT == "" {
		e.skipLocked("burst_no_serving_cell")
		return
	}
	if reason := e.invalidBurst(b); reason != "" {
		e.skipLocked(reason)
		return
	}
	e.recordBurstLocked(e.serving, b)
}

func (e *Estimator) invalidBurst(b Burst) string {
	switch {
	case b.Bytes == 0:
		return "burst_empty"
	case b.End.Before(b.Start):
		return "burst_ends_before_start"
	case b.Start.Before(e.servingSince):
		return "burst_spans_cell_change"
	case b.End.Sub(b.Start) > e.cfg.MaxBurstDuration:
		return "burst_too_long"
	}
	return ""
}

// SlotBursts finds the burst periods in the slots of one cell, across
// its consecutive rb_alloc events. The zero value is ready to use.
type SlotBursts struct {
	// next is when the slot after the last one seen starts; a later
	// event that does not continue there breaks the sequence.
	next         time.Time
	inBurst      bool
	start        time.Time
	afterPartial bool
	// partialEnd is the end of the last partial slot: where the burst
	// ends if the next slot is empty.
	partialEnd time.Time
}

// Feed runs slots, consecutive and the first starting at start, and calls
// found for each burst period that ends among them. Slots that do not
// continue the previous ones (within slotContinuity) start afresh. It
// returns false, and forgets the sequence, when a slot is corrupt (no
// resource blocks, or more given than exist).
func (d *SlotBursts) Feed(start time.Time, slotDuration time.Duration, slots []diag.Slot, found func(start, end time.Time)) bool {
	for _, s := range slots {
		if s.Total == 0 || s.Given > s.Total {
			*d = SlotBursts{}
			return false
		}
	}
	if gap := start.Sub(d.next); gap > slotContinuity || gap < -slotContinuity {
		*d = SlotBursts{}
	}
	for _, s := range slots {
		end := start.Add(slotDuration)
		if burstEnd, done := d.step(s, start, end); done {
			found(d.start, burstEnd)
			d.inBurst = false
		}
		start = end
	}
	d.next = start
	return true
}

type pendingBurst struct {
	cell       diag.Cell
	start, end time.Time
}

// AddRBAlloc runs the slot-burst detector over an rb_alloc event. ev.Time
// is the start of its first slot, on the clock of AddBytes; the slots are
// consecutive, and an event starting where the previous one of the cell
// ended (within slotContinuity) continues it. The cell is
// ev.Cell, or the serving cell when the event names none. A burst is
// recorded once byte samples (AddBytes) cover its end: its size is the
// ingress byte count between its first and last slot.
func (e *Estimator) AddRBAlloc(ev diag.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	cell := ev.Cell.Normalized()
	if cell.RAT == "" {
		cell = e.serving
	}
	switch {
	case cell.RAT == "":
		e.skipLocked("rb_alloc_no_cell")
		return
	case ev.SlotDuration <= 0:
		e.skipLocked("rb_alloc_bad_slot_duration")
		return
	case len(ev.Slots) == 0:
		e.skipLocked("rb_alloc_no_slots")
		return
	}
	d, ok := e.slots[cell.Key()]
	if !ok {
		d = &SlotBursts{}
		e.slots[cell.Key()] = d
	}
	if !d.Feed(ev.Time, ev.SlotDuration, ev.Slots, func(start, end time.Time) {
		e.queueBurstLocked(pendingBurst{cell: cell, start: start, end: end})
	}) {
		e.skipLocked("rb_alloc_bad_slot")
		return
	}
	e.resolvePendingLocked()
}

// step advances the detector by one slot and reports whether a burst
// ended, and where.
func (d *SlotBursts) step(s diag.Slot, start, end time.Time) (time.Time, bool) {
	full := uint32(s.Given)*100 > fullSlotPercent*uint32(s.Total)
	partial := uint32(s.Given)*100 < partialSlotPercent*uint32(s.Total)
	if !d.inBurst {
		if full {
			d.inBurst, d.start, d.afterPartial = true, start, false
		}
		return time.Time{}, false
	}
	if d.afterPartial && s.Given == 0 {
		return d.partialEnd, true
	}
	d.afterPartial = partial && s.Given > 0
	if d.afterPartial {
		d.partialEnd = end
	}
	return time.Time{}, false
}

func (e *Estimator) queueBurstLocked(p pendingBurst) {
	if p.end.Sub(p.start) > e.cfg.MaxBurstDuration {
		e.skipLocked("burst_too_long")
		return
	}
	if len(e.pending) == maxPendingBursts {
		e.pending = e.pending[1:]
		e.skipLocked("slot_burst_no_bytes")
	}
	e.pending = append(e.pending, p)
}

// resolvePendingLocked records the slot bursts whose byte counts the byte
// history now covers.
func (e *Estimator) resolvePendingLocked() {
	kept := e.pending[:0]
	for _, p := range e.pending {
		startBytes, okStart := e.bytes.at(p.start)
		endBytes, okEnd := e.bytes.at(p.end)
		switch {
		case okStart == coverageAfter || okEnd == coverageAfter:
			kept = append(kept, p)
		case okStart == coverageBefore || okEnd == coverageBefore:
			e.skipLocked("slot_burst_no_bytes")
		case endBytes <= startBytes:
			e.skipLocked("burst_empty")
		default:
			e.recordBurstLocked(p.cell, Burst{Start: p.start, End: p.end, Bytes: endBytes - startBytes})
		}
	}
	e.pending = kept
}
