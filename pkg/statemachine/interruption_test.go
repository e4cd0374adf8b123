package statemachine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
)

func TestInterruptionGauge(t *testing.T) {
	type burstAt struct{ start, end int }
	cases := []struct {
		name      string
		commandMs int // -1: no command, the handover was unannounced
		execMs    int
		bursts    []burstAt
		want      time.Duration
		measured  bool
	}{
		{
			name: "the gap across the execution", commandMs: 100, execMs: 130,
			bursts: []burstAt{{60, 90}, {92, 112}, {135, 170}}, want: 23 * time.Millisecond, measured: true,
		},
		{
			name: "a gap that began before the command counts from the command", commandMs: 100, execMs: 130,
			bursts: []burstAt{{40, 50}, {140, 170}}, want: 40 * time.Millisecond, measured: true,
		},
		{
			name: "the longest gap between command and the first burst after the execution", commandMs: 100, execMs: 130,
			bursts: []burstAt{{90, 101}, {131, 132}, {134, 160}}, want: 30 * time.Millisecond, measured: true,
		},
		{
			name: "a burst that ended before the execution measures nothing yet", commandMs: 100, execMs: 130,
			bursts: []burstAt{{90, 101}, {110, 125}}, measured: false,
		},
		{
			name: "an unannounced handover is followed from its execution", commandMs: -1, execMs: 130,
			bursts: []burstAt{{100, 120}, {150, 170}}, want: 20 * time.Millisecond, measured: true,
		},
		{
			name: "a pause longer than interruptionMaxGap is the application's", commandMs: 100, execMs: 130,
			bursts: []burstAt{{90, 101}, {700, 750}}, measured: false,
		},
		{
			name: "no burst before it: nothing to measure from", commandMs: 100, execMs: 130,
			bursts: []burstAt{{140, 170}}, measured: false,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var g interruptionGauge
			if tc.commandMs >= 0 {
				g.follow(at(tc.commandMs))
			}
			var prevEnd time.Time
			var got time.Duration
			measured := false
			executed := false
			for _, b := range tc.bursts {
				if !executed && at(b.end).After(at(tc.execMs)) {
					g.executed(at(tc.execMs))
					executed = true
				}
				gap, ok := g.burst(estimator.Burst{Start: at(b.start), End: at(b.end)}, prevEnd)
				if ok {
					got, measured = gap, true
				}
				prevEnd = at(b.end)
			}
			assert.Equal(t, tc.measured, measured)
			assert.Equal(t, tc.want, got)
		})
	}
}

// interruptedHandover runs handoverSteps with the downlink seen by the
// datapath: the source delivers until 105, the command at 100, the
// execution at 130 and the target's first burst from 105+gapMs.
func interruptedHandover(gapMs int) []step {
	return []step{
		serve(0, lteA, diag.Cell{}),
		meas(0, diag.EventA3, lteA, lteB),
		burst(80, 95),
		cmd(100, diag.HOPCell, lteA, lteB),
		burst(97, 105),
		done(130, lteB),
		burst(105+gapMs, 160+gapMs),
	}
}

// burstEnded: the target's first burst after the execution ended Smoothing.
const burstEnded = "smoothing>stable:burst_end"

// TestPreparationClampHeadroom: the Preparation clamp is the target's
// buffer plus C * (RTT_min - T) once the interruption T of a handover
// has been measured and is shorter than RTT_min, the paper's buffer alone
// otherwise.
func TestPreparationClampHeadroom(t *testing.T) {
	// lteB delivers 8 MB/s at 50 ms: a bandwidth-delay product of 400 kB.
	const rate = 8_000_000
	nextPreparation := func(gapMs int) []step {
		return append(interruptedHandover(gapMs),
			rampLink(210, 900, rate, 0), meas(905, diag.EventA3, lteB, lteA))
	}
	clampWithHeadroom := func(gap time.Duration) func(*testing.T, *harness) {
		return func(t *testing.T, h *harness) {
			kept, ok := h.est.Carried(at(905))
			require.True(t, ok)
			require.Equal(t, 50*time.Millisecond, kept.MinRTT)
			headroom := uint64(float64(kept.BDP) * float64(kept.MinRTT-gap) / float64(kept.MinRTT))
			assert.Greater(t, headroom, uint64(0))
			assert.Equal(t, windowBytes(lteABuffer+headroom), h.act.clampBytes)
			assert.Equal(t, estimator.SourceCell, h.m.Status().InForce.ClampSource)
		}
	}
	runMachineCases(t, []machineCase{
		{
			name:        "a 20 ms interruption under a 50 ms RTT leaves three fifths of the product in flight",
			steps:       nextPreparation(20),
			state:       Preparation,
			transitions: []string{predicted, executed, burstEnded, predicted},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check:       clampWithHeadroom(20 * time.Millisecond),
		},
		{
			name:        "an interruption of a round trip or more: the paper's clamp",
			steps:       nextPreparation(60),
			state:       Preparation,
			transitions: []string{predicted, executed, burstEnded, predicted},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, uint32(lteABuffer), h.act.clampBytes)
				assert.Equal(t, []time.Duration{60 * time.Millisecond}, h.m.interruptions)
			},
		},
		{
			name: "no interruption measured yet: the paper's clamp",
			steps: []step{
				serve(0, lteB, diag.Cell{}), rampLink(10, 700, rate, 0),
				meas(705, diag.EventA3, lteB, lteA),
			},
			state:       Preparation,
			transitions: []string{predicted},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, uint32(lteABuffer), h.act.clampBytes)
			},
		},
		{
			name: "the lower median of the interruptions kept counts",
			steps: append(nextPreparation(20), func(h *harness) {
				h.m.recordInterruption(35 * time.Millisecond)
				h.m.recordInterruption(70 * time.Millisecond)
				h.m.recordInterruption(10 * time.Millisecond)
			}, meas(906, diag.EventA3, lteB, nrA)),
			state:       Preparation,
			transitions: []string{predicted, executed, burstEnded, predicted},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				kept, ok := h.est.Carried(at(906))
				require.True(t, ok)
				// 10, 20, 35 and 70 ms: 20 ms.
				headroom := uint64(float64(kept.BDP) * float64(kept.MinRTT-20*time.Millisecond) / float64(kept.MinRTT))
				assert.Equal(t, windowBytes(nrABuffer+headroom), h.act.clampBytes)
			},
		},
		{
			name:  "from mmWave down to sub-6 the target drains slower than the source delivered: no headroom",
			setup: withBandwidth,
			steps: []step{
				serve(0, lteA, mmA),
				func(h *harness) { h.m.recordInterruption(20 * time.Millisecond) },
				meas(10, diag.EventA2, mmA, diag.Cell{}),
			},
			state:       Preparation,
			transitions: []string{predicted},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, uint32(lteABuffer), h.act.clampBytes)
			},
		},
	})
}

func TestInterruptionsKept(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	assert.Zero(t, h.m.interruption(), "none measured")
	for i := range interruptionSamples + 3 {
		h.m.recordInterruption(time.Duration(100-i) * time.Millisecond)
	}
	// 97 down to 90 ms are kept: the three oldest went first.
	assert.Len(t, h.m.interruptions, interruptionSamples)
	assert.Equal(t, 93*time.Millisecond, h.m.interruption(), "the lower median of 90..97")
}
