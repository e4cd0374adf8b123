package statemachine

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/logbuf"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

type harness struct {
	t   *testing.T
	m   *Machine
	est *estimator.Estimator
	act *fakeActuator
	obs *recordingObserver
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	est, err := seededEstimator()
	require.NoError(t, err)
	h := &harness{t: t, est: est, act: &fakeActuator{failing: map[string]bool{}}, obs: &recordingObserver{}}
	h.m, err = New(cfg, est, h.act, nil)
	require.NoError(t, err)
	h.m.SetObserver(h.obs)
	return h
}

// step is one input to the machine.
type step func(h *harness)

func meas(ms int, ev diag.MeasEvent, serving, neighbor diag.Cell) step {
	return func(h *harness) {
		h.m.HandleEvent(diag.Event{Type: diag.TypeMeasReport, Time: at(ms), Meas: ev, Serving: serving, Neighbor: neighbor})
	}
}

// serve makes the machine learn its serving cells from reports that
// predict nothing.
func serve(ms int, pcell, scg diag.Cell) step {
	return func(h *harness) {
		meas(ms, diag.EventA4, pcell, diag.Cell{})(h)
		if !scg.IsZero() {
			meas(ms, diag.EventA4, scg, diag.Cell{})(h)
		}
	}
}

func cmd(ms int, kind diag.HOKind, source, target diag.Cell) step {
	return func(h *harness) {
		h.m.HandleEvent(diag.Event{Type: diag.TypeHOCommand, Time: at(ms), Kind: kind, Source: source, Target: target})
	}
}

func done(ms int, cell diag.Cell) step {
	return func(h *harness) {
		h.m.HandleEvent(diag.Event{Type: diag.TypeHOComplete, Time: at(ms), Cell: cell})
	}
}

func fail(ms int, cause diag.FailureCause) step {
	return func(h *harness) {
		h.m.HandleEvent(diag.Event{Type: diag.TypeHOFailure, Time: at(ms), Cause: cause})
	}
}

func tick(ms int) step { return func(h *harness) { h.m.Tick(at(ms)) } }

func burst(startMs, endMs int) step {
	return func(h *harness) {
		h.m.OnBurstEnd(estimator.Burst{Start: at(startMs), End: at(endMs), Bytes: 100_000, Packets: 70})
	}
}

func released(ms int) step { return func(h *harness) { h.m.OnFlowsReleased(at(ms)) } }

// rtt feeds a 50 ms RTT sample: the minimum RTT restarts with each new
// serving cell.
func rtt(ms int) step {
	return func(h *harness) { h.est.AddRTT(h.est.Path(), at(ms), 50*time.Millisecond) }
}

// withBandwidth feeds the estimator 12.5 MB/s at a 50 ms RTT up to t0:
// Eq. 2 gives 2 * 625000 * 50/50 = 1,250,000 bytes.
func withBandwidth(h *harness) {
	for i, ms := range []int{-100, -50, 0} {
		h.est.AddRTT(h.est.Path(), at(ms), 50*time.Millisecond)
		h.est.AddBytes(at(ms), uint64(i)*625_000)
	}
}

// sub6Rate is a 15 Mbit/s sub-6 cell; at a 50 ms RTT Eq. 2 gives
// 2 * 93,750 * 50/50 bytes.
const (
	sub6Rate   = 1_875_000
	sub6Window = 187_500
)

// mmWaveRate is a 120 Mbit/s mmWave cell; the mmWave hold over the
// default T2 (146 ms, above the 50 ms RTT) lets through what it delivers
// in T2 plus the smallest sub-6 buffer (nrA's).
const (
	mmWaveRate = 8 * sub6Rate
	mmWaveHold = mmWaveRate*146/1000 + nrABuffer
)

// sub6Link feeds the estimator bytesPerSecond over [fromMs, toMs]: a byte
// sample every 10 ms counting on from withBandwidth's, and a 50 ms RTT
// sample every 50 ms.
func sub6Link(fromMs, toMs int, bytesPerSecond uint64) step {
	return sub6LinkFrom(fromMs, toMs, bytesPerSecond, 0)
}

// sub6LinkFrom is sub6Link for a counter already offset bytes past
// withBandwidth's.
func sub6LinkFrom(fromMs, toMs int, bytesPerSecond, offset uint64) step {
	return func(h *harness) {
		base := 2*625_000 + offset
		for ms := fromMs; ms <= toMs; ms += 10 {
			if (ms-fromMs)%50 == 0 {
				h.est.AddRTT(h.est.Path(), at(ms), 50*time.Millisecond)
			}
			h.est.AddBytes(at(ms), base+bytesPerSecond*uint64(ms-fromMs)/1000)
		}
	}
}

// predictionTimingOut predicts a handover from lteA to lteB at 10 that no
// command follows: the prediction times out at 2*T2 (default T2).
func predictionTimingOut() []step {
	return []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB), tick(301), tick(302)}
}

// handoverSteps runs a predicted pcell handover from lteA to lteB: report
// at 0, command at 100, completion at 130.
func handoverSteps() []step {
	return []step{
		serve(0, lteA, diag.Cell{}),
		meas(0, diag.EventA3, lteA, lteB),
		cmd(100, diag.HOPCell, lteA, lteB),
		done(130, lteB),
	}
}

// releaseToAnchor runs an SCG release from mmA back to lteA, predicted
// by an A2 at 10 and executed at its command at 50 (no random access);
// the completion a test bed may still send at 80 changes nothing; flows
// release at 100.
func releaseToAnchor() []step {
	return []step{
		serve(0, lteA, mmA),
		meas(10, diag.EventA2, mmA, diag.Cell{}),
		cmd(50, diag.HOSCGRelease, mmA, diag.Cell{}),
		done(80, diag.Cell{}),
		rtt(90),
		released(100),
	}
}

type machineCase struct {
	name        string
	cfg         func(*Config)
	setup       func(*harness)
	steps       []step
	state       State
	transitions []string
	predictions []string
	handovers   []string
	// ops, when set, is the exact sequence of actuator calls.
	ops   []string
	check func(t *testing.T, h *harness)
}

func runMachineCases(t *testing.T, cases []machineCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			h := newHarness(t, cfg)
			if tc.setup != nil {
				tc.setup(h)
			}
			for _, s := range tc.steps {
				s(h)
			}
			assert.Equal(t, tc.state, h.m.State(), "state")
			assert.Equal(t, tc.transitions, h.obs.transitions, "transitions")
			assert.Equal(t, tc.predictions, h.obs.predictions, "prediction outcomes")
			assert.Equal(t, tc.handovers, h.obs.handovers, "handovers")
			if tc.ops != nil {
				assert.Equal(t, tc.ops, h.act.ops(), "actuator calls")
			}
			if tc.check != nil {
				tc.check(t, h)
			}
		})
	}
}

const (
	predicted     = "stable>preparation:predicted"
	commanded     = "stable>preparation:command_unpredicted"
	executed      = "preparation>smoothing:executed"
	releasedFlows = "smoothing>stable:flows_released"
)

func TestAlgorithm1Prediction(t *testing.T) {
	clampOf := func(bytes uint32, source string) func(*testing.T, *harness) {
		return func(t *testing.T, h *harness) {
			st := h.m.Status()
			assert.Equal(t, bytes, st.InForce.ClampBytes)
			assert.Equal(t, source, st.InForce.ClampSource)
		}
	}
	runMachineCases(t, []machineCase{
		{
			name:        "A3 between sub-6 cells clamps to the target's estimate",
			steps:       []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB)},
			state:       Preparation,
			transitions: []string{predicted},
			ops:         []string{"prepare_suppression", "set_clamp(400000)"},
			check: func(t *testing.T, h *harness) {
				st := h.m.Status()
				require.NotNil(t, st.Prediction)
				assert.Equal(t, lteB, st.Prediction.Target)
				assert.Equal(t, at(10+292), st.Prediction.Deadline, "2 * default T2")
				assert.Equal(t, at(10+292), h.act.calls[0].deadline, "suppression of holes with the prediction")
				assert.Equal(t, at(10).Add(DefaultConfig().PolicyLease), h.act.calls[1].deadline, "a lease: the machine ends the clamp with the prediction, a lease after it at the latest")
				assert.Equal(t, estimator.SourceCell, st.InForce.ClampSource)
			},
		},
		{
			name:        "A3 between mmWave cells (SCG change) predicts without a clamp of its own",
			steps:       []step{serve(0, lteA, mmA), meas(10, diag.EventA3, mmA, mmB)},
			state:       Preparation,
			transitions: []string{predicted},
			ops:         []string{"prepare_suppression"},
		},
		{
			name:  "A3 towards a cell of the other type predicts nothing",
			steps: []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, mmA)},
			state: Stable,
			ops:   []string{},
		},
		{
			name:        "B1 on LTE towards mmWave predicts an SCG addition, without a clamp",
			steps:       []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventB1, lteA, mmA)},
			state:       Preparation,
			transitions: []string{predicted},
			ops:         []string{"prepare_suppression"},
		},
		{
			name:        "B1 towards an unknown NR sub-6 cell uses the band minimum",
			steps:       []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventB1, lteA, nrB)},
			state:       Preparation,
			transitions: []string{predicted},
			check:       clampOf(nrABuffer, estimator.SourceBandMin),
		},
		{
			name:        "A5 on sub-6 towards mmWave predicts",
			steps:       []step{serve(0, nrA, diag.Cell{}), meas(10, diag.EventA5, nrA, mmB)},
			state:       Preparation,
			transitions: []string{predicted},
		},
		{
			name:  "A5 towards sub-6 predicts nothing",
			steps: []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA5, lteA, lteB)},
			state: Stable,
		},
		{
			name:        "A2 of the mmWave SCG predicts its release to the anchor",
			steps:       []step{serve(0, lteA, mmA), meas(10, diag.EventA2, mmA, diag.Cell{})},
			state:       Preparation,
			transitions: []string{predicted},
			ops:         []string{"prepare_suppression", "set_clamp(300000)"},
			check: func(t *testing.T, h *harness) {
				st := h.m.Status()
				require.NotNil(t, st.Prediction)
				assert.Equal(t, lteA, st.Prediction.Target)
				assert.Equal(t, estimator.SourceCell, st.InForce.ClampSource)
			},
		},
		{
			name:        "A2 of a standalone mmWave cell predicts an unknown sub-6 target",
			steps:       []step{serve(0, mmA, diag.Cell{}), meas(10, diag.EventA2, mmA, diag.Cell{})},
			state:       Preparation,
			transitions: []string{predicted},
			check:       clampOf(nrABuffer, estimator.SourceBandMin),
		},
		{
			name:  "A2 on sub-6 predicts nothing",
			steps: []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA2, lteA, diag.Cell{})},
			state: Stable,
		},
		{
			name: "A4, A6 and B2 predict nothing",
			steps: []step{
				serve(0, lteA, diag.Cell{}),
				meas(10, diag.EventA4, lteA, lteB),
				meas(20, diag.EventA6, lteA, lteB),
				meas(30, diag.EventB2, lteA, mmA),
			},
			state: Stable,
			ops:   []string{},
		},
		{
			name:  "B1 on a mmWave serving cell predicts nothing",
			steps: []step{serve(0, mmA, diag.Cell{}), meas(10, diag.EventB1, mmA, lteA)},
			state: Stable,
		},
		{
			name: "a report without serving cell is judged on the known one",
			steps: []step{
				serve(0, lteA, mmA),
				meas(10, diag.EventA2, diag.Cell{}, diag.Cell{}),
			},
			state:       Preparation,
			transitions: []string{predicted},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, lteA, h.m.Status().Prediction.Target)
			},
		},
		{
			name: "bands derived from the ARFCN when the report has none",
			steps: []step{
				serve(0, lteA, diag.Cell{}),
				meas(10, diag.EventB1, diag.Cell{RAT: diag.RATLTE, PCI: 1, ARFCN: 1850}, diag.Cell{RAT: diag.RATNR, PCI: 7, ARFCN: 2070000}),
			},
			state:       Preparation,
			transitions: []string{predicted},
			check: func(t *testing.T, h *harness) {
				require.NotNil(t, h.m.Status().Prediction)
				assert.Equal(t, diag.BandMmWave, h.m.Status().Prediction.Target.Band)
				assert.Zero(t, h.act.clampBytes, "towards mmWave")
			},
		},
		{
			// Until a report or handover names the serving cell (GSMTAP v2
			// reports never do), the UE is taken to be on sub-6, as for
			// every other decision.
			name:        "A3 towards a sub-6 cell before the serving cell is known predicts",
			steps:       []step{meas(10, diag.EventA3, diag.Cell{}, lteB)},
			state:       Preparation,
			transitions: []string{predicted},
			ops:         []string{"prepare_suppression", "set_clamp(400000)"},
			check: func(t *testing.T, h *harness) {
				require.NotNil(t, h.m.Status().Prediction)
				assert.Equal(t, lteB, h.m.Status().Prediction.Target)
			},
		},
		{
			name:  "A3 towards mmWave before the serving cell is known predicts nothing",
			steps: []step{meas(10, diag.EventA3, diag.Cell{}, mmA)},
			state: Stable,
			ops:   []string{},
		},
		{
			name:  "the prediction switch off ignores every report",
			cfg:   func(c *Config) { c.Prediction = false },
			steps: []step{serve(0, lteA, mmA), meas(10, diag.EventA3, mmA, mmB), meas(20, diag.EventB1, lteA, mmB)},
			state: Stable,
			ops:   []string{},
		},
	})
}

