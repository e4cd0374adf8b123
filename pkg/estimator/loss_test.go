package estimator

import (
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

// TestLossPersists: retransmissions in half of a second's samples mark
// senders that do not shrink on loss, for lossMemory; a loss-based
// sender's recovery, a few samples long, does not.
func TestLossPersists(t *testing.T) {
	tests := []struct {
		name    string
		lossyMs []float64 // samples carrying retransmitted bytes
		queryMs float64
		want    bool
	}{
		{"nothing lost", nil, 1000, false},
		{"one recovery: three samples", []float64{100, 200, 300}, 400, false},
		{"four samples a second apart from a fifth", []float64{100, 200, 300, 400, 1500}, 1600, false},
		{"five samples within a second", []float64{100, 200, 300, 400, 500}, 600, true},
		{"still known 30 s later", []float64{100, 200, 300, 400, 500}, 30_500, true},
		{"forgotten after 30 s", []float64{100, 200, 300, 400, 500}, 30_501, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEstimator(t, nil)
			e.AddRetransmitted(at(50), 0) // a sample without loss counts for nothing
			for _, ms := range tc.lossyMs {
				e.AddRetransmitted(at(ms), 1448)
			}
			assert.Equal(t, tc.want, e.LossPersists(at(tc.queryMs)))
		})
	}
}

// TestLossPersistsAcrossCells: it is the senders', not the cell's.
func TestLossPersistsAcrossCells(t *testing.T) {
	e := newEstimator(t, nil)
	for ms := 0.0; ms <= 400; ms += 100 {
		e.AddRetransmitted(at(ms), 1448)
	}
	e.SetServing(lteA, at(500))
	assert.True(t, e.LossPersists(at(600)))
}

// TestHandoverLossesDoNotPersist: retransmissions within 2 s of a cell
// change, or of a handover under way (its command, its ramp), are the
// handover's and say nothing of the senders.
func TestHandoverLossesDoNotPersist(t *testing.T) {
	tests := []struct {
		name        string
		servedMs    float64 // the serving cell changed then
		underWay    float64 // a handover was under way then (0: never)
		lossFrom    float64 // five lossy samples 100 ms apart from here
		wantPersist bool
	}{
		{name: "right after a cell change", servedMs: 1000, lossFrom: 1500},
		{name: "2 s after it", servedMs: 1000, lossFrom: 3000, wantPersist: true},
		{name: "under a ramp", servedMs: 1000, underWay: 4000, lossFrom: 4100},
		{name: "2 s after the ramp", servedMs: 1000, underWay: 4000, lossFrom: 6000, wantPersist: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEstimator(t, nil)
			e.SetServing(lteA, at(tc.servedMs))
			if tc.underWay > 0 {
				e.HandoverUnderWay(at(tc.underWay))
			}
			for ms := tc.lossFrom; ms < tc.lossFrom+500; ms += 100 {
				e.AddRetransmitted(at(ms), 1448)
			}
			assert.Equal(t, tc.wantPersist, e.LossPersists(at(tc.lossFrom+500)))
		})
	}
}

