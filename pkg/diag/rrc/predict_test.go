package rrc

import (
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// inertActuator accepts every policy: the replay evaluates predictions,
// not the datapath.
type inertActuator struct{}

func (inertActuator) SetClamp(uint32, time.Time) error { return nil }
func (inertActuator) SetFreeze(time.Time) error        { return nil }
func (inertActuator) ClearClamp() error                { return nil }
func (inertActuator) StartSuppression(time.Time) error { return nil }
func (inertActuator) StopSuppression() error           { return nil }

// predictionScore follows the machine's predictions through its observer
// and measures each confirmed one against the handover that followed.
type predictionScore struct {
	outcomes map[string]int
	commands int
	// predictedAt is when the pending prediction was made.
	predictedAt time.Time
	// confirmedAt is predictedAt of a confirmed prediction whose
	// handover to confirmedTarget has not completed yet.
	confirmedAt     time.Time
	confirmedTarget diag.Cell
	// confirmedNow is set by Prediction while the machine handles the
	// command that confirmed it.
	confirmedNow bool
	toCommand    []time.Duration
	toExecution  []time.Duration
}

func (p *predictionScore) Transition(_, to statemachine.State, reason string, at time.Time) {
	if to == statemachine.Preparation && reason == statemachine.ReasonPredicted {
		p.predictedAt = at
	}
}

func (p *predictionScore) Handover(string, time.Time) {}

func (p *predictionScore) Prediction(outcome string, at time.Time) {
	p.outcomes[outcome]++
	if outcome == statemachine.OutcomeConfirmed && !p.predictedAt.IsZero() {
		p.toCommand = append(p.toCommand, at.Sub(p.predictedAt))
		p.confirmedAt, p.confirmedNow = p.predictedAt, true
	}
	p.predictedAt = time.Time{}
}

// command follows a handover command the machine just handled: the
// target whose completion executes a confirmed prediction.
func (p *predictionScore) command(ev diag.Event) {
	if p.confirmedNow {
		p.confirmedTarget, p.confirmedNow = ev.Target, false
		return
	}
	p.confirmedAt = time.Time{} // a later command supersedes the confirmed one
}

// executed records the completion of the handover a confirmed prediction
// announced.
func (p *predictionScore) executed(ev diag.Event) {
	if !p.confirmedAt.IsZero() && ev.Cell.Key() == p.confirmedTarget.Key() {
		p.toExecution = append(p.toExecution, ev.Time.Sub(p.confirmedAt))
		p.confirmedAt = time.Time{}
	}
}

// newSession starts from a fresh machine state: the log restarted.
func (p *predictionScore) newSession() {
	p.predictedAt, p.confirmedAt, p.confirmedNow = time.Time{}, time.Time{}, false
}

// meanMedian summarises durations, rounded to the millisecond.
func meanMedian(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	return fmt.Sprintf("%v/%v", (sum / time.Duration(len(sorted))).Round(time.Millisecond), sorted[len(sorted)/2].Round(time.Millisecond))
}

// tickPeriod is how often the replay runs the machine's timeouts between
// events, as the daemon does.
const tickPeriod = 20 * time.Millisecond

// newMachine is a state machine with default settings reporting to score.
func newMachine(t *testing.T, score *predictionScore) *statemachine.Machine {
	t.Helper()
	est, err := estimator.New(estimator.DefaultConfig(), nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	m, err := statemachine.New(statemachine.DefaultConfig(), est, inertActuator{}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	m.SetObserver(score)
	return m
}

// replayPrediction runs a capture's events through a state machine with
// default settings and scores Algorithm 1 against the handover commands
// that actually followed. Logs made of several recordings (the modem
// clock jumps back) are replayed as separate sessions.
func replayPrediction(t *testing.T, events []diag.Event) *predictionScore {
	t.Helper()
	score := &predictionScore{outcomes: map[string]int{}}
	m := newMachine(t, score)
	var last time.Time
	for _, ev := range events {
		if ev.Time.Before(last) {
			score.newSession()
			m, last = newMachine(t, score), time.Time{}
		}
		if !last.IsZero() {
			// Timeouts fire when they are due, not at the next event.
			for tick := last.Add(tickPeriod); tick.Before(ev.Time) && tick.Sub(last) < 10*time.Second; tick = tick.Add(tickPeriod) {
				m.Tick(tick)
			}
		}
		m.Tick(ev.Time)
		m.HandleEvent(ev)
		switch ev.Type {
		case diag.TypeHOCommand:
			score.commands++
			score.command(ev)
		case diag.TypeHOComplete:
			score.executed(ev)
		}
		last = ev.Time
	}
	return score
}

// TestPredictionOnRealSignalling replays every shared capture's decoded
// events through the state machine and reports, per file, Algorithm 1's
// precision (confirmed predictions among decided ones), recall (handover
// commands that a prediction announced) and earliness (prediction to
// command, prediction to execution).
func TestPredictionOnRealSignalling(t *testing.T) {
	t.Logf("%-42s %6s %9s %9s %9s %9s %7s %9s %16s %16s",
		"capture", "cmds", "predicted", "confirmed", "cancel_a1", "timed_out", "recall", "precision", "to_cmd mean/med", "to_exec mean/med")
	for _, c := range realCaptures(t) {
		events, _ := replay(c)
		score := replayPrediction(t, events)
		confirmed := score.outcomes[statemachine.OutcomeConfirmed]
		decided := confirmed + score.outcomes[statemachine.OutcomeCancelledA1] + score.outcomes[statemachine.OutcomeTimedOut]
		recall, precision := "-", "-"
		if score.commands > 0 {
			recall = percent(confirmed, score.commands)
		}
		if decided > 0 {
			precision = percent(confirmed, decided)
		}
		t.Logf("%-42s %6d %9d %9d %9d %9d %7s %9s %16s %16s", c.name, score.commands, decided, confirmed,
			score.outcomes[statemachine.OutcomeCancelledA1], score.outcomes[statemachine.OutcomeTimedOut],
			recall, precision, meanMedian(score.toCommand), meanMedian(score.toExecution))
		assert.LessOrEqual(t, confirmed, score.commands, "%s: more confirmations than commands", c.name)
		for _, d := range append(score.toCommand, score.toExecution...) {
			assert.GreaterOrEqual(t, d, time.Duration(0), "%s: prediction after its handover", c.name)
		}
	}
}

func percent(n, of int) string {
	return fmt.Sprintf("%.1f%%", float64(n)*100/float64(of))
}