// TestRepeatedReportRenewsPrediction: with learning, a report repeating
// the pending prediction holds it for another window from the repeat,
// as one prediction made at the first report.
func TestRepeatedReportRenewsPrediction(t *testing.T) {
	lteC := diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 3, ARFCN: 1850}
	pending := func(predictedMs, deadlineMs int) func(*testing.T, *harness) {
		return func(t *testing.T, h *harness) {
			p := h.m.Status().Prediction
			require.NotNil(t, p)
			assert.Equal(t, at(predictedMs), p.PredictedAt, "still the first report's prediction")
			assert.Equal(t, at(deadlineMs), p.Deadline)
			require.NotNil(t, h.m.Status().InForce.ClampDeadline)
			assert.False(t, h.m.Status().InForce.ClampDeadline.After(at(deadlineMs).Add(DefaultConfig().PolicyLease)), "the clamp ends a lease after the prediction at the latest")
		}
	}
	runMachineCases(t, []machineCase{
		{
			name: "a repeat holds the prediction a window past itself",
			steps: []step{
				serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB),
				meas(200, diag.EventA3, lteA, lteB), tick(302), tick(491),
			},
			state:       Preparation,
			transitions: []string{predicted},
			check:       pending(10, 200+292),
		},
		{
			name: "it times out a window after the last repeat",
			steps: []step{
				serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB),
				meas(200, diag.EventA3, lteA, lteB), meas(450, diag.EventA3, lteA, lteB), tick(741), tick(742),
			},
			state:       Stable,
			transitions: []string{predicted, "preparation>stable:prediction_timeout"},
			predictions: []string{OutcomeTimedOut},
		},
		{
			name: "a command answering the repeat confirms it",
			steps: []step{
				serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB),
				meas(200, diag.EventA3, lteA, lteB), tick(350), cmd(400, diag.HOPCell, lteA, lteB),
			},
			state:       Preparation,
			transitions: []string{predicted},
			predictions: []string{OutcomeConfirmed},
		},
		{
			name: "a repeat after the timeout is a new prediction",
			steps: []step{
				serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB), tick(302),
				meas(400, diag.EventA3, lteA, lteB),
			},
			state:       Preparation,
			transitions: []string{predicted, "preparation>stable:prediction_timeout", predicted},
			predictions: []string{OutcomeTimedOut},
			check:       pending(400, 400+292),
		},
		{
			name: "a report of the target from another serving cell does not renew",
			steps: []step{
				serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB),
				meas(200, diag.EventA3, lteC, lteB), tick(302),
			},
			state:       Stable,
			transitions: []string{predicted, "preparation>stable:prediction_timeout"},
			predictions: []string{OutcomeTimedOut},
		},
	})
}

func TestPredictionFallbacks(t *testing.T) {
	runMachineCases(t, []machineCase{
		{
			name:        "A1 of the predicting cell cancels",
			steps:       []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB), meas(50, diag.EventA1, lteA, diag.Cell{})},
			state:       Stable,
			transitions: []string{predicted, "preparation>stable:cancelled_a1"},
			predictions: []string{OutcomeCancelledA1},
			ops:         []string{"prepare_suppression", "set_clamp(400000)", "stop_suppression", "clear_clamp"},
		},
		{
			name:        "A1 of another cell does not cancel",
			steps:       []step{serve(0, lteA, mmA), meas(10, diag.EventA3, mmA, mmB), meas(50, diag.EventA1, lteA, diag.Cell{})},
			state:       Preparation,
			transitions: []string{predicted},
		},
		{
			// The A3 named no serving cell; the A1 does, and that cell
			// may well be the one that made the prediction.
			name: "A1 cancels a prediction made before the serving cell was known",
			steps: []step{
				meas(10, diag.EventA3, diag.Cell{}, lteB),
				meas(50, diag.EventA1, lteA, diag.Cell{}),
			},
			state:       Stable,
			transitions: []string{predicted, "preparation>stable:cancelled_a1"},
			predictions: []string{OutcomeCancelledA1},
		},
		{
			name: "A1 after the command does not cancel",
			steps: []step{
				serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB),
				cmd(60, diag.HOPCell, lteA, lteB), meas(70, diag.EventA1, lteA, diag.Cell{}),
			},
			state:       Preparation,
			transitions: []string{predicted},
			predictions: []string{OutcomeConfirmed},
		},
		{
			name: "no command within 2*T2 (default T2) times out",
			steps: []step{
				serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB),
				tick(301), tick(302),
			},
			state:       Stable,
			transitions: []string{predicted, "preparation>stable:prediction_timeout"},
			predictions: []string{OutcomeTimedOut},
			// The tick before the timeout renews the clamp past the
			// prediction's end: the timeout itself releases it.
			ops: []string{"prepare_suppression", "set_clamp(400000)", "set_clamp(400000)", "stop_suppression", "clear_clamp"},
		},
		{
			name: "Algorithm 1 keeps the first report's window through a repeat",
			cfg:  func(c *Config) { c.Learning = false },
			steps: []step{
				serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB),
				meas(200, diag.EventA3, lteA, lteB), tick(302),
			},
			state:       Stable,
			transitions: []string{predicted, "preparation>stable:prediction_timeout"},
			predictions: []string{OutcomeTimedOut},
		},
		{
			name: "a report towards another target restarts the prediction",
			steps: []step{
				serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB),
				meas(200, diag.EventA3, lteA, nrA), tick(302),
			},
			state:       Preparation,
			transitions: []string{predicted},
			ops:         []string{"prepare_suppression", "set_clamp(400000)", "prepare_suppression", "set_clamp(200000)"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, at(200+292), h.m.Status().Prediction.Deadline)
			},
		},
		{
			name: "no completion within the execution timeout releases",
			steps: []step{
				serve(0, lteA, diag.Cell{}), cmd(10, diag.HOPCell, lteA, lteB),
				tick(300), tick(1009), tick(1010),
			},
			state:       Stable,
			transitions: []string{commanded, "preparation>stable:execution_timeout"},
			ops: []string{
				"prepare_suppression", "set_clamp(400000)", "set_clamp(400000)", "set_clamp(400000)",
				"stop_suppression", "clear_clamp",
			},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, at(160), h.act.calls[0].deadline, "suppression from the command for SmoothingMax")
				assert.Equal(t, at(510), h.act.calls[1].deadline, "one lease")
				assert.Equal(t, at(800), h.act.calls[2].deadline, "renewed by a lease")
				assert.Equal(t, at(1509), h.act.calls[3].deadline, "a lease, within the execution timeout plus a lease")
				assert.Equal(t, lteA, h.m.Status().Serving, "no completion, no move")
			},
		},
		{
			name:        "a command without prediction still enters Preparation",
			steps:       []step{serve(0, lteA, diag.Cell{}), cmd(10, diag.HOPCell, lteA, lteB)},
			state:       Preparation,
			transitions: []string{commanded},
			ops:         []string{"prepare_suppression", "set_clamp(400000)"},
			check: func(t *testing.T, h *harness) {
				st := h.m.Status()
				require.NotNil(t, st.Command)
				assert.Nil(t, st.Prediction)
				assert.Equal(t, at(1010), st.Command.Deadline)
				assert.Equal(t, lteB, st.Command.NewServing)
				assert.Equal(t, uint64(1), st.Counters.UnpredictedCommands)
			},
		},
		{
			name: "the command confirms the prediction and retargets the clamp",
			steps: []step{
				serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB),
				cmd(60, diag.HOPCell, lteA, nrA),
			},
			state:       Preparation,
			transitions: []string{predicted},
			predictions: []string{OutcomeConfirmed},
			ops:         []string{"prepare_suppression", "set_clamp(400000)", "prepare_suppression", "set_clamp(200000)"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, at(60+150), h.act.calls[2].deadline, "suppression from the command for SmoothingMax")
				assert.Equal(t, at(560), h.act.calls[3].deadline)
				st := h.m.Status()
				assert.Equal(t, 1, st.T2[0].Samples)
				assert.InDelta(t, 50.0, st.T2[0].MeanMillis, 0.001)
			},
		},
		{
			name:  "handover failure in Preparation holds the clamp for the re-establishment, at most the smallest sub-6 buffer estimate",
			steps: []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB), fail(50, diag.CauseHOF)},
			state: Stable,
			transitions: []string{
				predicted, "preparation>stable:failure",
			},
			ops: []string{"prepare_suppression", "set_clamp(400000)", "stop_suppression", "set_clamp(200000)"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, ClampSourceReestablishment, h.m.Status().InForce.ClampSource)
				d := h.m.Status().InForce.ClampDeadline
				require.NotNil(t, d)
				assert.Equal(t, at(50).Add(DefaultConfig().PolicyLease), *d, "renewed by lease, within failureHoldMax")
			},
		},
		{
			name:  "a failure's hold ends after failureHoldMax without a re-establishment",
			steps: []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB), fail(50, diag.CauseHOF), tick(1049), tick(1050)},
			state: Stable,
			transitions: []string{
				predicted, "preparation>stable:failure",
			},
			check: func(t *testing.T, h *harness) {
				assert.Zero(t, h.act.clampBytes)
				assert.Equal(t, "clear_clamp", h.act.ops()[len(h.act.calls)-1])
			},
		},
		{
			name:      "the re-establishment after a failure suppresses nothing: the failed cell's data is lost",
			steps:     []step{serve(0, lteA, diag.Cell{}), fail(100, diag.CauseRLF), done(200, lteB)},
			state:     Stable,
			handovers: []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.NotContains(t, h.act.ops(), OpStartSuppression)
				assert.Equal(t, lteB, h.m.Status().Serving)
			},
		},
		{
			name: "a handover after the re-establishment suppresses again",
			steps: []step{serve(0, lteA, diag.Cell{}), fail(100, diag.CauseRLF), done(200, lteB),
				meas(1000, diag.EventA3, lteB, lteA), cmd(1050, diag.HOPCell, lteB, lteA), done(1080, lteA)},
			state:       Smoothing,
			transitions: []string{predicted, executed},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6", "sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Contains(t, h.act.ops(), OpStartSuppression)
			},
		},
		{
			name: "a completion after the re-established cell reported is a handover's: the log lost its command",
			steps: []step{serve(0, lteA, diag.Cell{}), fail(100, diag.CauseRLF),
				meas(1000, diag.EventA2, lteB, diag.Cell{}), done(1500, nrA)},
			state:       Smoothing,
			transitions: []string{"stable>smoothing:executed"},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Contains(t, h.act.ops(), OpStartSuppression)
			},
		},
		{
			name: "a command after a failure whose re-establishment the log lost is a handover like any",
			steps: []step{serve(0, lteA, diag.Cell{}), fail(100, diag.CauseRLF),
				meas(1000, diag.EventA3, lteA, lteB), cmd(1050, diag.HOPCell, lteA, lteB), done(1080, lteB)},
			state:       Smoothing,
			transitions: []string{predicted, executed},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Contains(t, h.act.ops(), OpStartSuppression)
			},
		},
		{
			name:        "failure releases clamp and suppression at once and drops the SCG",
			steps:       []step{serve(0, lteA, mmA), meas(10, diag.EventA3, mmA, mmB), cmd(50, diag.HOSCGChange, mmA, mmB), done(80, mmB), fail(100, diag.CauseRLF)},
			state:       Stable,
			transitions: []string{predicted, executed, "smoothing>stable:failure"},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"mmwave_mmwave"},
			ops:         []string{"prepare_suppression", "prepare_suppression", "start_suppression", "stop_suppression"},
			check: func(t *testing.T, h *harness) {
				st := h.m.Status()
				assert.Nil(t, st.SCG)
				assert.Equal(t, lteA, st.Serving)
				assert.Equal(t, uint64(1), st.Counters.Failures)
				assert.False(t, h.act.suppressing)
			},
		},
	})
}

