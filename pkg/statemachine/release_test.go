package statemachine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

func release(ms int, redirect diag.Carrier) step {
	return func(h *harness) {
		h.m.HandleEvent(diag.Event{Type: diag.TypeRRCRelease, Time: at(ms), Cell: lteA, Redirect: redirect})
	}
}

const releasedConnection = "preparation>stable:released"

// TestConnectionRelease: a connection release ends whatever the
// connection had under way, its policies, the secondary cell group and
// the reports waiting for a command, so that nothing of it is in force
// on the next connection.
func TestConnectionRelease(t *testing.T) {
	noPolicy := func(t *testing.T, h *harness) {
		st := h.m.Status()
		assert.Nil(t, st.Prediction)
		assert.Nil(t, st.Command)
		assert.Zero(t, h.act.clampBytes)
		assert.False(t, h.act.suppressing)
	}
	runMachineCases(t, []machineCase{
		{
			name:        "a release ends the prediction and its Preparation clamp",
			steps:       []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB), release(50, diag.Carrier{})},
			state:       Stable,
			transitions: []string{predicted, releasedConnection},
			predictions: []string{OutcomeReleased},
			ops:         []string{"prepare_suppression", "set_clamp(400000)", "stop_suppression", "clear_clamp"},
			check:       noPolicy,
		},
		{
			name: "so does one redirecting the UE to the predicted carrier",
			steps: []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB),
				release(50, lteB.Carrier())},
			state:       Stable,
			transitions: []string{predicted, releasedConnection},
			predictions: []string{OutcomeReleased},
			check:       noPolicy,
		},
		{
			name: "the prediction is not in force on the next connection",
			steps: []step{serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB),
				release(50, diag.Carrier{}), serve(100, lteA, diag.Cell{}), tick(150), tick(400)},
			state:       Stable,
			transitions: []string{predicted, releasedConnection},
			predictions: []string{OutcomeReleased},
			check:       noPolicy,
		},
		{
			name:        "a release ends the command under way and its suppression",
			steps:       []step{serve(0, lteA, diag.Cell{}), cmd(50, diag.HOPCell, lteA, lteB), release(60, diag.Carrier{})},
			state:       Stable,
			transitions: []string{commanded, releasedConnection},
			check: func(t *testing.T, h *harness) {
				noPolicy(t, h)
				assert.Equal(t, lteA, h.m.Status().PCell, "no handover executed")
				assert.Empty(t, h.obs.handovers)
			},
		},
		{
			name:        "a release ends Smoothing and the prediction it queued",
			cfg:         func(c *Config) { c.Ramp = false },
			steps:       append(handoverSteps(), meas(140, diag.EventA3, lteB, lteA), release(150, diag.Carrier{})),
			state:       Stable,
			transitions: []string{predicted, executed, "smoothing>stable:released"},
			predictions: []string{OutcomeConfirmed, OutcomeReleased},
			handovers:   []string{diag.ClassSub6Sub6},
			check:       noPolicy,
		},
		{
			name:  "a release drops the secondary cell group",
			steps: []step{serve(0, lteA, nrA), release(50, diag.Carrier{})},
			state: Stable,
			ops:   []string{},
			check: func(t *testing.T, h *harness) {
				st := h.m.Status()
				assert.Nil(t, st.SCG)
				assert.Equal(t, lteA, st.Serving, "data flows through the anchor once a connection carries it again")
			},
		},
		{
			name:  "a release with nothing under way changes no policy",
			steps: []step{serve(0, lteA, diag.Cell{}), release(50, diag.Carrier{})},
			state: Stable,
			ops:   []string{},
		},
		{
			// Within a second of the report and 4*T2 of the prediction:
			// without the release, the report would count as followed
			// and the command as a late T2 sample.
			name: "no command of the next connection answers a report or a timed-out prediction of this one",
			steps: []step{serve(0, lteA, diag.Cell{}), meas(0, diag.EventA3, lteA, lteB), tick(292),
				release(300, diag.Carrier{}), cmd(400, diag.HOPCell, lteA, lteB)},
			state:       Preparation,
			transitions: []string{predicted, "preparation>stable:prediction_timeout", commanded},
			predictions: []string{OutcomeTimedOut},
			check: func(t *testing.T, h *harness) {
				var a3 []ReportStats
				for _, s := range h.m.Learnt() {
					if s.Event == diag.EventA3 {
						a3 = append(a3, s)
					}
				}
				require.NotEmpty(t, a3)
				for _, s := range a3 {
					assert.Equal(t, uint32(1), s.Reports)
					assert.Zero(t, s.Followed, "the network released the connection instead")
				}
				st := h.m.Status()
				require.NotEmpty(t, st.T2)
				assert.Zero(t, st.T2[0].Samples, "a command of the next connection follows no prediction of this one")
				assert.Equal(t, uint64(1), st.Counters.Events[string(diag.TypeRRCRelease)])
			},
		},
	})
}
