package statemachine

import (
	"testing"

	"github.com/m2ho/m2ho/pkg/diag"
)

// TestStandingReportPredictsAgain: a prediction confirmed by secondary
// cell group procedures that did not reach its target predicts again
// once they executed, as the network hands the anchor over next; a
// primary cell handover ends it.
func TestStandingReportPredictsAgain(t *testing.T) {
	runMachineCases(t, []machineCase{
		{
			name: "SCG release, then the anchor handover the report announced",
			steps: []step{
				serve(0, lteA, nrA), meas(10, diag.EventA3, lteA, lteB),
				cmd(60, diag.HOSCGRelease, nrA, lteA), tick(70), tick(250),
				cmd(300, diag.HOPCell, lteA, lteB), done(320, lteB),
			},
			state:       Smoothing,
			transitions: []string{predicted, executed, "smoothing>preparation:smoothing_max", executed},
			predictions: []string{OutcomeConfirmed, OutcomeConfirmed},
			handovers:   []string{diag.ClassSub6Sub6, diag.ClassSub6Sub6},
		},
		{
			name: "no anchor handover follows: the new prediction times out",
			steps: []step{
				serve(0, lteA, nrA), meas(10, diag.EventA3, lteA, lteB),
				cmd(60, diag.HOSCGRelease, nrA, lteA), tick(70), tick(250), tick(1300),
			},
			state:       Stable,
			transitions: []string{predicted, executed, "smoothing>preparation:smoothing_max", "preparation>stable:prediction_timeout"},
			predictions: []string{OutcomeConfirmed, OutcomeTimedOut},
			handovers:   []string{diag.ClassSub6Sub6},
		},
		{
			name: "a primary cell handover (here intra-cell) ends the report",
			steps: []step{
				serve(0, lteA, diag.Cell{}), meas(10, diag.EventA3, lteA, lteB),
				cmd(60, diag.HOPCell, lteA, lteA), done(80, lteA), tick(250), tick(1300),
			},
			state:       Stable,
			transitions: []string{predicted, executed, "smoothing>stable:smoothing_max"},
			predictions: []string{OutcomeConfirmed},
			handovers:   []string{diag.ClassSub6Sub6},
		},
	})
}
