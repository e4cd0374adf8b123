package statemachine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

func choConfig(ms int, serving diag.Cell, candidates ...diag.Cell) step {
	return func(h *harness) {
		h.m.HandleEvent(diag.Event{Type: diag.TypeCHOConfig, Time: at(ms), Serving: serving, Candidates: candidates})
	}
}

func choExecuted(ms int, source, target diag.Cell) step {
	return func(h *harness) {
		h.m.HandleEvent(diag.Event{Type: diag.TypeHOCommand, Time: at(ms), Kind: diag.HOPCell, Source: source, Target: target, Conditional: true})
		h.m.HandleEvent(diag.Event{Type: diag.TypeHOComplete, Time: at(ms), Cell: target})
	}
}

// TestConditionalHandover: a conditional handover configuration predicts
// the handover to its first candidate until the UE executes it, it is
// removed, or ConditionalHold passes; reports and A1s change nothing of
// it, and its wait is no T2 sample.
func TestConditionalHandover(t *testing.T) {
	runMachineCases(t, []machineCase{
		{
			name:        "configuration predicts, execution confirms",
			steps:       []step{serve(0, lteA, diag.Cell{}), choConfig(10, lteA, lteB), tick(1500), choExecuted(1600, lteA, lteB)},
			state:       Smoothing,
			transitions: []string{predicted, executed},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{diag.ClassSub6Sub6},
			check: func(t *testing.T, h *harness) {
				st := h.m.Status()
				assert.Equal(t, lteB, st.PCell)
				for _, b := range st.T2 {
					assert.Zero(t, b.Samples, "the wait for the condition is no report-to-command interval")
				}
			},
		},
		{
			name:        "the prediction holds as long as ConditionalHold",
			steps:       []step{serve(0, lteA, diag.Cell{}), choConfig(10, lteA, lteB), tick(2009), tick(2010)},
			state:       Stable,
			transitions: []string{predicted, "preparation>stable:prediction_timeout"},
			predictions: []string{OutcomeTimedOut},
		},
		{
			name:        "removal cancels",
			steps:       []step{serve(0, lteA, diag.Cell{}), choConfig(10, lteA, lteB), choConfig(500, lteA)},
			state:       Stable,
			transitions: []string{predicted, "preparation>stable:cho_removed"},
			predictions: []string{OutcomeCHORemoved},
			ops:         []string{"prepare_suppression", "set_clamp(400000)", "stop_suppression", "clear_clamp"},
		},
		{
			name: "an A1 or a report to another cell leaves it in force",
			steps: []step{serve(0, lteA, diag.Cell{}), choConfig(10, lteA, lteB),
				meas(100, diag.EventA1, lteA, diag.Cell{}), meas(200, diag.EventA3, lteA, nrA)},
			state:       Preparation,
			transitions: []string{predicted},
			check: func(t *testing.T, h *harness) {
				p := h.m.Status().Prediction
				require.NotNil(t, p)
				assert.True(t, p.Conditional)
				assert.Equal(t, lteB, p.Target)
				assert.Equal(t, at(10+2000), p.Deadline)
			},
		},
		{
			name:        "a configuration takes over a report's prediction",
			steps:       []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB), choConfig(50, lteA, lteB)},
			state:       Preparation,
			transitions: []string{predicted},
			check: func(t *testing.T, h *harness) {
				p := h.m.Status().Prediction
				require.NotNil(t, p)
				assert.True(t, p.Conditional)
				assert.Equal(t, at(50+2000), p.Deadline)
			},
		},
		{
			name:        "a change that keeps the target keeps the prediction; one that drops it retargets",
			steps:       []step{serve(0, lteA, diag.Cell{}), choConfig(10, lteA, lteB, nrA), choConfig(100, lteA, nrA, lteB)},
			state:       Preparation,
			transitions: []string{predicted},
			check: func(t *testing.T, h *harness) {
				p := h.m.Status().Prediction
				require.NotNil(t, p)
				assert.Equal(t, lteB, p.Target)
				assert.Equal(t, at(10), p.PredictedAt)
				choConfig(200, lteA, nrA)(h)
				p = h.m.Status().Prediction
				require.NotNil(t, p)
				assert.Equal(t, nrA, p.Target)
				assert.Equal(t, at(200), p.PredictedAt)
			},
		},
		{
			name:  "removal without a conditional prediction does nothing",
			steps: []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB), choConfig(50, lteA)},
			state: Preparation, transitions: []string{predicted},
		},
		{
			name:  "prediction off: nothing predicted",
			cfg:   func(c *Config) { c.Prediction = false },
			steps: []step{serve(0, lteA, diag.Cell{}), choConfig(10, lteA, lteB)},
			state: Stable,
		},
	})
}
