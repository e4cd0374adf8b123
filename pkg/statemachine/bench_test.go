package statemachine

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

// handoverCycle is a predicted handover back and forth between two
// cells, as four events, plus a report that predicts nothing.
func handoverCycle() []diag.Event {
	var out []diag.Event
	for _, c := range [][2]diag.Cell{{lteA, lteB}, {lteB, lteA}} {
		from, to := c[0], c[1]
		out = append(out,
			diag.Event{Type: diag.TypeMeasReport, Meas: diag.EventA4, Serving: from, Neighbor: to},
			diag.Event{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: from, Neighbor: to},
			diag.Event{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: from, Target: to},
			diag.Event{Type: diag.TypeHOComplete, Cell: to},
		)
	}
	return out
}

func benchMachine(b *testing.B) *Machine {
	b.Helper()
	est, err := seededEstimator()
	require.NoError(b, err)
	m, err := New(DefaultConfig(), est, DiscardActuator{}, nil)
	require.NoError(b, err)
	return m
}

// BenchmarkHandleEvent is the cost of one diag event, averaged over the
// events of handovers (report, command, completion) and the flows'
// release that ends each Smoothing.
func BenchmarkHandleEvent(b *testing.B) {
	m := benchMachine(b)
	cycle := handoverCycle()
	now := t0
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ev := cycle[i%len(cycle)]
		now = now.Add(10 * time.Millisecond)
		ev.Time = now
		m.HandleEvent(ev)
		if ev.Type == diag.TypeHOComplete {
			m.OnFlowsReleased(now)
		}
		i++
	}
}

// BenchmarkHandleEventLatency reports the median and 99th percentile of
// single HandleEvent calls, the machine's share of the daemon's
// event-to-map latency.
func BenchmarkHandleEventLatency(b *testing.B) {
	m := benchMachine(b)
	cycle := handoverCycle()
	now := t0
	var durations []time.Duration
	i := 0
	for b.Loop() {
		ev := cycle[i%len(cycle)]
		now = now.Add(10 * time.Millisecond)
		ev.Time = now
		start := time.Now()
		m.HandleEvent(ev)
		durations = append(durations, time.Since(start))
		if ev.Type == diag.TypeHOComplete {
			m.OnFlowsReleased(now)
		}
		i++
	}
	slices.Sort(durations)
	b.ReportMetric(float64(durations[len(durations)/2].Nanoseconds()), "p50-ns/event")
	b.ReportMetric(float64(durations[len(durations)*99/100].Nanoseconds()), "p99-ns/event")
}

// BenchmarkTickBandwidthHold is the cost of a Tick in Stable holding the
// bandwidth clamp, the most work a Tick does.
func BenchmarkTickBandwidthHold(b *testing.B) {
	m := benchMachine(b)
	m.bandwidthHold = true
	m.setCells(lteA, diag.Cell{})
	now := t0
	var total uint64
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(10 * time.Millisecond)
		total += 125_000
		m.est.AddRTT(m.est.Path(), now, 50*time.Millisecond)
		m.est.AddBytes(now, total)
		m.Tick(now)
	}
}
