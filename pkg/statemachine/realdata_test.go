package statemachine

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/shareddata"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/diag/rrc"
)

// decodeEvents reads every event of a recorded DIAG stream.
func decodeEvents(t *testing.T, path string) []diag.Event {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	src, err := diagsrc.Open("qmdl:"+path, diagsrc.Options{RRC: rrc.NewDecoder(logger), Logger: logger})
	require.NoError(t, err)
	out := make(chan diag.Event, 256)
	runErr := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		runErr <- src.Run(ctx, out)
		close(out)
	}()
	var events []diag.Event
	for ev := range out {
		events = append(events, ev)
	}
	if err := <-runErr; err != nil && !errors.Is(err, context.Canceled) {
		require.NoError(t, err)
	}
	return events
}

// replayResult is what a replay of real events measured.
type replayResult struct {
	m   *Machine
	act *fakeActuator
	obs *recordingObserver
	// sets counts handover command sets (the commands of one
	// reconfiguration), predicted those that found a prediction pending.
	sets, predicted int
	meanEarliness   time.Duration
	// anchorHandovers counts executed command sets with a primary cell
	// handover, wrongAnchor those after which the machine's primary cell
	// was not the commanded target.
	anchorHandovers, wrongAnchor int
}

// replay runs real events through a machine with default settings,
// ticking every 10 ms while something can be pending and jumping to the
// next event otherwise (logs span days of sessions). It checks every
// actuator call against the deadline invariants.
func replay(t *testing.T, events []diag.Event) replayResult {
	t.Helper()
	est, err := seededEstimator()
	require.NoError(t, err)
	r := replayResult{act: &fakeActuator{}, obs: &recordingObserver{}}
	r.m, err = New(DefaultConfig(), est, r.act, nil)
	require.NoError(t, err)
	r.m.SetObserver(r.obs)

	// anchor is the primary cell target of the pending command set. Once
	// the set executed, the machine must be on it at once: the estimator
	// files every burst under the primary (or data) cell the machine
	// names, and a later report correcting it comes too late for the
	// bursts and clamps in between.
	var anchor diag.Cell
	var handoversBefore int
	checkAnchor := func(at time.Time) {
		if anchor.IsZero() || r.m.cmd != nil {
			return
		}
		// A set that timed out or failed executed nothing.
		if len(r.obs.handovers) > handoversBefore {
			r.anchorHandovers++
			if r.m.pcell.Key() != anchor.Key() {
				r.wrongAnchor++
				t.Logf("%v: anchor handover to %v left the primary cell on %v", at, anchor, r.m.pcell)
			}
		}
		anchor = diag.Cell{}
	}

	const tickEvery, busyFor = 10 * time.Millisecond, 2 * time.Second
	var earliness time.Duration
	var next time.Time
	for i, ev := range events {
		if i > 0 {
			for busyUntil := events[i-1].Time.Add(busyFor); next.Before(ev.Time) && next.Before(busyUntil); next = next.Add(tickEvery) {
				r.m.Tick(next)
				checkAnchor(next)
			}
		}
		next = ev.Time
		if ev.Type == diag.TypeHOCommand && r.m.cmd == nil {
			anchor, handoversBefore = diag.Cell{}, len(r.obs.handovers)
			r.sets++
			if p := r.m.pred; p != nil {
				r.predicted++
				// On the machine's clock: sessions of a log overlap.
				commandAt := ev.Time
				if r.m.now.After(commandAt) {
					commandAt = r.m.now
				}
				earliness += commandAt.Sub(p.at)
			}
		}
		if ev.Type == diag.TypeHOCommand && ev.Kind == diag.HOPCell {
			anchor = ev.Target.Normalized()
		}
		before := len(r.act.calls)
		r.m.HandleEvent(ev)
		for _, c := range r.act.calls[before:] {
			assert.Truef(t, checkCall(c, r.m.now, r.m.cfg), "call %v at %v", c, r.m.now)
		}
		checkAnchor(ev.Time)
	}
	r.m.Tick(r.m.now.Add(busyFor))
	checkAnchor(r.m.now)
	if r.predicted > 0 {
		r.meanEarliness = earliness / time.Duration(r.predicted)
	}
	st := r.m.Status()
	t.Logf("%d anchor handovers executed, %d left the wrong primary cell", r.anchorHandovers, r.wrongAnchor)
	t.Logf("%d events, %d command sets, %d predicted (recall %.2f), mean report-to-command %v; outcomes %v; handovers %v; ignored %v; T2 %+v",
		len(events), r.sets, r.predicted, r.recall(), r.meanEarliness, st.Counters.Predictions, st.Counters.Handovers, st.Counters.Ignored, st.T2)
	return r
}