func TestLearnedT2PerBand(t *testing.T) {
	cfg := DefaultConfig()
	h := newHarness(t, cfg)
	serve(0, lteA, diag.Cell{})(h)
	// Five sub-6 handovers, each commanded 50 ms after the report.
	from, to := lteA, lteB
	for i := range cfg.MinT2Samples {
		base := 1000 * (i + 1)
		meas(base, diag.EventA3, from, to)(h)
		cmd(base+50, diag.HOPCell, from, to)(h)
		done(base+80, to)(h)
		released(base + 90)(h)
		from, to = to, from
	}
	st := h.m.Status()
	require.Len(t, st.T2, 2)
	assert.Equal(t, diag.BandSub6, st.T2[0].Band)
	assert.Equal(t, cfg.MinT2Samples, st.T2[0].Samples)
	assert.InDelta(t, 50.0, st.T2[0].InUseMillis, 0.001)
	assert.InDelta(t, 146.0, st.T2[1].InUseMillis, 0.001, "mmWave has no samples: default")

	// The sub-6 timeout is now 2*50 ms.
	meas(10_000, diag.EventA3, from, to)(h)
	tick(10_099)(h)
	assert.Equal(t, Preparation, h.m.State())
	tick(10_100)(h)
	assert.Equal(t, Stable, h.m.State())

	// The mmWave one is still 2*146 ms.
	serve(11_000, from, mmA)(h)
	meas(11_000, diag.EventA3, mmA, mmB)(h)
	tick(11_291)(h)
	assert.Equal(t, Preparation, h.m.State())
	tick(11_292)(h)
	assert.Equal(t, Stable, h.m.State())
}

func TestLateCommandTeachesT2(t *testing.T) {
	tests := []struct {
		name      string
		commandMs int
		samples   int
	}{
		{name: "command soon after the timeout is a sample", commandMs: 400, samples: 1},
		{name: "command long after the timeout is unrelated", commandMs: 4 * 146, samples: 1},
		{name: "command beyond 4*T2 is not a sample", commandMs: 4*146 + 1, samples: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, DefaultConfig())
			serve(0, lteA, diag.Cell{})(h)
			meas(0, diag.EventA3, lteA, lteB)(h)
			tick(292)(h)
			require.Equal(t, Stable, h.m.State())
			cmd(tc.commandMs, diag.HOPCell, lteA, lteB)(h)
			st := h.m.Status()
			assert.Equal(t, tc.samples, st.T2[0].Samples)
			if tc.samples > 0 {
				assert.InDelta(t, float64(tc.commandMs), st.T2[0].MeanMillis, 0.001)
			}
		})
	}
}

// withoutRamp switches the post-handover ramp off in cases that describe
// what Smoothing and the bandwidth hold do on their own (TestRamp has the
// ramp's).
func withoutRamp(cases []machineCase) []machineCase {
	for i := range cases {
		own := cases[i].cfg
		cases[i].cfg = func(c *Config) {
			if own != nil {
				own(c)
			}
			c.Ramp = false
		}
	}
	return cases
}

func TestSmoothing(t *testing.T) {
	runMachineCases(t, withoutRamp([]machineCase{
		{
			name: "suppression holds holes from the prediction, opens an epoch at execution, and ends when the flows release",
			// Without the bandwidth hold, whose warm-up would keep the
			// handover's clamp (TestBandwidthHold).
			cfg:         func(c *Config) { c.BandwidthClamp = false },
			steps:       append(handoverSteps(), released(160)),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			ops: []string{
				"prepare_suppression", "set_clamp(400000)", "prepare_suppression", "set_clamp(400000)", "set_clamp(400000)",
				"start_suppression", "stop_suppression", "clear_clamp",
			},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, at(292), h.act.calls[0].deadline, "prediction: suppression of holes until its end")
				assert.Equal(t, at(250), h.act.calls[2].deadline, "command: until SmoothingMax after it")
				assert.Equal(t, at(600), h.act.calls[3].deadline, "command: one lease")
				assert.Equal(t, at(280), h.act.calls[4].deadline, "clamp held through Smoothing only")
				assert.Equal(t, at(280), h.act.calls[5].deadline, "suppression ends by SmoothingMax")
				assert.Equal(t, 1, h.act.epoch, "an epoch at execution")
				assert.Equal(t, lteB, h.m.Status().Serving)
			},
		},
		{
			name:        "smoothing ends with the first downlink burst after execution",
			steps:       append(handoverSteps(), burst(100, 125), tick(140), burst(135, 150)),
			state:       Stable,
			transitions: []string{predicted, executed, "smoothing>stable:burst_end"},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
		},
		{
			name:        "smoothing ends at its maximum duration",
			steps:       append(handoverSteps(), tick(279), tick(280)),
			state:       Stable,
			transitions: []string{predicted, executed, "smoothing>stable:smoothing_max"},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
		},
		{
			name: "a configured smoothing maximum is honoured",
			cfg:  func(c *Config) { c.SmoothingMax = 40 * time.Millisecond },
			steps: append(handoverSteps(), tick(169), func(h *harness) {
				assert.Equal(h.t, Smoothing, h.m.State())
			}, tick(170)),
			state:       Stable,
			transitions: []string{predicted, executed, "smoothing>stable:smoothing_max"},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
		},
		{
			name:        "suppression switch off: Stable right at execution",
			cfg:         func(c *Config) { c.Suppression, c.BandwidthClamp = false, false },
			steps:       handoverSteps(),
			state:       Stable,
			transitions: []string{predicted, "preparation>stable:executed"},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			ops:         []string{"set_clamp(400000)", "set_clamp(400000)", "clear_clamp"},
		},
		{
			name:        "a prediction during Smoothing waits for its end",
			steps:       append(handoverSteps(), meas(140, diag.EventA3, lteB, lteA), released(160)),
			state:       Preparation,
			transitions: []string{predicted, executed, "smoothing>preparation:flows_released"},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				st := h.m.Status()
				require.NotNil(t, st.Prediction)
				assert.Equal(t, at(140+292), st.Prediction.Deadline)
				assert.Equal(t, uint32(lteABuffer), st.InForce.ClampBytes)
				assert.True(t, st.InForce.Suppression, "the holes of the predicted handover")
				assert.Equal(t, at(140+292), h.act.suppressDeadline)
				assert.Equal(t, 1, h.act.epoch, "no epoch before the next execution")
			},
		},
		{
			name: "a prediction queued in Smoothing times out there",
			cfg:  func(c *Config) { c.DefaultT2 = 20 * time.Millisecond },
			steps: []step{
				serve(0, lteA, diag.Cell{}), cmd(100, diag.HOPCell, lteA, lteB), done(130, lteB),
				meas(140, diag.EventA3, lteB, lteA), tick(179),
				func(h *harness) { assert.NotNil(h.t, h.m.Status().Prediction) },
				tick(180),
				func(h *harness) { assert.Nil(h.t, h.m.Status().Prediction) },
				released(210),
			},
			state:       Stable,
			transitions: []string{commanded, executed, releasedFlows},
			predictions: []string{OutcomeTimedOut},
			handovers:   []string{"sub6_sub6"},
		},
		{
			name:        "A1 cancels a prediction queued in Smoothing",
			steps:       append(handoverSteps(), meas(140, diag.EventA3, lteB, lteA), meas(150, diag.EventA1, lteB, diag.Cell{}), released(160)),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed, OutcomeCancelledA1},
			handovers:   []string{"sub6_sub6"},
		},
		{
			name:        "a command during Smoothing starts the next handover",
			steps:       append(handoverSteps(), cmd(140, diag.HOPCell, lteB, lteA)),
			state:       Preparation,
			transitions: []string{predicted, executed, "smoothing>preparation:command_unpredicted"},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.True(t, h.act.suppressing, "holes of the new command")
				assert.Equal(t, at(140+150), h.act.suppressDeadline)
				assert.Equal(t, 1, h.act.epoch, "the execution's")
				assert.Equal(t, "prepare_suppression", h.act.calls[len(h.act.calls)-2].op)
				assert.Equal(t, uint32(lteABuffer), h.act.clampBytes)
			},
		},
		{
			name:        "a duplicate completion in Smoothing is ignored",
			steps:       append(handoverSteps(), done(135, lteB)),
			state:       Smoothing,
			transitions: []string{predicted, executed},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, uint64(1), h.m.Status().Counters.Ignored["complete_in_smoothing"])
			},
		},
		{
			name:        "a completion after a prediction whose command was not logged",
			steps:       []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB), done(100, diag.Cell{})},
			state:       Smoothing,
			transitions: []string{predicted, executed},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, lteB, h.m.Status().Serving)
			},
		},
		{
			name:        "an unannounced completion on mmWave beside the anchor adds an SCG",
			steps:       []step{serve(0, lteA, diag.Cell{}), done(10, mmA)},
			state:       Smoothing,
			transitions: []string{"stable>smoothing:executed"},
			handovers:   []string{"sub6_mmwave"},
			ops:         []string{"start_suppression"},
			check: func(t *testing.T, h *harness) {
				st := h.m.Status()
				require.NotNil(t, st.SCG)
				assert.Equal(t, mmA, st.Serving)
				assert.Equal(t, uint64(1), st.Counters.UnannouncedCompletions)
			},
		},
	}))
}

