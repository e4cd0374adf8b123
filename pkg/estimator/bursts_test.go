package estimator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/m2ho/m2ho/pkg/diag"
)

// The paper's sub-6 carrier: 0.5 ms slots of 106 resource blocks.
const (
	slot     = 500 * time.Microsecond
	carrier  = 106
	bytesPer = 1000 // ingress bytes per millisecond in these tests
)

var (
	full    = diag.Slot{Given: 100, Total: carrier}
	busy    = diag.Slot{Given: 60, Total: carrier}
	partial = diag.Slot{Given: 20, Total: carrier}
	empty   = diag.Slot{Given: 0, Total: carrier}
)

func rbAlloc(startMs float64, cell diag.Cell, slots ...diag.Slot) diag.Event {
	return diag.Event{Type: diag.TypeRBAlloc, Time: at(startMs), Cell: cell, SlotDuration: slot, Slots: slots}
}

// feedBytes samples a counter growing by bytesPer every millisecond, once
// per millisecond over [fromMs, toMs].
func feedBytes(e *Estimator, fromMs, toMs int) {
	for ms := fromMs; ms <= toMs; ms++ {
		e.AddBytes(at(float64(ms)), uint64(ms)*bytesPer)
	}
}

func TestSlotBursts(t *testing.T) {
	tests := []struct {
		name    string
		events  []diag.Event
		serving diag.Cell
		// byte samples cover [bytesFrom, bytesTo] ms
		bytesFrom, bytesTo int
		cells              []CellRecord
		skipped            map[string]uint64
	}{
		{
			name:    "full slots start, a partial slot then an empty one end",
			events:  []diag.Event{rbAlloc(10, nrA, full, full, partial, empty)},
			bytesTo: 100,
			cells:   []CellRecord{{Cell: nrA, BufferBytes: 1500, Bursts: 1, Updated: at(11.5)}},
		},
		{
			name:    "no full slot, no burst",
			events:  []diag.Event{rbAlloc(10, nrA, busy, partial, empty)},
			bytesTo: 100,
			cells:   []CellRecord{},
		},
		{
			name:    "exactly 90% is not full",
			events:  []diag.Event{rbAlloc(10, nrA, diag.Slot{Given: 90, Total: 100}, partial, empty)},
			bytesTo: 100,
			cells:   []CellRecord{},
		},
		{
			name:    "91% is full",
			events:  []diag.Event{rbAlloc(10, nrA, diag.Slot{Given: 91, Total: 100}, partial, empty)},
			bytesTo: 100,
			cells:   []CellRecord{{Cell: nrA, BufferBytes: 1000, Bursts: 1, Updated: at(11)}},
		},
		{
			name:    "a partial slot followed by a busy one continues the burst",
			events:  []diag.Event{rbAlloc(10, nrA, full, partial, full, partial, empty)},
			bytesTo: 100,
			cells:   []CellRecord{{Cell: nrA, BufferBytes: 2000, Bursts: 1, Updated: at(12)}},
		},
		{
			name:    "an empty slot without a partial one before does not end it",
			events:  []diag.Event{rbAlloc(10, nrA, full, empty, partial, empty)},
			bytesTo: 100,
			cells:   []CellRecord{{Cell: nrA, BufferBytes: 1500, Bursts: 1, Updated: at(11.5)}},
		},
		{
			name:    "exactly 40% is not partial",
			events:  []diag.Event{rbAlloc(10, nrA, full, diag.Slot{Given: 40, Total: 100}, empty, diag.Slot{Given: 39, Total: 100}, empty)},
			bytesTo: 100,
			cells:   []CellRecord{{Cell: nrA, BufferBytes: 2000, Bursts: 1, Updated: at(12)}},
		},
		{
			name:    "a burst spans consecutive events",
			events:  []diag.Event{rbAlloc(10, nrA, full, full), rbAlloc(11, nrA, partial, empty)},
			bytesTo: 100,
			cells:   []CellRecord{{Cell: nrA, BufferBytes: 1500, Bursts: 1, Updated: at(11.5)}},
		},
		{
			name:    "receive-time jitter within 2 ms still continues",
			events:  []diag.Event{rbAlloc(10, nrA, full, full), rbAlloc(12.5, nrA, partial, empty)},
			bytesTo: 100,
			cells:   []CellRecord{{Cell: nrA, BufferBytes: 3000, Bursts: 1, Updated: at(13)}},
		},
		{
			name:    "a hole between events restarts the detector",
			events:  []diag.Event{rbAlloc(10, nrA, full, full), rbAlloc(13.5, nrA, partial, empty)},
			bytesTo: 100,
			cells:   []CellRecord{},
		},
		{
			name:    "cells are followed separately",
			events:  []diag.Event{rbAlloc(10, nrA, full, full), rbAlloc(10, lteA, full), rbAlloc(11, nrA, partial, empty)},
			bytesTo: 100,
			cells:   []CellRecord{{Cell: nrA, BufferBytes: 1500, Bursts: 1, Updated: at(11.5)}},
		},
		{
			name:    "two bursts: the larger is the estimate",
			events:  []diag.Event{rbAlloc(10, nrA, full, partial, empty, full, full, partial, empty)},
			bytesTo: 100,
			cells:   []CellRecord{{Cell: nrA, BufferBytes: 1500, Bursts: 2, Updated: at(13)}},
		},
		{
			name:    "an event without cell is the serving cell's",
			serving: lteA,
			events:  []diag.Event{rbAlloc(10, diag.Cell{}, full, partial, empty)},
			bytesTo: 100,
			cells:   []CellRecord{{Cell: lteA, BufferBytes: 1000, Bursts: 1, Updated: at(11)}},
		},
		{
			name:      "a burst before the byte history is dropped",
			events:    []diag.Event{rbAlloc(10, nrA, full, partial, empty)},
			bytesFrom: 11, bytesTo: 100,
			cells:   []CellRecord{},
			skipped: map[string]uint64{"slot_burst_no_bytes": 1},
		},
		{
			name:    "a burst longer than the maximum is not a buffer",
			events:  []diag.Event{{Type: diag.TypeRBAlloc, Time: at(10), Cell: nrA, SlotDuration: 100 * time.Millisecond, Slots: []diag.Slot{full, full, partial, empty}}},
			bytesTo: 500,
			cells:   []CellRecord{},
			skipped: map[string]uint64{"burst_too_long": 1},
		},
		{
			name: "malformed events are counted and skipped",
			events: []diag.Event{
				rbAlloc(10, diag.Cell{}, full),
				{Type: diag.TypeRBAlloc, Time: at(10), Cell: nrA, Slots: []diag.Slot{full}},
				rbAlloc(10, nrA),
				rbAlloc(10, nrA, full, diag.Slot{Given: 5, Total: 0}),
				rbAlloc(10, nrA, full, diag.Slot{Given: 107, Total: 106}),
			},
			bytesTo: 100,
			cells:   []CellRecord{},
			skipped: map[string]uint64{
				"rb_alloc_no_cell":           1,
				"rb_alloc_bad_slot_duration": 1,
				"rb_alloc_no_slots":          1,
				"rb_alloc_bad_slot":          2,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEstimator(t, nil)
			if !tc.serving.IsZero() {
				e.SetServing(tc.serving, at(0))
			}
			feedBytes(e, tc.bytesFrom, tc.bytesTo)
			for _, ev := range tc.events {
				e.AddRBAlloc(ev)
			}
			assert.Equal(t, tc.cells, e.Cells())
			want := tc.skipped
			if want == nil {
				want = map[string]uint64{}
			}
			assert.Equal(t, want, skipped(e))
		})
	}
}

