package statemachine

import "github.com/m2ho/m2ho/pkg/diag"

// OutcomeReleased: the network released (or suspended) the RRC
// connection while the prediction was pending. No handover of that
// connection can follow it any more; a release is no handover, even one
// redirecting the UE to the predicted carrier (a release with
// redirection sends an idle UE to select a cell there, TS 36.331 and
// 38.331 5.3.8: no command, no target cell, no forwarded data).
const OutcomeReleased = "released"

// ReasonReleased is the transition to Stable on a connection release.
const ReasonReleased = "released"

// onRelease ends what the connection had under way when the network
// releases it. The UE leaves RRC_CONNECTED: it releases every radio
// resource, the secondary cell group included, and stops the timers of
// every procedure (TS 36.331 5.3.8.3 and 5.3.12, TS 38.331 5.3.8.3 and
// 5.3.11), and a suspension to RRC_INACTIVE suspends every radio bearer
// but SRB0 (TS 38.331 5.3.8.3). No handover it predicted or was ordered
// will come, and no data flows: the Preparation clamp would only slow
// whatever the flows send once the UE connects again, and a prediction
// left pending would still be in force on the next connection, where
// nothing announced it. Suppression and Smoothing end with the data
// they were there for, and the reports still waiting for a command are
// not followed (reportsReleased).
func (m *Machine) onRelease(ev diag.Event) {
	m.logger.Info("connection released, releasing every policy", "cell", ev.Cell, "redirect", ev.Redirect)
	if m.pred != nil {
		m.obs.Prediction(OutcomeReleased, m.now)
		m.cnt.predictions[OutcomeReleased]++
	}
	// A command on the next connection follows no prediction of this one.
	m.expired = nil
	m.reportsReleased()
	m.endConnection(ReasonReleased, warmupClamp{})
}