func TestHandoverKinds(t *testing.T) {
	runMachineCases(t, []machineCase{
		{
			name:        "pcell between sub-6 cells",
			steps:       []step{serve(0, lteA, diag.Cell{}), cmd(10, diag.HOPCell, lteA, lteB), done(40, diag.Cell{})},
			state:       Smoothing,
			transitions: []string{commanded, executed},
			handovers:   []string{"sub6_sub6"},
		},
		{
			name:        "SCG addition to mmWave",
			steps:       []step{serve(0, lteA, diag.Cell{}), cmd(10, diag.HOSCGAdd, lteA, mmA), done(40, mmA)},
			state:       Smoothing,
			transitions: []string{commanded, executed},
			handovers:   []string{"sub6_mmwave"},
		},
		{
			name:        "SCG change between mmWave cells",
			steps:       []step{serve(0, lteA, mmA), cmd(10, diag.HOSCGChange, mmA, mmB), done(40, mmB)},
			state:       Smoothing,
			transitions: []string{commanded, executed},
			handovers:   []string{"mmwave_mmwave"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, mmB, h.m.Status().Serving)
			},
		},
		{
			name:        "SCG release from mmWave",
			steps:       []step{serve(0, lteA, mmA), cmd(10, diag.HOSCGRelease, mmA, diag.Cell{}), done(40, diag.Cell{})},
			state:       Smoothing,
			transitions: []string{commanded, executed},
			handovers:   []string{"mmwave_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, lteA, h.m.Status().Serving)
				assert.Nil(t, h.m.Status().SCG)
			},
		},
		{
			name:        "pcell handover in EN-DC drops the SCG",
			steps:       []step{serve(0, lteA, mmA), cmd(10, diag.HOPCell, lteA, lteB), done(40, lteB)},
			state:       Smoothing,
			transitions: []string{commanded, executed},
			handovers:   []string{"mmwave_sub6"},
		},
		{
			name:        "standalone mmWave to sub-6 pcell handover",
			steps:       []step{serve(0, mmA, diag.Cell{}), cmd(10, diag.HOPCell, mmA, nrA), done(40, nrA)},
			state:       Smoothing,
			transitions: []string{commanded, executed},
			handovers:   []string{"mmwave_sub6"},
		},
	})
}

func TestCommandsOfOneReconfiguration(t *testing.T) {
	keepsSCG := func(t *testing.T, h *harness) {
		st := h.m.Status()
		assert.Equal(t, lteB, st.PCell)
		require.NotNil(t, st.SCG)
		assert.Equal(t, nrA, *st.SCG)
		assert.Equal(t, uint64(1), st.Counters.Ignored["complete_in_smoothing"], "the second completion")
	}
	runMachineCases(t, []machineCase{
		{
			name: "an anchor handover that re-syncs the SCG keeps it",
			steps: []step{
				serve(0, lteA, nrA),
				cmd(10, diag.HOSCGChange, nrA, nrA), cmd(10, diag.HOPCell, lteA, lteB),
				done(30, nrA), done(30, lteB),
			},
			state:       Smoothing,
			transitions: []string{commanded, executed},
			handovers:   []string{"sub6_sub6"},
			check:       keepsSCG,
		},
		{
			name: "the same in the other order",
			steps: []step{
				serve(0, lteA, nrA),
				cmd(10, diag.HOPCell, lteA, lteB), cmd(10, diag.HOSCGChange, nrA, nrA),
				done(30, lteB), done(30, nrA),
			},
			state:       Smoothing,
			transitions: []string{commanded, executed},
			handovers:   []string{"sub6_sub6"},
			check:       keepsSCG,
		},
		{
			name: "an SCG release and addition together are one SCG change",
			steps: []step{
				serve(0, lteA, mmA), meas(5, diag.EventA3, mmA, mmB),
				cmd(10, diag.HOSCGRelease, mmA, diag.Cell{}), cmd(11, diag.HOSCGAdd, diag.Cell{}, mmB),
				tick(20), done(40, mmB),
			},
			state:       Smoothing,
			transitions: []string{predicted, executed},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"mmwave_mmwave"},
			check: func(t *testing.T, h *harness) {
				st := h.m.Status()
				assert.Equal(t, mmB, st.Serving)
				assert.Zero(t, h.act.clampBytes, "no clamp for a mmWave target")
			},
		},
		{
			name: "an SCG release alone takes effect right after its reconfiguration",
			steps: []step{
				serve(0, lteA, mmA), cmd(10, diag.HOSCGRelease, mmA, diag.Cell{}),
				tick(14), func(h *harness) { assert.Equal(h.t, Preparation, h.m.State()) },
				tick(15),
			},
			state:       Smoothing,
			transitions: []string{commanded, executed},
			handovers:   []string{"mmwave_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, lteA, h.m.Status().Serving)
				assert.Equal(t, at(15), h.act.calls[len(h.act.calls)-1].deadline.Add(-150*time.Millisecond), "suppression from the release")
			},
		},
		{
			name:  "a completion on the serving cell is a late duplicate",
			steps: []step{serve(0, lteA, diag.Cell{}), done(10, lteA)},
			state: Stable,
			ops:   []string{},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, uint64(1), h.m.Status().Counters.Ignored["complete_on_serving_cell"])
			},
		},
		{
			// The command was not logged and the completion names no
			// cell: the A2 still said the UE leaves mmWave for sub-6.
			name: "a completion without cell after an A2 of a standalone mmWave cell leaves mmWave",
			steps: []step{
				serve(0, mmA, diag.Cell{}), meas(10, diag.EventA2, mmA, diag.Cell{}),
				done(60, diag.Cell{}),
			},
			state:       Smoothing,
			transitions: []string{predicted, executed},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{diag.ClassMmWaveSub6},
			check: func(t *testing.T, h *harness) {
				st := h.m.Status()
				assert.Equal(t, diag.Cell{Band: diag.BandSub6}, st.Serving, "an unknown sub-6 cell")
				assert.True(t, st.BandwidthHold)

				// The new cell's bursts must not go to the mmWave cell's
				// record, and the next report names the cell.
				h.est.AddBurst(estimator.Burst{Start: at(70), End: at(80), Bytes: 2 * mmABuffer, Packets: 7000})
				for _, r := range h.est.Cells() {
					if r.Cell.Key() == mmA.Key() {
						assert.Equal(t, uint64(mmABuffer), r.BufferBytes, "mmWave cell's record")
					}
				}
				meas(90, diag.EventA4, lteB, diag.Cell{})(h)
				assert.Equal(t, lteB, h.m.Status().Serving)
			},
		},
		{
			name:  "a completion without cell, command or prediction says nothing",
			steps: []step{serve(0, lteA, diag.Cell{}), done(10, diag.Cell{})},
			state: Stable,
			ops:   []string{},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, uint64(1), h.m.Status().Counters.Ignored["complete_unexplained"])
			},
		},
	})
}

// TestAnchorHandoverReleasingTheSCG covers one LTE reconfiguration that
// hands the anchor over and releases the SCG. Whatever anchor the release
// names (the old one, as an emitter that only knows the anchor before the
// reconfiguration does; the new one; none) and in whatever order the two
// commands arrive, the UE ends on the new anchor: the bursts measured there
// must go to its record, and the mmWave SCG left behind turns the bandwidth
// hold on.
func TestAnchorHandoverReleasingTheSCG(t *testing.T) {
	onNewAnchor := func(t *testing.T, h *harness) {
		st := h.m.Status()
		assert.Equal(t, lteB, st.PCell)
		assert.Equal(t, lteB, st.Serving)
		assert.Nil(t, st.SCG)
		assert.True(t, st.BandwidthHold, "mmWave SCG released to a sub-6 anchor")

		// A burst in the new cell must not raise the old anchor's record.
		h.est.AddBurst(estimator.Burst{Start: at(100), End: at(110), Bytes: 2_000_000, Packets: 1400})
		buffers := map[diag.CellKey]uint64{}
		for _, r := range h.est.Cells() {
			buffers[r.Cell.Key()] = r.BufferBytes
		}
		assert.Equal(t, uint64(lteABuffer), buffers[lteA.Key()], "old anchor's record")
		assert.Equal(t, uint64(2_000_000), buffers[lteB.Key()], "new anchor's record")
	}
	releaseTargets := []struct {
		name   string
		target diag.Cell
	}{
		{"the old anchor", lteA},
		{"the new anchor", lteB},
		{"no cell", diag.Cell{}},
	}
	var cases []machineCase
	for _, rt := range releaseTargets {
		handover := cmd(10, diag.HOPCell, lteA, lteB)
		release := cmd(10, diag.HOSCGRelease, mmA, rt.target)
		for _, order := range []struct {
			name     string
			commands []step
		}{
			{"handover first", []step{handover, release}},
			{"release first", []step{release, handover}},
		} {
			steps := append([]step{serve(0, lteA, mmA)}, order.commands...)
			cases = append(cases, machineCase{
				name:        "release naming " + rt.name + ", " + order.name,
				steps:       append(steps, tick(20), done(30, lteB)),
				state:       Smoothing,
				transitions: []string{commanded, executed},
				handovers:   []string{diag.ClassMmWaveSub6},
				check:       onNewAnchor,
			})
		}
	}
	cases = append(cases, machineCase{
		name: "release naming the old anchor with an addition: new anchor, new SCG",
		steps: []step{
			serve(0, lteA, nrA),
			cmd(10, diag.HOPCell, lteA, lteB), cmd(10, diag.HOSCGRelease, nrA, lteA), cmd(10, diag.HOSCGAdd, diag.Cell{}, nrB),
			done(30, lteB), done(30, nrB),
		},
		state:       Smoothing,
		transitions: []string{commanded, executed},
		handovers:   []string{diag.ClassSub6Sub6},
		check: func(t *testing.T, h *harness) {
			st := h.m.Status()
			assert.Equal(t, lteB, st.PCell)
			require.NotNil(t, st.SCG)
			assert.Equal(t, nrB, *st.SCG)
		},
	})
	runMachineCases(t, cases)
}

