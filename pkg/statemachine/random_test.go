package statemachine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
)

// TestRandomSequencesKeepInvariants drives machines of every policy and
// ablation through random event, tick, burst and release sequences, with
// a datapath that randomly fails, and checks after every step that:
//   - every policy written carries a deadline after now and no further
//     than one lease ahead;
//   - suppression never outlives its prediction, nor SmoothingMax after
//     the command or the execution;
//   - a clamp is never 0 (only freeze stops the sender) and freeze only
//     comes from the freeze policy;
//   - the state and what the machine holds agree (no impossible state);
//   - with a datapath that never fails, the datapath holds exactly what
//     the machine says is in force.
func TestRandomSequencesKeepInvariants(t *testing.T) {
	const (
		sequences = 3000
		steps     = 80
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x6d32686f))
	for i := range sequences {
		cfg := randomConfig(rng)
		failRate := 0.0
		if rng.IntN(2) == 0 {
			failRate = 0.15
		}
		if !runRandomSequence(t, rng, cfg, failRate, steps) {
			t.Fatalf("sequence %d (seed %d, config %+v, fail rate %v) broke an invariant", i, seed, cfg, failRate)
		}
	}
}

func randomConfig(rng *rand.Rand) Config {
	cfg := DefaultConfig()
	if rng.IntN(4) == 0 {
		cfg.Policy = PolicyFreeze
	}
	cfg.Prediction = rng.IntN(5) != 0
	cfg.Suppression = rng.IntN(5) != 0
	cfg.BandwidthClamp = rng.IntN(5) != 0
	cfg.SmoothingMax = time.Duration(20+rng.IntN(170)) * time.Millisecond
	cfg.DefaultT2 = time.Duration(20+rng.IntN(300)) * time.Millisecond
	cfg.MinT2Samples = 1 + rng.IntN(5)
	cfg.PolicyLease = cfg.SmoothingMax + time.Duration(rng.IntN(800))*time.Millisecond
	cfg.ExecutionTimeout = time.Duration(50+rng.IntN(1500)) * time.Millisecond
	return cfg
}

var (
	measEvents = []diag.MeasEvent{diag.EventA1, diag.EventA2, diag.EventA3, diag.EventA4, diag.EventA5, diag.EventA6, diag.EventB1, diag.EventB2, "X9"}
	hoKinds    = []diag.HOKind{diag.HOPCell, diag.HOSCGAdd, diag.HOSCGRelease, diag.HOSCGChange, "mystery"}
	causes     = []diag.FailureCause{diag.CauseRLF, diag.CauseHOF, diag.CauseReestablishment, diag.CauseNASRecovery}
)

func randomCell(rng *rand.Rand) diag.Cell {
	if rng.IntN(6) == 0 {
		return diag.Cell{}
	}
	return cells[rng.IntN(len(cells))]
}

// runRandomSequence runs one sequence and reports whether every invariant
// held; it reports failures with t.Errorf on the test goroutine.
func runRandomSequence(t *testing.T, rng *rand.Rand, cfg Config, failRate float64, steps int) bool {
	est, err := seededEstimator()
	require.NoError(t, err)
	act := &fakeActuator{failNext: func(string) bool { return rng.Float64() < failRate }}
	m, err := New(cfg, est, act, nil)
	require.NoError(t, err)

	now := t0
	ok := true
	for step := range steps {
		// Mostly forward in time, sometimes a late event.
		now = now.Add(time.Duration(rng.IntN(120)) * time.Millisecond)
		eventTime := now
		if rng.IntN(10) == 0 {
			eventTime = now.Add(-time.Duration(rng.IntN(200)) * time.Millisecond)
		}
		before := len(act.calls)
		desc := randomStep(rng, m, est, eventTime)
		mNow := m.now
		for _, c := range act.calls[before:] {
			ok = assert.Truef(t, checkCall(c, mNow, cfg), "step %d %s: call %v deadline %v, now %v", step, desc, c, c.deadline, mNow) && ok
		}
		ok = checkState(t, m, act, cfg, failRate == 0, fmt.Sprintf("step %d %s", step, desc)) && ok
		if !ok {
			return false
		}
	}
	return true
}

