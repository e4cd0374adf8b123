package estimator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

// BenchmarkTargetBuffer looks up an unknown cell (the band-minimum scan)
// among 500 known ones, a route's worth of cells.
func BenchmarkTargetBuffer(b *testing.B) {
	records := make([]CellRecord, 500)
	for i := range records {
		records[i] = CellRecord{Cell: diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: uint16(i), ARFCN: 1850}, BufferBytes: uint64(100_000 + i)}
	}
	e, err := New(DefaultConfig(), &memStore{records: records}, nil)
	require.NoError(b, err)
	unknown := diag.Cell{RAT: diag.RATLTE, PCI: 999, ARFCN: 1850}
	b.ReportAllocs()
	for b.Loop() {
		e.TargetBuffer(unknown)
	}
}

// BenchmarkAddRBAlloc feeds rb_alloc events of 20 slots (10 ms of a
// 0.5 ms-slot carrier), each holding one burst, with the byte samples
// that size it.
func BenchmarkAddRBAlloc(b *testing.B) {
	e, err := New(DefaultConfig(), nil, nil)
	require.NoError(b, err)
	slots := []diag.Slot{full, full, full, full, busy, busy, partial, empty}
	for len(slots) < 20 {
		slots = append(slots, empty)
	}
	start := t0
	var total uint64
	b.ReportAllocs()
	for b.Loop() {
		e.AddRBAlloc(diag.Event{Type: diag.TypeRBAlloc, Time: start, Cell: nrA, SlotDuration: slot, Slots: slots})
		start = start.Add(20 * slot)
		total += 50_000
		e.AddBytes(start, total)
	}
}

// BenchmarkBandwidthClamp is one byte sample, one RTT sample and one
// Eq. 2 evaluation: what each daemon poll costs.
func BenchmarkBandwidthClamp(b *testing.B) {
	e, err := New(DefaultConfig(), nil, nil)
	require.NoError(b, err)
	now := t0
	var total uint64
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(10 * time.Millisecond)
		total += 125_000
		e.AddBytes(now, total)
		e.AddRTT(e.Path(), now, 50*time.Millisecond)
		e.BandwidthClamp(now)
	}
}