func TestBandwidthHold(t *testing.T) {
	runMachineCases(t, withoutRamp([]machineCase{
		{
			name:        "mmWave to sub-6 keeps the handover clamp until the sub-6 cell has an estimate",
			setup:       withBandwidth,
			steps:       releaseToAnchor(),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"mmwave_sub6"},
			ops:         []string{"prepare_suppression", "set_clamp(300000)", "prepare_suppression", "set_clamp(300000)", "set_clamp(300000)", "start_suppression", "stop_suppression", "set_clamp(300000)"},
			check: func(t *testing.T, h *harness) {
				st := h.m.Status()
				assert.True(t, st.BandwidthHold)
				assert.Equal(t, estimator.SourceCell, st.InForce.ClampSource, "the mmWave rate is not the sub-6 cell's")
				require.NotNil(t, st.InForce.ClampDeadline)
				assert.Equal(t, at(600), *st.InForce.ClampDeadline, "one lease")
			},
		},
		{
			name:  "Eq. 2 takes over once the sub-6 cell had a round, renewed by Tick and following the peak rate",
			setup: withBandwidth,
			steps: append(releaseToAnchor(),
				sub6Link(110, 300, sub6Rate), tick(300), tick(400),
				func(h *harness) {
					n := len(h.act.calls)
					require.GreaterOrEqual(h.t, n, 2)
					assert.Equal(h.t, actCall{op: OpSetClamp, bytes: sub6Window, deadline: at(800)}, h.act.calls[n-1], "Eq. 2 at 300")
				},
				// Half the rate over the next rounds: the peak of the
				// last second holds the clamp, then leaves it.
				sub6LinkFrom(310, 500, sub6Rate/2, sub6Rate*190/1000), tick(500),
				func(h *harness) {
					assert.Equal(h.t, uint32(sub6Window), h.act.clampBytes, "the peak round of the last second")
				},
				sub6LinkFrom(510, 1500, sub6Rate/2, sub6Rate*190/1000+sub6Rate/2*200/1000), tick(1500)),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"mmwave_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, uint32(sub6Window/2), h.act.clampBytes, "follows the slower rounds once the peak is a second old")
				assert.Equal(t, ClampSourceBandwidth, h.m.Status().InForce.ClampSource)
			},
		},
		{
			name:  "without an estimate of the new cell the handover clamp ends after the warm-up",
			setup: withBandwidth,
			steps: append(releaseToAnchor(), tick(1001), func(h *harness) {
				assert.Equal(h.t, uint32(lteABuffer), h.act.clampBytes, "within the warm-up")
			}, tick(1100)),
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"mmwave_sub6"},
			check: func(t *testing.T, h *harness) {
				st := h.m.Status()
				assert.True(t, st.BandwidthHold)
				assert.Zero(t, st.InForce.ClampBytes)
				assert.Zero(t, h.act.clampBytes)
			},
		},
		{
			name:  "the hold survives a sub-6 handover and the tighter clamp wins in Preparation",
			setup: withBandwidth,
			steps: append(releaseToAnchor(),
				sub6Link(110, 190, sub6Rate),
				meas(200, diag.EventA3, lteA, lteB),
				func(h *harness) {
					assert.Equal(h.t, uint32(sub6Window), h.act.clampBytes, "bandwidth estimate below the buffer estimate")
				},
				cmd(250, diag.HOPCell, lteA, lteB), done(280, lteB), rtt(290), released(300),
				func(h *harness) {
					assert.Equal(h.t, uint32(sub6Window), h.act.clampBytes, "lteB has no estimate yet: the handover clamp stays")
				},
				sub6LinkFrom(310, 500, 2*sub6Rate, sub6Rate*190/1000), tick(500)),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows, predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed, OutcomeConfirmed},
			handovers:   []string{"mmwave_sub6", "sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.True(t, h.m.Status().BandwidthHold)
				assert.Equal(t, uint32(2*sub6Window), h.act.clampBytes, "lteB's own estimate")
			},
		},
		{
			name:  "back on mmWave the sub-6 clamp ends, and the mmWave hold starts with the cell's first round",
			setup: withBandwidth,
			steps: append(releaseToAnchor(),
				meas(200, diag.EventB1, lteA, mmB), cmd(250, diag.HOSCGAdd, lteA, mmB), done(280, mmB), released(300),
				func(h *harness) {
					assert.True(h.t, h.m.Status().BandwidthHold)
					assert.Equal(h.t, "clear_clamp", h.act.ops()[len(h.act.calls)-1], "no estimate of the mmWave cell yet")
				},
				sub6Link(310, 600, mmWaveRate), tick(600)),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows, predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed, OutcomeConfirmed},
			handovers:   []string{"mmwave_sub6", "sub6_mmwave"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, uint32(mmWaveHold), h.act.clampBytes, "the rate over T2, plus the smallest sub-6 buffer")
				assert.Equal(t, ClampSourceBandwidth, h.m.Status().InForce.ClampSource)
			},
		},
		{
			name:  "towards mmWave the sub-6 hold stays through Preparation, as Stable left it, and ends with the execution",
			setup: withBandwidth,
			steps: append(releaseToAnchor(),
				sub6Link(110, 300, sub6Rate), tick(300),
				meas(310, diag.EventB1, lteA, mmB),
				clampIs(sub6Window, ClampSourceBandwidth, "the hold, not the smallest sub-6 buffer"),
				cmd(350, diag.HOSCGAdd, lteA, mmB),
				clampIs(sub6Window, ClampSourceBandwidth, "up to the execution"),
				done(380, mmB), released(400)),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows, predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed, OutcomeConfirmed},
			handovers:   []string{"mmwave_sub6", "sub6_mmwave"},
			check: func(t *testing.T, h *harness) {
				assert.True(t, h.m.Status().BandwidthHold)
				assert.Zero(t, h.act.clampBytes, "no round on the mmWave cell yet")
			},
		},
		{
			name:  "failure drops the hold",
			setup: withBandwidth,
			steps: append(releaseToAnchor(), fail(200, diag.CauseReestablishment)),
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"mmwave_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.False(t, h.m.Status().BandwidthHold)
				assert.Zero(t, h.act.clampBytes)
			},
		},
		{
			name:  "the first data cell learnt, sub-6, is held from the start",
			steps: []step{serve(0, lteA, diag.Cell{}), sub6Link(10, 300, sub6Rate), tick(300)},
			state: Stable,
			check: func(t *testing.T, h *harness) {
				assert.True(t, h.m.Status().BandwidthHold)
				assert.Equal(t, uint32(sub6Window), h.act.clampBytes)
				assert.Equal(t, ClampSourceBandwidth, h.m.Status().InForce.ClampSource)
			},
		},
		{
			name:  "a mmWave data cell learnt beside the anchor is held to what a handover to sub-6 drains",
			steps: []step{serve(0, lteA, mmA), sub6Link(10, 300, mmWaveRate), tick(300)},
			state: Stable,
			check: func(t *testing.T, h *harness) {
				assert.True(t, h.m.Status().BandwidthHold)
				assert.Equal(t, uint32(mmWaveHold), h.act.clampBytes, "the rate over T2, plus the smallest sub-6 buffer")
				assert.Equal(t, ClampSourceBandwidth, h.m.Status().InForce.ClampSource)
			},
		},
		{
			name:  "on mmWave a T2 shorter than RTT_min still lets the bandwidth-delay product through",
			cfg:   func(c *Config) { c.DefaultT2 = 20 * time.Millisecond },
			steps: []step{serve(0, lteA, mmA), sub6Link(10, 300, mmWaveRate), tick(300)},
			state: Stable,
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, uint32(mmWaveRate*50/1000+nrABuffer), h.act.clampBytes, "RTT_min of 50 ms")
			},
		},
		{
			name: "a mmWave prediction towards sub-6 clamps to the target's buffer under the mmWave hold",
			steps: []step{serve(0, lteA, mmA), sub6Link(10, 300, mmWaveRate), tick(300),
				meas(310, diag.EventA2, mmA, diag.Cell{}),
				clampIs(lteABuffer, estimator.SourceCell, "the anchor's buffer, below the hold")},
			state:       Preparation,
			transitions: []string{predicted},
		},
		{
			name: "a sub-6 to sub-6 handover is held as well: Eq. 2 once the target had a round",
			steps: append(handoverSteps(), released(160), rtt(170),
				sub6LinkFrom(170, 400, sub6Rate, 0), tick(400)),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.True(t, h.m.Status().BandwidthHold)
				assert.Equal(t, uint32(sub6Window), h.act.clampBytes)
				assert.Equal(t, ClampSourceBandwidth, h.m.Status().InForce.ClampSource)
			},
		},
		{
			name:        "bandwidth clamp switch off: no hold",
			cfg:         func(c *Config) { c.BandwidthClamp = false },
			setup:       withBandwidth,
			steps:       releaseToAnchor(),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"mmwave_sub6"},
			ops:         []string{"prepare_suppression", "set_clamp(300000)", "prepare_suppression", "set_clamp(300000)", "set_clamp(300000)", "start_suppression", "stop_suppression", "clear_clamp"},
		},
	}))
}

func TestFreezePolicy(t *testing.T) {
	freeze := func(c *Config) { c.Policy = PolicyFreeze }
	runMachineCases(t, []machineCase{
		{
			name:        "zero window from prediction to completion, nothing else",
			cfg:         freeze,
			setup:       withBandwidth,
			steps:       releaseToAnchor(),
			state:       Stable,
			transitions: []string{predicted, "preparation>stable:executed"},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"mmwave_sub6"},
			ops:         []string{"set_freeze", "set_freeze", "clear_clamp"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, at(10+292), h.act.calls[0].deadline)
				assert.Equal(t, at(550), h.act.calls[1].deadline)
				assert.False(t, h.m.Status().BandwidthHold)
			},
		},
		{
			name:        "freeze is in force and reported during Preparation",
			cfg:         freeze,
			steps:       []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB)},
			state:       Preparation,
			transitions: []string{predicted},
			check: func(t *testing.T, h *harness) {
				st := h.m.Status()
				assert.True(t, st.InForce.Freeze)
				assert.Zero(t, st.InForce.ClampBytes)
				assert.Equal(t, ClampSourceFreeze, st.InForce.ClampSource)
				assert.True(t, h.act.freeze)
			},
		},
		{
			name:        "freeze without prediction starts at the command",
			cfg:         func(c *Config) { c.Policy, c.Prediction = PolicyFreeze, false },
			steps:       []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB), cmd(100, diag.HOPCell, lteA, lteB)},
			state:       Preparation,
			transitions: []string{commanded},
			ops:         []string{"set_freeze"},
		},
	})
}

func TestActuatorErrors(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	h.act.failing[OpSetClamp] = true
	serve(0, lteA, diag.Cell{})(h)
	meas(10, diag.EventA3, lteA, lteB)(h)
	st := h.m.Status()
	assert.Equal(t, Preparation, st.State)
	assert.Nil(t, st.InForce.ClampDeadline, "nothing written")
	assert.Equal(t, uint64(1), st.Counters.ActuatorErrors[OpSetClamp])

	tick(20)(h)
	assert.Equal(t, uint64(2), h.m.Status().Counters.ActuatorErrors[OpSetClamp], "retried on tick")

	h.act.failing[OpSetClamp] = false
	tick(30)(h)
	st = h.m.Status()
	require.NotNil(t, st.InForce.ClampDeadline)
	assert.Equal(t, at(530), *st.InForce.ClampDeadline, "a lease from the write that succeeded")
	assert.Equal(t, uint32(lteBBuffer), h.act.clampBytes)

	h.act.failing[OpClearClamp] = true
	meas(40, diag.EventA1, lteA, diag.Cell{})(h)
	assert.Equal(t, Stable, h.m.State())
	assert.Equal(t, uint32(lteBBuffer), h.act.clampBytes, "clear failed")
	h.act.failing[OpClearClamp] = false
	tick(50)(h)
	assert.Zero(t, h.act.clampBytes, "clear retried on tick")
	tick(60)(h)
	assert.Equal(t, []string{"prepare_suppression", "set_clamp(400000)", "set_clamp(400000)", "set_clamp(400000)", "stop_suppression", "clear_clamp", "clear_clamp"}, h.act.ops())
}

func TestEventsWithoutTimeOrOfUnknownType(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	h.m.HandleEvent(diag.Event{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Target: lteB})
	h.m.HandleEvent(diag.Event{Type: "bogus", Time: at(1)})
	h.m.HandleEvent(diag.Event{Type: diag.TypeRBAlloc, Time: at(2), Cell: lteA, SlotDuration: time.Millisecond, Slots: []diag.Slot{{Given: 1, Total: 2}}})
	st := h.m.Status()
	assert.Equal(t, Stable, st.State)
	assert.Equal(t, map[string]uint64{"no_time": 1, "unknown_type": 1}, st.Counters.Ignored)
	assert.Equal(t, map[string]uint64{"rb_alloc": 1}, st.Counters.Events)
	assert.Empty(t, h.act.calls)
}

func TestEventTimeNeverGoesBack(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	serve(1000, lteA, diag.Cell{})(h)
	meas(500, diag.EventA3, lteA, lteB)(h)
	require.Len(t, h.act.calls, 2)
	assert.Equal(t, at(1000+292), h.act.calls[0].deadline, "suppression with the prediction")
	require.NotNil(t, h.m.Status().Prediction)
	assert.Equal(t, at(1000+292), h.m.Status().Prediction.Deadline, "a late event is handled at the machine's time")
}

func TestStatusJSON(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	for _, s := range handoverSteps() {
		s(h)
	}
	raw, err := json.Marshal(h.m.Status())
	require.NoError(t, err)
	var decoded map[string]any
	require.NoError(t, json.Unmarshal(raw, &decoded))
	assert.Equal(t, "smoothing", decoded["state"])
	assert.Equal(t, "m2ho", decoded["policy"])
	inForce, ok := decoded["in_force"].(map[string]any)
	require.True(t, ok)
	assert.Equal(t, true, inForce["suppression"])
	assert.Equal(t, float64(lteBBuffer), inForce["clamp_bytes"])
	counters, ok := decoded["counters"].(map[string]any)
	require.True(t, ok)
	assert.Equal(t, map[string]any{"sub6_sub6": float64(1)}, counters["handovers"])
}