func randomStep(rng *rand.Rand, m *Machine, est *estimator.Estimator, t time.Time) string {
	switch rng.IntN(12) {
	case 0, 1, 2:
		ev := diag.Event{Type: diag.TypeMeasReport, Time: t, Meas: measEvents[rng.IntN(len(measEvents))], Serving: randomCell(rng), Neighbor: randomCell(rng)}
		m.HandleEvent(ev)
		return fmt.Sprintf("meas %s %v>%v", ev.Meas, ev.Serving, ev.Neighbor)
	case 3:
		ev := diag.Event{Type: diag.TypeHOCommand, Time: t, Kind: hoKinds[rng.IntN(len(hoKinds))], Source: randomCell(rng), Target: randomCell(rng)}
		m.HandleEvent(ev)
		return fmt.Sprintf("command %s %v", ev.Kind, ev.Target)
	case 4:
		m.HandleEvent(diag.Event{Type: diag.TypeHOComplete, Time: t, Cell: randomCell(rng)})
		return "complete"
	case 5:
		if rng.IntN(4) == 0 {
			m.HandleEvent(diag.Event{Type: diag.TypeHOFailure, Time: t, Cause: causes[rng.IntN(len(causes))]})
			return "failure"
		}
		m.HandleEvent(diag.Event{Type: diag.Type([]string{"rb_alloc", "", "junk"}[rng.IntN(3)]), Time: t})
		return "other event"
	case 6:
		start := t.Add(-time.Duration(rng.IntN(100)) * time.Millisecond)
		m.OnBurstEnd(estimator.Burst{Start: start, End: t, Bytes: uint64(rng.IntN(1 << 20))})
		return "burst"
	case 7:
		m.OnFlowsReleased(t)
		return "released"
	case 8:
		est.AddRTT(est.Path(), t, time.Duration(10+rng.IntN(200))*time.Millisecond)
		est.AddBytes(t, uint64(t.Sub(t0).Milliseconds())*uint64(rng.IntN(20_000)))
		m.Tick(t)
		return "estimates and tick"
	default:
		m.Tick(t)
		return "tick"
	}
}

// checkCall checks one actuator call made at machine time now.
func checkCall(c actCall, now time.Time, cfg Config) bool {
	switch c.op {
	case OpSetClamp:
		if c.bytes == 0 {
			return false
		}
	case OpSetFreeze:
		if cfg.Policy != PolicyFreeze {
			return false
		}
	case OpStartSuppression:
		if cfg.Policy != PolicyM2HO || !cfg.Suppression || c.deadline.Sub(now) > cfg.SmoothingMax {
			return false
		}
	case OpPrepareSuppression:
		if cfg.Policy != PolicyM2HO || !cfg.Suppression {
			return false
		}
	default:
		return true
	}
	return c.deadline.After(now) && !c.deadline.After(now.Add(cfg.PolicyLease))
}

