package daemon

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/datapath"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

func TestPlaceEvents(t *testing.T) {
	received := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const slot = 500 * time.Microsecond
	slots := make([]diag.Slot, 80)
	nr := diag.Cell{RAT: diag.RATNR, PCI: 1, ARFCN: 632628}
	lte := diag.Cell{RAT: diag.RATLTE, PCI: 7, ARFCN: 1850}
	rbAlloc := func(cell diag.Cell, d time.Duration, n int) diag.Event {
		return diag.Event{Type: diag.TypeRBAlloc, Cell: cell, SlotDuration: d, Slots: slots[:n]}
	}
	before := func(d time.Duration) time.Time { return received.Add(-d) }
	tests := []struct {
		name string
		evs  []diag.Event
		want []time.Time
	}{
		{
			name: "rb_alloc starts its slots before receipt",
			evs:  []diag.Event{rbAlloc(nr, slot, 20)},
			want: []time.Time{before(10 * time.Millisecond)},
		},
		{
			name: "mmWave slots",
			evs:  []diag.Event{rbAlloc(nr, 125*time.Microsecond, 80)},
			want: []time.Time{before(10 * time.Millisecond)},
		},
		{
			name: "rb_alloc without slot duration is left for the estimator to reject",
			evs:  []diag.Event{{Type: diag.TypeRBAlloc, Cell: nr, Slots: slots}},
			want: []time.Time{received},
		},
		{
			name: "other events happen at receipt, whatever they carry",
			evs:  []diag.Event{{Type: diag.TypeMeasReport, Time: before(time.Hour), SlotDuration: time.Millisecond, Slots: slots}},
			want: []time.Time{received},
		},
		{
			name: "a cell's events of one read follow each other up to receipt",
			evs:  []diag.Event{rbAlloc(nr, slot, 4), rbAlloc(nr, slot, 2), rbAlloc(nr, slot, 4)},
			want: []time.Time{before(5 * time.Millisecond), before(3 * time.Millisecond), before(2 * time.Millisecond)},
		},
		{
			name: "other events in a read do not move the slots",
			evs: []diag.Event{
				rbAlloc(nr, slot, 4),
				{Type: diag.TypeMeasReport, Meas: diag.EventA3},
				{Type: diag.TypeRBAlloc, Cell: nr, Slots: slots[:4]},
				rbAlloc(nr, slot, 4),
			},
			want: []time.Time{before(4 * time.Millisecond), received, received, before(2 * time.Millisecond)},
		},
		{
			name: "cells are scheduled side by side",
			evs:  []diag.Event{rbAlloc(lte, time.Millisecond, 2), rbAlloc(nr, slot, 4), rbAlloc(lte, time.Millisecond, 2), rbAlloc(nr, slot, 4)},
			want: []time.Time{before(4 * time.Millisecond), before(4 * time.Millisecond), before(2 * time.Millisecond), before(2 * time.Millisecond)},
		},
		{
			name: "the serving cell's events, which name none, follow each other",
			evs:  []diag.Event{rbAlloc(diag.Cell{}, slot, 4), rbAlloc(diag.Cell{}, slot, 4)},
			want: []time.Time{before(4 * time.Millisecond), before(2 * time.Millisecond)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			placeEvents(tc.evs, received)
			got := make([]time.Time, len(tc.evs))
			for i, ev := range tc.evs {
				got[i] = ev.Time
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestBatchedSlotBurstsAsUnbatched: an rb_alloc stream read a datagram
// per event and the same stream read ten events per datagram give the
// estimator the same slot bursts, which span events: each read is placed
// to end at its receipt, and followed by a byte sample there, as the
// daemon does.
func TestBatchedSlotBurstsAsUnbatched(t *testing.T) {
	const (
		slot   = 500 * time.Microsecond
		events = 200
		// bytesPerSlot: a steady download, whose byte count the samples
		// interpolate exactly wherever they are taken.
		bytesPerSlot = 5000
	)
	cell := diag.Cell{RAT: diag.RATNR, PCI: 1, ARFCN: 632628}
	full, partial, empty := diag.Slot{Given: 106, Total: 106}, diag.Slot{Given: 20, Total: 106}, diag.Slot{Given: 0, Total: 106}
	// A burst of six slots over two events of four: it ends with the
	// partial slot followed by an empty one.
	pattern := [][]diag.Slot{{full, full, full, full}, {full, partial, empty, empty}}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	bytesAt := func(t time.Time) uint64 { return uint64(t.Sub(start)/slot) * bytesPerSlot }

	run := func(perRead int) estimator.CellRecord {
		est, err := estimator.New(estimator.DefaultConfig(), nil, nil)
		require.NoError(t, err)
		est.AddBytes(start, 0)
		end := start
		for sent := 0; sent < events; sent += perRead {
			read := make([]diag.Event, perRead)
			for i := range read {
				read[i] = diag.Event{Type: diag.TypeRBAlloc, Cell: cell, SlotDuration: slot, Slots: pattern[(sent+i)%len(pattern)]}
				end = end.Add(time.Duration(len(read[i].Slots)) * slot)
			}
			placeEvents(read, end)
			for _, ev := range read {
				est.AddRBAlloc(ev)
			}
			est.AddBytes(end, bytesAt(end))
		}
		cells := est.Cells()
		require.Len(t, cells, 1)
		return cells[0]
	}

	unbatched, batched := run(1), run(10)
	assert.Equal(t, uint64(events/len(pattern)), unbatched.Bursts, "one burst per pattern")
	assert.InDelta(t, 6*bytesPerSlot, unbatched.BufferBytes, 1, "a burst's bytes")
	assert.Equal(t, unbatched.Bursts, batched.Bursts)
	assert.InDelta(t, unbatched.BufferBytes, batched.BufferBytes, 1)
}

// batchSource is a datagram input fed by the test, which the daemon
// must run by RunBatches.
type batchSource struct{ batches chan []diag.Event }

func (s *batchSource) Name() string { return "test:" }

func (s *batchSource) Run(context.Context, chan<- diag.Event) error {
	return errors.New("run by Run, not RunBatches")
}

func (s *batchSource) RunBatches(ctx context.Context, out chan<- []diag.Event) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case evs := <-s.batches:
			out <- evs
		}
	}
}

// TestDatagramInputRunsWhole: the events of a datagram input reach the
// loop together, and a measurement report among slot allocations is acted
// on.
func TestDatagramInputRunsWhole(t *testing.T) {
	src := &batchSource{batches: make(chan []diag.Event)}
	d, err := open(testConfig(t), nil, opener{
		datapath: func(datapath.Options) (datapathAPI, error) { return newFakeDatapath(), nil },
		source:   func(string, diagsrc.Options) (diag.Source, error) { return src, nil },
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		assert.NoError(t, waitReturned(t, done, "Run"))
	}()
	slots := []diag.Slot{{Given: 106, Total: 106}, {Given: 0, Total: 106}}
	rbAlloc := diag.Event{Type: diag.TypeRBAlloc, Cell: cellA, SlotDuration: 500 * time.Microsecond, Slots: slots}
	src.batches <- []diag.Event{rbAlloc, a3(cellA, cellB), rbAlloc}
	require.Eventually(t, func() bool {
		st, err := d.Status(ctx)
		return err == nil && st.State == statemachine.Preparation
	}, 2*time.Second, time.Millisecond)
}