func TestStateString(t *testing.T) {
	for state, name := range map[State]string{Stable: "stable", Preparation: "preparation", Smoothing: "smoothing", State(7): "invalid"} {
		assert.Equal(t, name, state.String())
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{name: "defaults", mutate: func(*Config) {}, ok: true},
		{name: "freeze policy", mutate: func(c *Config) { c.Policy = PolicyFreeze }, ok: true},
		{name: "unknown policy", mutate: func(c *Config) { c.Policy = "fast" }},
		{name: "empty policy is m2ho", mutate: func(c *Config) { c.Policy = "" }, ok: true},
		{name: "smoothing at the minimum RTO", mutate: func(c *Config) { c.SmoothingMax = 200 * time.Millisecond }},
		{name: "zero smoothing", mutate: func(c *Config) { c.SmoothingMax = 0 }},
		{name: "zero default T2", mutate: func(c *Config) { c.DefaultT2 = 0 }},
		{name: "no T2 samples needed", mutate: func(c *Config) { c.MinT2Samples = 0 }},
		{name: "lease shorter than smoothing", mutate: func(c *Config) { c.PolicyLease = 100 * time.Millisecond }},
		{name: "zero execution timeout", mutate: func(c *Config) { c.ExecutionTimeout = 0 }},
		{name: "zero prior weight", mutate: func(c *Config) { c.LearnPriorWeight = 0 }},
		{name: "followed share above one", mutate: func(c *Config) { c.LearnFollowedShare = 1.5 }},
		{name: "stop share above the followed share", mutate: func(c *Config) { c.LearnStopShare = 0.6 }},
		{name: "zero stop share", mutate: func(c *Config) { c.LearnStopShare = 0 }},
		{name: "learning settings unused without learning", ok: true, mutate: func(c *Config) { c.Learning, c.LearnPriorWeight = false, 0 }},
	}
	est, err := seededEstimator()
	require.NoError(t, err)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mutate(&cfg)
			m, err := New(cfg, est, &fakeActuator{}, nil)
			if tc.ok {
				require.NoError(t, err)
				assert.Contains(t, []Policy{PolicyM2HO, PolicyFreeze}, m.Status().Policy)
			} else {
				assert.Error(t, err)
			}
		})
	}
	_, err = New(DefaultConfig(), nil, &fakeActuator{}, nil)
	assert.Error(t, err, "estimator required")
	_, err = New(DefaultConfig(), est, nil, nil)
	assert.Error(t, err, "actuator required")
}

func TestNoObserverAndFreshStatus(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	h.m.SetObserver(nil)
	st := h.m.Status()
	assert.Equal(t, Stable, st.State)
	assert.Equal(t, PolicyM2HO, st.Policy)
	assert.Nil(t, st.Prediction)
	assert.Nil(t, st.Command)
	assert.Zero(t, st.InForce.ClampBytes)
	require.Len(t, st.T2, 2)
	assert.InDelta(t, 146.0, st.T2[0].InUseMillis, 0.001)

	for _, s := range handoverSteps() {
		s(h)
	}
	assert.Equal(t, Smoothing, h.m.State(), "runs without an observer")
	assert.Empty(t, h.obs.transitions, "the removed observer hears nothing")
	assert.Equal(t, at(130), h.m.Status().Since)
}

func TestRBAllocNamesTheFirstServingCell(t *testing.T) {
	rbAlloc := func(ms int, cell diag.Cell) step {
		return func(h *harness) {
			h.m.HandleEvent(diag.Event{Type: diag.TypeRBAlloc, Time: at(ms), Cell: cell,
				SlotDuration: 500 * time.Microsecond, Slots: []diag.Slot{{Given: 106, Total: 106}}})
		}
	}
	tests := []struct {
		name  string
		steps []step
		pcell diag.Cell
		scg   diag.Cell
	}{
		{name: "nothing known: the scheduled cell serves", steps: []step{rbAlloc(0, lteA)}, pcell: lteA},
		{name: "once a cell is known, rb_alloc events leave the cells to reports and handovers", steps: []step{rbAlloc(0, lteA), rbAlloc(10, nrA)}, pcell: lteA},
		{name: "a late rb_alloc of the previous cell changes nothing", steps: []step{serve(0, lteB, diag.Cell{}), rbAlloc(10, lteA)}, pcell: lteB},
		{name: "an rb_alloc without cell names nothing", steps: []step{rbAlloc(0, diag.Cell{})}},
		{
			name: "after a handover to a cell known only by its band, the scheduled cell serves",
			steps: []step{
				serve(0, mmA, diag.Cell{}), meas(10, diag.EventA2, mmA, diag.Cell{}), done(60, diag.Cell{}),
				rbAlloc(70, lteB), tick(1000),
			},
			pcell: lteB,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, DefaultConfig())
			for _, s := range tc.steps {
				s(h)
			}
			assert.Equal(t, tc.pcell, h.m.pcell)
			assert.Equal(t, tc.scg, h.m.scg)
			assert.Equal(t, Stable, h.m.State())
		})
	}
}

// rampLink feeds the estimator bytesPerSecond over [fromMs, toMs] as
// sub6Link does, with the counter at offset bytes, and ticks the machine
// after every sample, as the daemon does.
func rampLink(fromMs, toMs int, bytesPerSecond, offset uint64) step {
	return func(h *harness) {
		for ms := fromMs; ms <= toMs; ms += 10 {
			if (ms-fromMs)%50 == 0 {
				h.est.AddRTT(h.est.Path(), at(ms), 50*time.Millisecond)
			}
			h.est.AddBytes(at(ms), offset+bytesPerSecond*uint64(ms-fromMs)/1000)
			h.m.Tick(at(ms))
		}
	}
}

func clampIs(bytes uint32, source, why string) step {
	return func(h *harness) {
		assert.Equal(h.t, bytes, h.act.clampBytes, why)
		assert.Equal(h.t, source, h.m.Status().InForce.ClampSource, why)
	}
}