// checkState checks that the machine's state and policy agree, and with a
// reliable datapath, that the datapath holds that policy.
func checkState(t *testing.T, m *Machine, act *fakeActuator, cfg Config, reliable bool, desc string) bool {
	st := m.Status()
	in := st.InForce
	ok := true
	check := func(cond bool, what string) {
		if !cond {
			ok = false
			t.Errorf("%s: %s; status %+v", desc, what, st)
		}
	}
	check(in.ClampBytes == 0 || !in.Freeze, "clamp and freeze at once")
	check(!in.Freeze || cfg.Policy == PolicyFreeze, "freeze under the m2ho policy")
	check(!in.Suppression || st.State == Smoothing || (st.State == Preparation && cfg.Policy == PolicyM2HO && cfg.Suppression),
		"suppression outside Preparation and Smoothing")
	check(!st.BandwidthHold || (cfg.Policy == PolicyM2HO && cfg.BandwidthClamp), "bandwidth hold while disabled")
	switch st.State {
	case Stable:
		check(st.Prediction == nil && st.Command == nil, "pending handover in Stable")
		check(!in.Freeze, "freeze in Stable")
		// Under a bandwidth hold the handover's clamp may wait for the
		// new cell's estimate, for bandwidthWarmup.
		// After a handover the ramp holds a clamp until the senders fit.
		// After a failure the clamp in force waits for the
		// re-establishment, for failureHoldMax.
		heldForWarmup := m.now.Before(m.warmup.until)
		heldForReestablishment := in.ClampSource == ClampSourceReestablishment && m.now.Before(m.failureHold.until)
		check(in.ClampBytes == 0 || m.ramp != nil || heldForReestablishment || (st.BandwidthHold && (in.ClampSource == ClampSourceBandwidth || heldForWarmup)),
			"clamp in Stable without bandwidth hold, ramp or failure")
		check(m.failureHold.bytes == 0 || (cfg.Policy == PolicyM2HO && cfg.Ramp), "failure hold while disabled")
		check(m.ramp == nil || (cfg.Policy == PolicyM2HO && cfg.Ramp), "ramp while disabled")
	case Preparation:
		check((st.Prediction == nil) != (st.Command == nil), "Preparation needs exactly one of prediction and command")
		// Towards mmWave the Stable policy stays: maybe no clamp.
		check(in.ClampBytes > 0 || in.Freeze || !m.prepClamped, "Preparation without clamp")
		check(m.prepClamped || cfg.Policy == PolicyFreeze || bandKey(preparationTarget(st).Band) == diag.BandMmWave, "no Preparation clamp towards sub-6")
		// Every input runs the timers first: nothing overdue survives.
		check(st.Prediction == nil || m.now.Before(st.Prediction.Deadline), "prediction past 2*T2")
		check(st.Command == nil || m.now.Before(st.Command.Deadline), "command past the execution timeout")
	case Smoothing:
		check(m.now.Before(m.executedAt.Add(cfg.SmoothingMax)), "Smoothing past SmoothingMax")
		check(st.Prediction == nil || m.now.Before(st.Prediction.Deadline), "queued prediction past 2*T2")
		check(st.Command == nil, "command pending in Smoothing")
		check(in.Suppression, "Smoothing without suppression")
		check(cfg.Policy == PolicyM2HO && cfg.Suppression, "Smoothing while disabled")
	default:
		check(false, "impossible state")
	}
	if in.ClampDeadline != nil {
		check(!in.ClampDeadline.After(m.now.Add(cfg.PolicyLease)), "clamp deadline beyond one lease")
	}
	if in.SuppressionDeadline != nil {
		// With the prediction, from the command, or in Smoothing from
		// the execution.
		limit := m.executedAt.Add(cfg.SmoothingMax)
		switch {
		case st.State == Preparation && st.Command != nil:
			limit = st.Command.ReceivedAt.Add(cfg.SmoothingMax)
		case st.State == Preparation:
			limit = st.Prediction.Deadline
		}
		check(!in.SuppressionDeadline.After(limit), "suppression beyond its prediction or SmoothingMax")
	}
	if reliable {
		check(in.ClampDeadline != nil || (in.ClampBytes == 0 && !in.Freeze), "clamp in force without deadline")
		check(in.SuppressionDeadline != nil || !in.Suppression, "suppression in force without deadline")
		check(act.clampBytes == in.ClampBytes && act.freeze == in.Freeze, "datapath clamp differs")
		check(act.suppressing == in.Suppression, "datapath suppression differs")
	}
	return ok
}

// preparationTarget is the data cell a Preparation expects: the
// prediction's target or the command's.
func preparationTarget(st Status) diag.Cell {
	if st.Prediction != nil {
		return st.Prediction.Target
	}
	if st.Command != nil {
		return st.Command.NewServing
	}
	return diag.Cell{}
}