func (r replayResult) recall() float64 {
	if r.sets == 0 {
		return 0
	}
	return float64(r.predicted) / float64(r.sets)
}

// count returns how many transitions had reason.
func (r replayResult) count(reason string) int {
	n := 0
	for _, tr := range r.obs.transitions {
		if strings.HasSuffix(tr, ":"+reason) {
			n++
		}
	}
	return n
}

// assertReleased checks that everything is released at the end.
func (r replayResult) assertReleased(t *testing.T) {
	t.Helper()
	assert.Equal(t, Stable, r.m.State(), "two seconds after the last event everything is released")
	assert.Zero(t, r.act.clampBytes)
	assert.False(t, r.act.suppressing)
}

// TestRealLTEMobilityLog replays a real LTE drive log (mobileinsight's
// mobility_sample: A2, A3 and A5 reports, pcell handover commands,
// completions and failures) and checks that Algorithm 1 predicts most
// handovers before their commands.
func TestRealLTEMobilityLog(t *testing.T) {
	path := filepath.Join(shareddata.DataDir(t, ""), "diag", "mobility_sample.mi2log")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s not available: %v", path, err)
	}
	events := decodeEvents(t, path)
	require.NotEmpty(t, events)
	r := replay(t, events)

	st := r.m.Status()
	require.Positive(t, r.sets)
	// The LTE handovers of this log follow A3 or A5 reports between
	// sub-6 cells, which Algorithm 1 predicts.
	assert.Greater(t, r.recall(), 0.5, "recall of Algorithm 1 on a real drive")
	assert.GreaterOrEqual(t, st.Counters.Predictions[OutcomeConfirmed], uint64(r.predicted))
	assert.Positive(t, st.Counters.Handovers["sub6_sub6"])
	assert.Len(t, st.Counters.Handovers, 1, "an LTE-only log has only sub6_sub6 handovers")
	assert.Positive(t, r.anchorHandovers)
	assert.Zero(t, r.wrongAnchor, "every handover leaves the machine on its target cell")
	r.assertReleased(t)
}

// TestRealENDCLogs replays real EN-DC logs of a Xiaomi Mi 10 (LTE anchor
// with an FR1 NR secondary cell group): SCG additions, changes, releases
// (alone, or with an addition in the same reconfiguration) and anchor
// handovers that keep or release the SCG, each completed by one or two
// random accesses. The machine must follow the serving cells through all
// of it: the anchor stays LTE, the SCG NR, every command set completes,
// and every anchor handover (with an SCG release in the same
// reconfiguration or not) leaves the machine on the commanded anchor.
func TestRealENDCLogs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(shareddata.DataDir(t, ""), "diag", "20201116_*_Xiaomi-Mi10_46000.mi2log"))
	require.NoError(t, err)
	if len(files) == 0 {
		t.Skip("the Xiaomi Mi 10 EN-DC logs are not in the shared data")
	}
	var events []diag.Event
	for _, f := range files {
		events = append(events, decodeEvents(t, f)...)
	}
	require.NotEmpty(t, events)

	r := replay(t, events)
	st := r.m.Status()
	assert.Zero(t, r.count(ReasonExecutionTimeout), "every command set of these logs completes, SCG releases included")
	assert.Equal(t, diag.RATLTE, st.PCell.RAT, "the anchor")
	assert.Positive(t, r.anchorHandovers)
	assert.Zero(t, r.wrongAnchor, "anchor handovers left the machine on another cell")
	assert.Len(t, st.Counters.Handovers, 1, "FR1 only: every handover is sub6_sub6")
	assert.Positive(t, st.Counters.Handovers["sub6_sub6"])
	assert.Positive(t, st.Counters.Ignored["complete_in_smoothing"], "anchor handovers keeping the SCG complete twice")
	assert.Positive(t, r.predicted)
	r.assertReleased(t)
}