// TestRamp: after a handover the clamp is not released when Smoothing
// ends; it rises with what the new cell delivers and ends once the
// senders no longer fill it.
func TestRamp(t *testing.T) {
	// A cell delivering 8 MB/s at a 50 ms RTT: 400 kB per round, lteB's
	// buffer estimate, so the first round fills the ramp's start. Eq. 2
	// then gives its cap, 400 kB plus half the buffer.
	const fillingRate = 8_000_000
	// A cell delivering 30 MB/s: 1.5 MB per round, over 75% of the cap
	// of 1.5 MB plus half lteB's 400 kB buffer.
	const fastRate = 30_000_000
	// lateFlight is the flight the source carried when a late clamp's
	// handover executed.
	var lateFlight uint32
	runMachineCases(t, []machineCase{
		{
			name: "the handover's clamp outlasts Smoothing as the ramp's start",
			steps: append(handoverSteps(), released(160),
				clampIs(lteBBuffer, estimator.SourceCell, "after Smoothing"),
				tick(900), clampIs(lteBBuffer, estimator.SourceCell, "no round yet: the start holds")),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				d := h.m.Status().InForce.ClampDeadline
				require.NotNil(t, d)
				assert.Equal(t, at(900).Add(DefaultConfig().PolicyLease), *d, "renewed by Tick")
			},
		},
		{
			name: "without a round of the new cell the ramp ends after the warm-up",
			steps: append(handoverSteps(), released(160), tick(1129),
				clampIs(lteBBuffer, estimator.SourceCell, "within the warm-up"), tick(1130)),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Zero(t, h.act.clampBytes)
				assert.Equal(t, "clear_clamp", h.act.ops()[len(h.act.calls)-1])
			},
		},
		{
			name: "a round that fills the ramp raises it to Eq. 2; rounds that leave it slack end it",
			steps: append(handoverSteps(), released(160),
				rampLink(170, 230, fillingRate, 0),
				clampIs(lteBBuffer*3/2, ClampSourceRamp, "Eq. 2 after a full round"),
				// The senders stay at 400 kB in flight: one slack round
				// keeps the ramp, the second ends it.
				rampLink(240, 280, fillingRate, fillingRate*70/1000),
				clampIs(lteBBuffer*3/2, ClampSourceRamp, "one slack round"),
				rampLink(290, 330, fillingRate, fillingRate*120/1000)),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Nil(t, h.m.ramp)
				assert.Equal(t, ClampSourceBandwidth, h.m.Status().InForce.ClampSource, "the bandwidth hold of the sub-6 cell follows")
			},
		},
		{
			name: "senders that fill what the cell carries stay clamped to its bandwidth-delay product plus half its buffer",
			steps: append(handoverSteps(), released(160),
				rampLink(170, 2170, fastRate, 0)),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, uint32(fastRate*50/1000+lteBBuffer/2), h.act.clampBytes)
				assert.Equal(t, ClampSourceRamp, h.m.Status().InForce.ClampSource)
			},
		},
		{
			name:  "without suppression the ramp starts at the execution",
			cfg:   func(c *Config) { c.Suppression = false },
			steps: append(handoverSteps(), clampIs(lteBBuffer, estimator.SourceCell, "at execution")),
			state: Stable, transitions: []string{predicted, "preparation>stable:executed"},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
		},
		{
			name:  "ramp and bandwidth hold switched off: the clamp ends with Smoothing",
			cfg:   func(c *Config) { c.Ramp, c.BandwidthClamp = false, false },
			steps: append(handoverSteps(), released(160)),
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Zero(t, h.act.clampBytes)
				assert.Nil(t, h.m.ramp)
			},
		},
		{
			name:  "after mmWave to sub-6 the bandwidth hold follows the ramp",
			setup: withBandwidth,
			steps: append(releaseToAnchor(),
				clampIs(lteABuffer, estimator.SourceCell, "the ramp's start"),
				rampLink(110, 160, fillingRate, 2*625_000),
				rampLink(170, 260, fillingRate/4, 2*625_000+fillingRate*60/1000)),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"mmwave_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Nil(t, h.m.ramp, "slack rounds ended the ramp")
				assert.True(t, h.m.Status().BandwidthHold)
				assert.Equal(t, ClampSourceBandwidth, h.m.Status().InForce.ClampSource)
				assert.Equal(t, uint32(fillingRate*50/1000+lteABuffer/2), h.act.clampBytes, "Eq. 2 on the peak round")
			},
		},
		{
			name:  "a kept window that fits the target's buffer and bandwidth-delay product needs no ramp",
			setup: func(h *harness) { serve(-2000, lteA, diag.Cell{})(h); sub6Link(-300, 0, sub6Rate)(h) },
			steps: append(handoverSteps(), released(160)),
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Nil(t, h.m.ramp)
				assert.Zero(t, h.act.clampBytes, "released with Smoothing")
			},
		},
		{
			name:  "senders the handover's clamp held back ramp from that clamp, not from what the target carries",
			setup: func(h *harness) { serve(-2000, lteA, diag.Cell{})(h); queuedLink(h) },
			steps: append(handoverPredictedEarly(), released(160)),
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				require.NotNil(t, h.m.ramp)
				assert.Equal(t, uint32(lteBBuffer), h.act.clampBytes, "the clamp of the handover")
				assert.Equal(t, uint32(lteBBuffer), h.m.ramp.start, "the floor is the buffer estimate")
			},
		},
		{
			// 8 MB/s at a 50 ms RTT: 400 kB in flight, lteB's buffer
			// estimate and so the handover's clamp. Nothing says how
			// large the senders' windows are behind it.
			name:  "senders that filled the handover's clamp without exceeding it ramp from it: their windows may be far larger",
			setup: func(h *harness) { serve(-2000, lteA, diag.Cell{})(h); sub6Link(-1000, 0, fillingRate)(h) },
			steps: append(handoverSteps()[:3], func(h *harness) {
				kept, ok := h.est.Carried(at(129))
				require.True(h.t, ok)
				require.LessOrEqual(h.t, kept.Flight, uint64(lteBBuffer), "the flight did not exceed the clamp")
			}, done(130, lteB), released(160), tick(900)),
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				require.NotNil(t, h.m.ramp)
				assert.Equal(t, uint32(lteBBuffer), h.act.clampBytes, "the clamp of the handover, not released")
			},
		},
		{
			name:  "a clamp set less than a smoothed RTT before the execution ramps from the source's flight, up to what the target carries",
			setup: func(h *harness) { serve(-2000, lteA, diag.Cell{})(h); queuedLink(h) },
			steps: append(handoverSteps()[:3], func(h *harness) {
				kept, ok := h.est.Carried(at(129))
				require.True(h.t, ok)
				require.Greater(h.t, kept.SRTT, 130*time.Millisecond, "the clamp of the report at 0 is late")
				lateFlight = windowBytes(kept.Flight)
			}, done(130, lteB), released(160)),
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				require.NotNil(t, h.m.ramp)
				expected := uint32(lteBBuffer/2 + queuedRate*50/1000)
				assert.Greater(t, lateFlight, expected)
				assert.Equal(t, expected, h.act.clampBytes, "the source's flight, capped at its bandwidth-delay product plus half the target's buffer")
				assert.Equal(t, ClampSourceRamp, h.m.Status().InForce.ClampSource)
				assert.Equal(t, uint32(lteBBuffer), h.m.ramp.start, "the floor is still the buffer estimate")
			},
		},
		{
			name: "a ramp the clamp holds doubles up to what the target is expected to carry, above Eq. 2's cap on the clamped rate",
			// The source carried fastRate at its RTT_min: the target is
			// expected to carry its buffer plus 1.5 MB.
			setup: func(h *harness) { serve(-2000, lteA, diag.Cell{})(h); sub6Link(-1000, 0, fastRate)(h) },
			steps: append(handoverPredictedEarly(), released(160),
				clampIs(lteBBuffer, estimator.SourceCell, "the clamp of the handover"),
				// Rounds at RTT_min, each delivering the clamp: the cell
				// queued nothing, so the clamp set their rate.
				rampLink(170, 230, lteBBuffer*20, 0),
				clampIs(2*lteBBuffer, ClampSourceRamp, "doubled"),
				// Eq. 2 on the doubled clamp's rate gives that clamp
				// plus one buffer estimate only.
				rampLink(240, 280, 2*lteBBuffer*20, lteBBuffer*20*70/1000),
				clampIs(4*lteBBuffer, ClampSourceRamp, "doubled again")),
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
		},
		{
			name:  "a round that queued in the cell ran at the cell's rate: Eq. 2 rules the ramp, round after round",
			setup: func(h *harness) { serve(-2000, lteA, diag.Cell{})(h); queuedLink(h) },
			steps: append(handoverPredictedEarly(), released(160),
				// Rounds of 100 ms at RTT_min 50 ms, each delivering the
				// clamp: half of it waited in the cell's queue.
				queuedRampLink(170, 1200, lteBBuffer*10, 0)),
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				// The smoothed RTT takes a few rounds to see the
				// queue; from then on the clamp stays.
				for _, c := range h.act.calls {
					if c.op == OpSetClamp && c.deadline.After(at(500).Add(DefaultConfig().PolicyLease)) {
						assert.Equal(t, uint32(lteBBuffer), c.bytes, "Eq. 2 on the cell's rate is the clamp: not doubled again")
					}
				}
				assert.Equal(t, uint32(lteBBuffer), h.act.clampBytes)
				require.NotNil(t, h.m.ramp, "the senders still fill it")
			},
		},
		{
			name:  "without a clamp at execution a kept window beyond what the target carries ramps from that",
			setup: func(h *harness) { serve(-2000, lteA, diag.Cell{})(h); queuedLink(h) },
			// A completion no report or command announced: nothing
			// clamped before it.
			steps: []step{serve(0, lteA, diag.Cell{}), done(130, lteB), released(160)},
			state: Stable, transitions: []string{"stable>smoothing:executed", releasedFlows},
			handovers: []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				require.NotNil(t, h.m.ramp)
				assert.Equal(t, uint32(lteBBuffer/2+queuedRate*50/1000), h.act.clampBytes,
					"the source's bandwidth-delay product plus half the target's buffer: the other half is the forwarded data's")
				assert.Equal(t, ClampSourceRamp, h.m.Status().InForce.ClampSource)
			},
		},
		{
			name:  "the ramp at most doubles per round, though Eq. 2 on the source's peak allows more",
			setup: func(h *harness) { serve(-2000, lteA, diag.Cell{})(h); queuedLink(h) },
			steps: append(handoverPredictedEarly(), released(160),
				rampLink(170, 230, fastRate, 0),
				clampIs(2*lteBBuffer, ClampSourceRamp, "one round: doubled, below Eq. 2's cap"),
				rampLink(240, 280, fastRate, fastRate*70/1000),
				clampIs(4*lteBBuffer, ClampSourceRamp, "two rounds: doubled twice")),
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
		},
		{
			name: "a prediction that times out reopens a clamp that held the senders back through a ramp",
			setup: func(h *harness) {
				serve(-2000, lteA, diag.Cell{})(h)
				queuedLink(h)
			},
			// The clamp drains the cell's queue: rounds at RTT_min
			// deliver it until the prediction times out.
			steps: []step{
				serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB),
				rampLink(20, 300, fillingRate, queuedRate), tick(301), tick(302),
				clampIs(lteBBuffer, ClampSourceRamp, "the clamp stays as the ramp's start"),
				rampLink(310, 370, fillingRate, queuedRate+fillingRate*290/1000),
				clampIs(2*lteBBuffer, ClampSourceRamp, "doubled after a full round"),
			},
			state:       Stable,
			transitions: []string{predicted, "preparation>stable:prediction_timeout"},
			predictions: []string{OutcomeTimedOut},
		},
		{
			name: "a reopening doubles through a queued cell up to the flight it held back, and ends there",
			setup: func(h *harness) {
				serve(-2000, lteA, diag.Cell{})(h)
				queuedLink(h)
			},
			// Rounds of 100 ms at RTT_min 50 ms: half of each waited in
			// the cell's queue, which makes them cell-bound.
			steps: append(predictionTimingOut(),
				clampIs(lteBBuffer, ClampSourceRamp, "the clamp stays as the ramp's start"),
				queuedRampLink(310, 1500, queuedRate, queuedRate)),
			state:       Stable,
			transitions: []string{predicted, "preparation>stable:prediction_timeout"},
			predictions: []string{OutcomeTimedOut},
			check: func(t *testing.T, h *harness) {
				var clamps []uint32
				for _, c := range h.act.calls {
					if c.op == OpSetClamp && (len(clamps) == 0 || clamps[len(clamps)-1] != c.bytes) {
						clamps = append(clamps, c.bytes)
					}
				}
				assert.Subset(t, clamps, []uint32{lteBBuffer, 2 * lteBBuffer, 4 * lteBBuffer}, "doubled round after round")
				assert.Nil(t, h.m.ramp, "ended at the flight held back")
				assert.Equal(t, ClampSourceBandwidth, h.m.Status().InForce.ClampSource, "the bandwidth hold of the sub-6 cell follows")
			},
		},
		{
			name:        "a prediction that times out hands a clamp the senders did not reach to the bandwidth hold at once",
			setup:       func(h *harness) { serve(-2000, lteA, diag.Cell{})(h); sub6Link(-300, 0, sub6Rate)(h) },
			steps:       predictionTimingOut(),
			state:       Stable,
			transitions: []string{predicted, "preparation>stable:prediction_timeout"},
			predictions: []string{OutcomeTimedOut},
			check: func(t *testing.T, h *harness) {
				assert.Nil(t, h.m.ramp)
				assert.Equal(t, uint32(sub6Window), h.act.clampBytes)
				assert.Equal(t, ClampSourceBandwidth, h.m.Status().InForce.ClampSource)
			},
		},
		{
			name:        "ramp and bandwidth hold switched off: a timed-out prediction's clamp is released at once",
			cfg:         func(c *Config) { c.Ramp, c.BandwidthClamp = false, false },
			setup:       func(h *harness) { serve(-2000, lteA, diag.Cell{})(h); queuedLink(h) },
			steps:       predictionTimingOut(),
			state:       Stable,
			transitions: []string{predicted, "preparation>stable:prediction_timeout"},
			predictions: []string{OutcomeTimedOut},
			check: func(t *testing.T, h *harness) {
				assert.Nil(t, h.m.ramp)
				assert.Zero(t, h.act.clampBytes)
			},
		},
		mmWaveDownToSub6Case("from mmWave down to sub-6 the target is expected to carry its buffer only", -200),
		mmWaveDownToSub6Case("from mmWave down to sub-6 a late clamp stays: the target is expected to carry its buffer only", 10),
		{
			name:  "a mmWave target gets no ramp",
			setup: func(h *harness) { serve(-2000, lteA, mmA)(h); queuedLink(h) },
			steps: []step{
				serve(0, lteA, mmA), meas(10, diag.EventA3, mmA, mmB),
				cmd(50, diag.HOSCGChange, mmA, mmB), done(80, mmB), released(100),
			},
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"mmwave_mmwave"},
			check: func(t *testing.T, h *harness) {
				assert.Nil(t, h.m.ramp)
				assert.Zero(t, h.act.clampBytes)
			},
		},
		{
			name:  "a failure drops the ramp and holds its clamp for the re-establishment",
			steps: append(handoverSteps(), released(160), fail(200, diag.CauseRLF)),
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, uint32(nrABuffer), h.act.clampBytes, "the smallest sub-6 buffer estimate")
				assert.Equal(t, ClampSourceReestablishment, h.m.Status().InForce.ClampSource)
				assert.Nil(t, h.m.ramp)
			},
		},
		{
			// The senders fill the ramp's Eq. 2 clamp of 600 kB when
			// the link fails; the hold is the smallest sub-6 buffer
			// estimate, nrA's. Back on lteA the senders' windows are
			// what they were: released (the failure's clamp gone, no
			// ramp), they would reach the cell at once; held, they ramp
			// from lteA's buffer estimate.
			name: "a re-establishment ramps from the clamp the failure held",
			steps: append(handoverPredictedEarly(), released(160),
				rampLink(170, 230, fillingRate, 0),
				clampIs(lteBBuffer*3/2, ClampSourceRamp, "Eq. 2 after a full round"),
				fail(240, diag.CauseRLF),
				clampIs(nrABuffer, ClampSourceReestablishment, "held at the smallest sub-6 buffer estimate"),
				done(380, lteA)),
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6", "sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				require.NotNil(t, h.m.ramp, "the held senders ramp on the new cell")
				assert.Equal(t, uint32(lteABuffer), h.act.clampBytes, "from the failure's clamp, never below the new cell's buffer estimate")
				assert.Equal(t, estimator.SourceCell, h.m.Status().InForce.ClampSource)
			},
		},
	})
}

