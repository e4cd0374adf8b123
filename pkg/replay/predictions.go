package replay

import (
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// Outcomes of a replayed prediction besides the machine's own
// (statemachine.OutcomeConfirmed, OutcomeCancelledA1, OutcomeTimedOut,
// OutcomeCHORemoved, OutcomeReleased), for predictions that ended
// without the machine reporting one, or that the judge tells apart.
const (
	// OutcomeSuperseded: a report predicting another target replaced it.
	OutcomeSuperseded = "superseded"
	// OutcomeDropped: it vanished on a connection failure, which releases
	// every policy.
	OutcomeDropped = "dropped_on_failure"
	// OutcomeUnresolved: still pending when the replay ended.
	OutcomeUnresolved = "unresolved"
	// OutcomeRedirected: the network released the connection
	// (statemachine.OutcomeReleased) redirecting the UE to the carrier of
	// the predicted target. The network moved the UE where the report
	// pointed, but by a release, not a handover: it counts as not
	// confirmed, as every release does (docs/replay.md).
	OutcomeRedirected = "redirected"
)

// Prediction is one prediction the machine made and its fate.
type Prediction struct {
	statemachine.PredictionStatus
	Outcome    string
	ResolvedAt time.Time
}

// predictionTracker follows the machine's predictions: new ones from its
// status after each event, outcomes from the Observer calls. The machine
// forgets a prediction as it reports its outcome, so a pending one
// nobody follows yet is new.
type predictionTracker struct {
	made []*Prediction
	open *Prediction
	// unmatched counts outcomes reported with no prediction followed.
	unmatched int
}

// outcome records the outcome the machine reported for the pending
// prediction.
func (t *predictionTracker) outcome(outcome string, at time.Time) {
	if t.open == nil {
		t.unmatched++
		return
	}
	t.open.Outcome, t.open.ResolvedAt = outcome, at
	t.open = nil
}

// observe compares the machine's pending prediction after an event with
// the one being followed: a different one is new, and the followed one,
// if it got no outcome, was replaced or dropped.
func (t *predictionTracker) observe(pending *statemachine.PredictionStatus, at time.Time) {
	if t.open != nil && (pending == nil || !samePrediction(*pending, t.open.PredictionStatus)) {
		t.open.Outcome, t.open.ResolvedAt = OutcomeDropped, at
		if pending != nil {
			t.open.Outcome = OutcomeSuperseded
		}
		t.open = nil
	}
	if pending == nil || t.open != nil {
		return
	}
	t.open = &Prediction{PredictionStatus: *pending}
	t.made = append(t.made, t.open)
}

// finish marks the prediction still pending at the end of a recording
// unresolved.
func (t *predictionTracker) finish() {
	if t.open != nil {
		t.open.Outcome = OutcomeUnresolved
		t.open = nil
	}
}

// samePrediction: a new PredictedAt or target means a new prediction (a
// periodic repeat of a report keeps both).
func samePrediction(a, b statemachine.PredictionStatus) bool {
	return a.PredictedAt.Equal(b.PredictedAt) && a.Target == b.Target && a.Source == b.Source && a.Event == b.Event
}

// predictionObserver feeds the tracker the machine's outcomes and passes
// every call on to next.
type predictionObserver struct {
	tracker *predictionTracker
	next    statemachine.Observer
}

func (o predictionObserver) Transition(from, to statemachine.State, reason string, at time.Time) {
	o.next.Transition(from, to, reason, at)
}

func (o predictionObserver) Handover(kind string, at time.Time) { o.next.Handover(kind, at) }

func (o predictionObserver) Prediction(outcome string, at time.Time) {
	o.tracker.outcome(outcome, at)
	o.next.Prediction(outcome, at)
}

type noObserver struct{}

func (noObserver) Transition(statemachine.State, statemachine.State, string, time.Time) {}
func (noObserver) Handover(string, time.Time)                                           {}
func (noObserver) Prediction(string, time.Time)                                         {}

// Predictions replays events (in time order) through a fresh machine
// and estimator configured by opts, and returns every prediction the
// machine made with its outcome; after the last event the replay goes on
// until the pending prediction has one (for at most QuietAfter). unmatched
// counts outcomes the machine reported with no prediction pending.
// opts.Observer is told everything as well.
func Predictions(events []diag.Event, opts Options) (made []*Prediction, unmatched int, err error) {
	tracker := &predictionTracker{}
	next := opts.Observer
	if next == nil {
		next = noObserver{}
	}
	opts.Observer = predictionObserver{tracker: tracker, next: next}
	newSession := opts.NewSession
	opts.NewSession = func(at time.Time) {
		// The previous recording ended with its prediction pending.
		tracker.finish()
		if newSession != nil {
			newSession(at)
		}
	}
	p, err := NewPlayer(opts)
	if err != nil {
		return nil, 0, err
	}
	for _, ev := range events {
		if err := p.Play(ev); err != nil {
			return nil, 0, err
		}
		tracker.observe(p.Machine().Status().Prediction, ev.Time)
	}
	p.Drain(func() bool { return tracker.open == nil })
	tracker.finish()
	return tracker.made, tracker.unmatched, nil
}