// TestOverflowCorrectsTheBufferEstimate: retransmissions outside a
// handover show the queue the serving cell overflowed at; an estimate
// above it comes down to it, by at most half per episode, and bursts no
// longer raise it beyond.
func TestOverflowCorrectsTheBufferEstimate(t *testing.T) {
	const (
		rate   = 1_875_000 // 15 Mbit/s
		minRTT = 70 * time.Millisecond
	)
	queueOf := func(d time.Duration) uint64 { return uint64(rate * d.Seconds()) }
	tests := []struct {
		name string
		// burst is the estimate the bursts made; queued the delay above
		// RTT_min of every sample from 2 s on, slowest the delay of the
		// sample at 2.9 s; lossMs the time of the retransmissions, with
		// the serving cell changed at servedFromMs.
		burst        uint64
		queued       time.Duration
		slowest      time.Duration
		servedFromMs float64
		commandMs    float64
		lossMs       []float64
		want         uint64
		ceiling      uint64
	}{
		{
			name:  "an estimate above the overflow comes down to the slowest sample's queue",
			burst: 244_500, queued: 40 * time.Millisecond, slowest: 80 * time.Millisecond,
			lossMs: []float64{3000}, want: queueOf(80 * time.Millisecond), ceiling: queueOf(80 * time.Millisecond),
		},
		{
			name:  "by at most half in one episode",
			burst: 400_000, queued: 40 * time.Millisecond, slowest: 60 * time.Millisecond,
			lossMs: []float64{3000, 3100, 3900}, want: 200_000, ceiling: 200_000,
		},
		{
			name:  "and the rest in the next",
			burst: 400_000, queued: 40 * time.Millisecond, slowest: 60 * time.Millisecond,
			lossMs: []float64{3000, 4000}, want: queueOf(60 * time.Millisecond), ceiling: queueOf(60 * time.Millisecond),
		},
		{
			name:  "an estimate below the overflow stays, under a ceiling",
			burst: 100_000, queued: 40 * time.Millisecond, slowest: 80 * time.Millisecond,
			lossMs: []float64{3000}, want: 100_000, ceiling: queueOf(80 * time.Millisecond),
		},
		{
			name:  "a loss with little queued is not this buffer's",
			burst: 244_500, queued: 10 * time.Millisecond, slowest: 20 * time.Millisecond,
			lossMs: []float64{3000}, want: 244_500,
		},
		{
			name:  "retransmissions right after a command are the handover's",
			burst: 244_500, queued: 40 * time.Millisecond, slowest: 80 * time.Millisecond,
			commandMs: 1500, lossMs: []float64{3000}, want: 244_500,
		},
		{
			name:  "retransmissions right after a cell change are the handover's",
			burst: 244_500, queued: 40 * time.Millisecond, slowest: 80 * time.Millisecond,
			servedFromMs: 1500, lossMs: []float64{3000}, want: 244_500,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := &memStore{}
			e := newEstimator(t, store)
			e.SetServing(lteB, at(0))
			e.SetServing(lteA, at(tc.servedFromMs))
			e.AddBurst(Burst{Start: at(tc.servedFromMs + 1), End: at(tc.servedFromMs + 5), Bytes: tc.burst})
			if tc.commandMs > 0 {
				e.HandoverUnderWay(at(tc.commandMs))
			}
			var total float64
			losses := tc.lossMs
			for ms := tc.servedFromMs; ms <= 4000; ms += 10 {
				rtt := minRTT
				if ms >= 2000 {
					rtt += tc.queued
				}
				if ms == 2900 {
					rtt = minRTT + tc.slowest
				}
				e.AddRTT(e.Path(), at(ms), rtt)
				e.AddBytes(at(ms), uint64(total))
				total += rate / 100
				if len(losses) > 0 && ms >= losses[0] {
					e.AddRetransmitted(at(ms), 1448)
					losses = losses[1:]
				}
			}
			got := cellRecord(t, e, lteA)
			assert.InDelta(t, float64(tc.want), float64(got.BufferBytes), float64(tc.want)/50+1, "estimate")
			assert.InDelta(t, float64(tc.ceiling), float64(got.CeilingBytes), float64(tc.ceiling)/50+1, "ceiling")
			assert.Equal(t, got, store.saved[len(store.saved)-1], "the record as stored")

			// A burst above the ceiling raises the estimate to it at most.
			e.AddBurst(Burst{Start: at(4001), End: at(4005), Bytes: 1_000_000})
			if tc.ceiling != 0 {
				assert.Equal(t, got.CeilingBytes, cellRecord(t, e, lteA).BufferBytes, "bursts stop at the ceiling")
			}
		})
	}
}