// TestSuppressionBeforeTheExecution: the duplicate ACKs of holes are
// suppressed from a prediction until its end, from the first command of a
// reconfiguration for SmoothingMax, with no epoch; the execution opens the
// handover's epoch. Only under the m2ho policy with suppression on.
func TestSuppressionBeforeTheExecution(t *testing.T) {
	runMachineCases(t, []machineCase{
		{
			name: "a prediction holds holes until its end, its command for SmoothingMax",
			steps: []step{
				serve(0, lteA, diag.Cell{}), meas(0, diag.EventA3, lteA, lteB),
				func(h *harness) { assert.Equal(h.t, at(292), h.act.suppressDeadline, "the prediction's end") },
				cmd(100, diag.HOPCell, lteA, lteB),
			},
			state:       Preparation,
			transitions: []string{predicted},
			predictions: []string{OutcomeConfirmed},
			ops:         []string{"prepare_suppression", "set_clamp(400000)", "prepare_suppression", "set_clamp(400000)"},
			check: func(t *testing.T, h *harness) {
				assert.True(t, h.act.suppressing)
				assert.Equal(t, at(250), h.act.suppressDeadline)
				assert.Zero(t, h.act.epoch, "no epoch before the execution")
				st := h.m.Status()
				assert.True(t, st.InForce.Suppression)
			},
		},
		{
			name:        "the execution opens the handover's epoch",
			steps:       handoverSteps(),
			state:       Smoothing,
			transitions: []string{predicted, executed},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, 1, h.act.epoch)
				assert.Equal(t, at(280), h.act.suppressDeadline, "SmoothingMax after the execution")
			},
		},
		{
			name: "one reconfiguration's commands: from the first",
			steps: []step{
				serve(0, lteA, mmA),
				cmd(50, diag.HOSCGRelease, mmA, diag.Cell{}), cmd(52, diag.HOSCGAdd, lteA, mmB),
			},
			state:       Preparation,
			transitions: []string{commanded},
			check: func(t *testing.T, h *harness) {
				assert.True(t, h.act.suppressing)
				assert.Zero(t, h.act.epoch)
				assert.Equal(t, at(200), h.act.suppressDeadline, "from the first command")
			},
		},
		{
			name:        "past SmoothingMax before the execution the datapath ends it by itself",
			steps:       []step{serve(0, lteA, diag.Cell{}), cmd(100, diag.HOPCell, lteA, lteB), tick(400)},
			state:       Preparation,
			transitions: []string{commanded},
			check: func(t *testing.T, h *harness) {
				assert.Equal(t, at(250), h.act.suppressDeadline, "written once, not renewed")
				assert.Equal(t, []string{"prepare_suppression", "set_clamp(400000)", "set_clamp(400000)"}, h.act.ops())
			},
		},
		{
			name:        "a prediction longer than a lease is renewed until its end",
			cfg:         func(c *Config) { c.DefaultT2 = 600 * time.Millisecond },
			steps:       []step{serve(0, lteA, diag.Cell{}), meas(0, diag.EventA3, lteA, lteB), tick(200), tick(300)},
			state:       Preparation,
			transitions: []string{predicted},
			check: func(t *testing.T, h *harness) {
				var deadlines []time.Time
				for _, c := range h.act.calls {
					if c.op == OpPrepareSuppression {
						deadlines = append(deadlines, c.deadline)
					}
				}
				assert.Equal(t, []time.Time{at(500), at(800)}, deadlines, "a lease, renewed with less than half left")
			},
		},
		{
			name:        "suppression switched off: nothing at the command",
			cfg:         func(c *Config) { c.Suppression = false },
			steps:       []step{serve(0, lteA, diag.Cell{}), cmd(100, diag.HOPCell, lteA, lteB)},
			state:       Preparation,
			transitions: []string{commanded},
			ops:         []string{"set_clamp(400000)"},
		},
		{
			name:        "the freeze baseline suppresses nothing",
			cfg:         func(c *Config) { c.Policy = PolicyFreeze },
			steps:       []step{serve(0, lteA, diag.Cell{}), cmd(100, diag.HOPCell, lteA, lteB)},
			state:       Preparation,
			transitions: []string{commanded},
			ops:         []string{OpSetFreeze},
		},
	})
}

// handoverPredictedEarly is handoverSteps with the report at -140: the
// Preparation clamp has 270 ms, more than queuedLink's smoothed RTT, to
// hold the senders back before the execution.
func handoverPredictedEarly() []step {
	return []step{
		serve(-140, lteA, diag.Cell{}),
		meas(-140, diag.EventA3, lteA, lteB),
		cmd(100, diag.HOPCell, lteA, lteB),
		done(130, lteB),
	}
}

// mmWaveDownToSub6Case releases mmA's SCG back to lteA on an A2 at
// reportMs, executed at the command at 50, after queuedLink's 150 ms RTT:
// the ramp starts at lteA's buffer estimate, the Preparation clamp early
// (reportMs -200) or late (10) alike.
func mmWaveDownToSub6Case(name string, reportMs int) machineCase {
	return machineCase{
		name:  name,
		setup: func(h *harness) { serve(-2000, lteA, mmA)(h); queuedLink(h) },
		steps: []step{
			serve(min(reportMs, 0), lteA, mmA), meas(reportMs, diag.EventA2, mmA, diag.Cell{}),
			cmd(50, diag.HOSCGRelease, mmA, diag.Cell{}), released(100),
		},
		state: Stable, transitions: []string{predicted, executed, releasedFlows},
		predictions: []string{OutcomeConfirmed},
		handovers:   []string{"mmwave_sub6"},
		check: func(t *testing.T, h *harness) {
			require.NotNil(t, h.m.ramp)
			assert.Equal(t, uint32(lteABuffer), h.act.clampBytes)
		},
	}
}

// queuedRampLink feeds the new cell bytesPerSecond over [fromMs, toMs],
// a byte sample and an RTT sample every 10 ms, the RTT 100 ms after a
// first one of 50 ms: a queue of one bandwidth-delay product, rounds of
// about 100 ms once the smoothed RTT has converged.
func queuedRampLink(fromMs, toMs int, bytesPerSecond, offset uint64) step {
	return func(h *harness) {
		for ms := fromMs; ms <= toMs; ms += 10 {
			rtt := 100 * time.Millisecond
			if ms == fromMs {
				rtt = 50 * time.Millisecond
			}
			h.est.AddRTT(h.est.Path(), at(ms), rtt)
			h.est.AddBytes(at(ms), offset+bytesPerSecond*uint64(ms-fromMs)/1000)
			h.m.Tick(at(ms))
		}
	}
}

// queuedRate is a cell delivering 12.5 MB/s whose queue holds twice its
// bandwidth-delay product: RTT_min 50 ms, smoothed RTT 150 ms.
const queuedRate = 12_500_000

// queuedLink feeds the estimator queuedRate over the second before t0,
// with RTT samples of 150 ms after a first one of 50 ms.
func queuedLink(h *harness) {
	for ms := -1000; ms <= 0; ms += 10 {
		rtt := 150 * time.Millisecond
		if ms == -1000 {
			rtt = 50 * time.Millisecond
		}
		if ms%50 == 0 {
			h.est.AddRTT(h.est.Path(), at(ms), rtt)
		}
		h.est.AddBytes(at(ms), uint64(ms+1000)*queuedRate/1000)
	}
}

// lossyRounds reports retransmitted bytes in five samples of 100 ms from
// fromMs: senders that keep losing without shrinking.
func lossyRounds(fromMs int) step {
	return func(h *harness) {
		for ms := fromMs; ms < fromMs+500; ms += 100 {
			h.est.AddRetransmitted(at(ms), 1448)
		}
	}
}

// TestSenderAwareClamps: senders whose loss persists (BBR) get neither
// the ramp nor the bandwidth hold, which would only slow them; the
// Preparation clamp, which keeps their handovers loss-free, stays.
func TestSenderAwareClamps(t *testing.T) {
	runMachineCases(t, []machineCase{
		{
			name:  "no ramp after a handover",
			setup: lossyRounds(-600),
			steps: append(handoverSteps()[:3], func(h *harness) {
				assert.Equal(h.t, uint32(lteBBuffer), h.act.clampBytes, "Preparation still clamps")
			}, done(130, lteB), released(160)),
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.Nil(t, h.m.ramp)
				assert.Zero(t, h.act.clampBytes)
				assert.True(t, h.m.Status().LossPersists)
			},
		},
		{
			// A ramp is the handover's: the window it lets in may overflow
			// the target, and a sender repairing that loses no matter
			// how it reacts to loss.
			name: "losses under a ramp are the handover's",
			steps: append(handoverSteps(), released(160),
				clampIs(lteBBuffer, estimator.SourceCell, "the ramp holds"),
				lossyRounds(200), tick(700)),
			state: Stable, transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"sub6_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.NotNil(t, h.m.ramp)
				assert.False(t, h.m.Status().LossPersists)
			},
		},
		{
			name:  "no bandwidth hold on a sub-6 cell",
			cfg:   func(c *Config) { c.Ramp = false },
			setup: withBandwidth,
			steps: append(releaseToAnchor(), sub6Link(110, 300, sub6Rate), tick(300),
				clampIs(sub6Window, ClampSourceBandwidth, "held before the loss persists"),
				lossyRounds(310), sub6LinkFrom(310, 2200, sub6Rate, sub6Rate*190/1000), tick(2200),
				clampIs(sub6Window, ClampSourceBandwidth, "losses within 2 s of the handover are its own"),
				lossyRounds(2210), sub6LinkFrom(2210, 2800, sub6Rate, sub6Rate*2090/1000), tick(2800)),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{"mmwave_sub6"},
			check: func(t *testing.T, h *harness) {
				assert.True(t, h.m.Status().BandwidthHold, "the hold is kept for when the loss stops persisting")
				assert.Zero(t, h.act.clampBytes)
			},
		},
	})
}

// TestPreparationClampIsLogged: each clamp a Preparation sets is one log
// line naming where its size came from, and renewing it writes none.
func TestPreparationClampIsLogged(t *testing.T) {
	var log logbuf.Buffer
	est, err := seededEstimator()
	require.NoError(t, err)
	h := &harness{t: t, est: est, act: &fakeActuator{failing: map[string]bool{}}, obs: &recordingObserver{}}
	h.m, err = New(DefaultConfig(), est, h.act, slog.New(slog.NewTextHandler(&log, nil)))
	require.NoError(t, err)
	for _, s := range []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB), tick(100), tick(200)} {
		s(h)
	}
	var clamps []string
	for l := range strings.Lines(log.String()) {
		if strings.Contains(l, `msg="preparation clamp"`) {
			clamps = append(clamps, l)
		}
	}
	require.Len(t, clamps, 1, log.String())
	assert.Contains(t, clamps[0], "bytes=400000")
	assert.Contains(t, clamps[0], "source="+estimator.SourceCell)
}

// TestClampChangesAreLoggedAtDebug: at debug level every change of the
// clamp is a line with the estimator's view of the serving cell; a clamp
// renewed unchanged writes none, and at info level there is none at all.
func TestClampChangesAreLoggedAtDebug(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		t.Run(level.String(), func(t *testing.T) {
			var log logbuf.Buffer
			est, err := seededEstimator()
			require.NoError(t, err)
			h := &harness{t: t, est: est, act: &fakeActuator{failing: map[string]bool{}}, obs: &recordingObserver{}}
			h.m, err = New(DefaultConfig(), est, h.act, slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: level})))
			require.NoError(t, err)
			for _, s := range []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB), tick(100), tick(200)} {
				s(h)
			}
			var clamps []string
			for l := range strings.Lines(log.String()) {
				if strings.Contains(l, `msg=clamp `) {
					clamps = append(clamps, l)
				}
			}
			if level == slog.LevelInfo {
				assert.Empty(t, clamps)
				return
			}
			require.Len(t, clamps, 1, "the Preparation clamp, set once and renewed:\n%s", log.String())
			for _, want := range []string{"bytes=400000", "source=" + estimator.SourceCell, "serving_fresh=false", "min_rtt=0s"} {
				assert.Contains(t, clamps[0], want)
			}
		})
	}
}

// TestPreparationClampOutlivesItsPrediction: the datapath must still hold
// a Preparation clamp when the machine's tick after the prediction's end
// replaces it (a reopening ramp, a release). With the prediction's end as
// the datapath deadline, the clamp lapsed before that tick, and an ACK
// with the real window in the gap let the sender's whole window out at
// once (clampGrace).
func TestPreparationClampOutlivesItsPrediction(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	serve(0, lteA, diag.Cell{})(h)
	meas(10, diag.EventA3, lteA, lteB)(h)
	for ms := 20; ms < 302; ms += 10 {
		tick(ms)(h)
		require.Equal(t, Preparation, h.m.State())
		d := h.m.Status().InForce.ClampDeadline
		require.NotNil(t, d)
		assert.True(t, d.After(at(302)), "at %d ms the datapath holds the clamp past the prediction's end (%v)", ms, *d)
	}
	tick(302)(h)
	assert.Equal(t, Stable, h.m.State(), "the machine ends it")
	assert.Equal(t, "clear_clamp", h.act.ops()[len(h.act.calls)-1])
}
