package emu

import (
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/scenario"
)

// SignallingTruth runs a validated scenario's timeline through the link
// with no traffic, from epoch to the scenario's end: the handovers and
// the signalling a run of it records (GroundTruth.Handovers, .Signalling,
// at the same virtual times, which the timeline alone decides), without
// packets or duplicate ACKs. Handover prediction is judged on these alone
// (report.EvaluatePrediction), so it can be measured on corpora far larger
// than a run could cover.
func SignallingTruth(sc *scenario.Scenario, epoch time.Time) (*GroundTruth, error) {
	l, err := NewLink(sc, epoch, func(diag.Event) {}, func(*Packet, time.Duration) {})
	if err != nil {
		return nil, err
	}
	l.Advance(sc.Duration)
	return l.Truth(), nil
}