// TestQueueLiftsTheCeiling: a queue held over two rounds above the
// ceiling shows a larger buffer than the overflow did, and lifts both.
func TestQueueLiftsTheCeiling(t *testing.T) {
	const rate = 1_875_000
	e := newEstimator(t, nil)
	e.SetServing(lteA, at(0))
	e.AddBurst(Burst{Start: at(1), End: at(5), Bytes: 60_000})
	e.mu.Lock()
	e.cells[lteA.Key()].CeilingBytes = 60_000
	e.mu.Unlock()
	var total float64
	for ms := 0.0; ms <= 2000; ms += 10 {
		rtt := 70 * time.Millisecond
		if ms >= 1000 {
			rtt += 80 * time.Millisecond // 150 kB queued
		}
		e.AddRTT(e.Path(), at(ms), rtt)
		e.AddBytes(at(ms), uint64(total))
		total += rate / 100
	}
	got := cellRecord(t, e, lteA)
	assert.InDelta(t, 150_000, float64(got.BufferBytes), 3000)
	assert.Equal(t, got.BufferBytes, got.CeilingBytes)
}

func cellRecord(t *testing.T, e *Estimator, cell diag.Cell) CellRecord {
	t.Helper()
	for _, r := range e.Cells() {
		if r.Cell == cell {
			return r
		}
	}
	require.Failf(t, "no record", "cell %v", cell)
	return CellRecord{}
}

// TestOverflowReadsTheQueueAcrossRateChanges: a 150 kB cell that falls
// from 20 to 4 Mbit/s for a second, under a sender at 17.6 Mbit/s, fills
// its buffer (300 ms at 4 Mbit/s) and drops. Whenever the retransmissions
// come, the ceiling is the bytes that left the cell while its slowest
// sample waited: the buffer. Once the cell is back at 20 Mbit/s, the
// samples that waited behind the full buffer fall in rounds of the higher
// rate, and that rate times their wait reads four times the buffer.
func TestOverflowReadsTheQueueAcrossRateChanges(t *testing.T) {
	const (
		buffer = 150_000
		sender = 2_200_000 // bytes per second
		minRTT = 70 * time.Millisecond
		endMs  = 3300
	)
	cellRate := func(ms int) float64 {
		if ms >= 2000 && ms < 3000 {
			return 500_000
		}
		return 2_500_000
	}
	// A fluid first-in first-out queue, a millisecond at a time: arrived
	// and left are the cumulative bytes in and out, so the byte that
	// leaves at t arrived when arrived reached left(t).
	arrived, left := make([]float64, endMs+1), make([]float64, endMs+1)
	for ms := 1; ms <= endMs; ms++ {
		queued := arrived[ms-1] - left[ms-1]
		out := min(cellRate(ms)/1000, queued+sender/1000)
		left[ms] = left[ms-1] + out
		arrived[ms] = arrived[ms-1] + min(sender/1000, buffer-queued+out) // tail drop
	}
	waited := func(ms int) time.Duration {
		entered := sort.Search(ms+1, func(i int) bool { return arrived[i] >= left[ms] })
		return time.Duration(ms-entered) * time.Millisecond
	}

	for _, tc := range []struct {
		name   string
		lossMs int
	}{
		{"retransmissions while the cell is slow", 2700},
		{"retransmissions after it is fast again", 3250},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEstimator(t, nil)
			e.SetServing(lteA, at(0))
			e.AddBurst(Burst{Start: at(1), End: at(5), Bytes: 250_000})
			var slowest time.Duration
			for ms := 10; ms <= endMs; ms += 10 {
				e.AddBytes(at(float64(ms)), uint64(left[ms]))
				e.AddRTT(e.Path(), at(float64(ms)), minRTT+waited(ms))
				slowest = max(slowest, waited(ms))
				if ms == tc.lossMs {
					e.AddRetransmitted(at(float64(ms)), 1448)
				}
			}
			require.InDelta(t, 300*time.Millisecond, slowest, float64(20*time.Millisecond), "the full buffer is 300 ms at 4 Mbit/s")
			got := cellRecord(t, e, lteA)
			assert.InDelta(t, buffer, float64(got.CeilingBytes), buffer*0.05, "ceiling")
			assert.InDelta(t, buffer, float64(got.BufferBytes), buffer*0.05, "estimate")
		})
	}
}