func TestSlotBurstWaitsForBytes(t *testing.T) {
	e := newEstimator(t, nil)
	feedBytes(e, 0, 11)
	e.AddRBAlloc(rbAlloc(10, nrA, full, full, partial, empty))
	assert.Empty(t, e.Cells(), "the end at 11.5 ms is not covered yet")

	// A sample at 13 ms after a quiet period: 11.5 ms is interpolated.
	e.AddBytes(at(13), 13*bytesPer)
	assert.Equal(t, []CellRecord{{Cell: nrA, BufferBytes: 1500, Bursts: 1, Updated: at(11.5)}}, e.Cells())
}

func TestPendingSlotBurstsAreBounded(t *testing.T) {
	e := newEstimator(t, nil)
	e.AddBytes(at(0), 0)
	start := 10.0
	for range maxPendingBursts + 3 {
		e.AddRBAlloc(rbAlloc(start, nrA, full, partial, empty))
		start += 1.5
	}
	assert.Equal(t, map[string]uint64{"slot_burst_no_bytes": 3}, skipped(e))
	e.AddBytes(at(start+1), uint64(start+1)*bytesPer)
	cells := e.Cells()
	if assert.Len(t, cells, 1) {
		assert.Equal(t, uint64(maxPendingBursts), cells[0].Bursts)
	}
}
