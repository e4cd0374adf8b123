package replay

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/diag/rrc"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// Predictors a replay compares.
const (
	// PredictorAlgorithm1 is the paper's Algorithm 1 alone.
	PredictorAlgorithm1 = "algorithm1"
	// PredictorLearning is Algorithm 1 as the prior of the learning
	// predictor, learning from the start of the recording.
	PredictorLearning = "learning"
)

// Predictors lists the predictors in the order of the tables.
func Predictors() []string { return []string{PredictorAlgorithm1, PredictorLearning} }

// Recording is the decoded signalling of one recorded diag input.
type Recording struct {
	Input  string
	Events []diag.Event
	// Reports are every measurement report of the recording in time
	// order, those that yield no event included.
	Reports []Report
	// Skipped counts what the input could not use, by reason.
	Skipped map[string]uint64
	// Subscriptions says which SIM subscription of a multi-SIM modem the
	// events and reports are those of; nil when the input had one.
	Subscriptions *rrc.SubscriptionStatus
	// Networks are the PLMNs the recording's network events named, in
	// order. The events themselves are not among Events: a replay learns
	// for no network (Player), so they change nothing of what it
	// replays.
	Networks []string
}

// Read decodes a recorded diag input to its end: qmdl:PATH (.qmdl,
// .mi2log), pcap:PATH (GSMTAP, QCSuper NR RRC) or jsonl:PATH. Malformed
// records are counted in Skipped, as the daemon counts them. The RRC
// messages of a multi-SIM modem are decoded per subscription, and only
// those of the subscription follow selects are kept, as the daemon's
// --diag-subscription does: the other SIM's connections are not the
// data's, and their handovers are not the ones m2hod acts on.
func Read(ctx context.Context, uri string, follow rrc.Follow) (*Recording, error) {
	scheme, _, _ := strings.Cut(uri, ":")
	switch scheme {
	case "qmdl", "pcap", "jsonl":
	default:
		return nil, fmt.Errorf("replay %s: %w: a replay reads a recording (qmdl:PATH, pcap:PATH or jsonl:PATH)", uri, diagsrc.ErrBadURI)
	}
	logger := slog.New(slog.DiscardHandler)
	decoder := rrc.NewSubscriptions(logger, follow)
	rec := &Recording{Input: uri, Skipped: map[string]uint64{}}
	decoder.ObserveReports(func(r rrc.ReportSeen) {
		rec.Reports = append(rec.Reports, Report{Time: r.Time, Resolved: r.Resolved, Event: r.Event})
	})
	var stats diag.Stats
	src, err := diagsrc.Open(uri, diagsrc.Options{Stats: &stats, RRC: decoder, Logger: logger})
	if err != nil {
		return nil, err
	}
	out := make(chan diag.Event, 256)
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, out)
		close(out)
	}()
	for ev := range out {
		if ev.Type == diag.TypeNetwork {
			rec.Networks = append(rec.Networks, ev.PLMN)
			continue
		}
		rec.Events = append(rec.Events, ev)
	}
	if err := <-done; err != nil {
		return nil, err
	}
	if scheme == "jsonl" {
		// JSON carries the events only: its reports are all there is.
		for _, ev := range rec.Events {
			if ev.Type == diag.TypeMeasReport {
				rec.Reports = append(rec.Reports, Report{Time: ev.Time, Resolved: true, Event: ev.Meas})
			}
		}
	}
	sortReports(rec.Reports)
	_, errs := stats.Snapshot()
	for _, c := range errs {
		rec.Skipped[c.Label] += uint64(c.Value)
	}
	if st := decoder.Status(); len(st.Seen) > 1 {
		rec.Subscriptions = &st
	}
	return rec, nil
}

// PredictorResult is how one predictor did over a recording.
type PredictorResult struct {
	Predictor string `json:"predictor"`
	// Classes are in the order of diag.ClassesWithAll(), diag.AllClasses
	// last; a class with neither handovers nor predictions is left out.
	Classes []ClassResult `json:"classes"`
	// Outcomes counts the predictions by outcome.
	Outcomes map[string]int `json:"outcomes"`
	// Policy is what m2ho would have applied.
	Policy PolicySummary `json:"policy"`
	// LearntKinds counts the kinds of report the learning predictor knows
	// at the end.
	LearntKinds int `json:"learnt_kinds,omitempty"`
}

// Class returns the row of class, if there is one.
func (p *PredictorResult) Class(class string) (ClassResult, bool) {
	i := slices.IndexFunc(p.Classes, func(c ClassResult) bool { return c.Class == class })
	if i < 0 {
		return ClassResult{}, false
	}
	return p.Classes[i], true
}

// Judge replays a recording through a fresh machine and estimator with
// the daemon's defaults and predictor, and judges its predictions
// against the commands that followed. learnt is what the learning
// predictor knows before the recording, report counts and
// report-to-command intervals, and receives what it learns from it
// (nil: it starts from nothing, and what it learns is not kept).
// Algorithm 1 learns no reports, and neither reads nor changes learnt;
// within a log of several recordings, its mean T2 carries over from one
// to the next, as it does across restarts of m2hod.
func Judge(rec *Recording, predictor string, learnt *Learnt) (PredictorResult, error) {
	cfg := statemachine.DefaultConfig()
	switch predictor {
	case PredictorAlgorithm1:
		cfg.Learning = false
		learnt = nil
	case PredictorLearning:
		cfg.Learning = true
	default:
		return PredictorResult{}, fmt.Errorf("replay: unknown predictor %q", predictor)
	}
	return judgeWith(rec, predictor, cfg, learnt)
}

// judgeWith judges a recording with a machine configured by cfg that
// learns in learnt (nil: a store of its own).
func judgeWith(rec *Recording, predictor string, cfg statemachine.Config, learnt *Learnt) (PredictorResult, error) {
	j := &judge{reports: rec.Reports}
	j.policy = &policyRecorder{}
	opts := Options{Machine: cfg, Actuator: j.policy, Observer: j, NewSession: func(time.Time) {
		// The previous recording ended with whatever was pending.
		j.open = nil
		j.tracker.finish()
		j.policy.restart()
	}}
	if learnt != nil {
		// Set only when there is one: a nil *Learnt in the interface
		// would not be nil, and the machine would save into it.
		opts.Learnt = learnt
	}
	player, err := NewPlayer(opts)
	if err != nil {
		return PredictorResult{}, err
	}
	j.player = player
	j.policy.now = player.Now
	for _, ev := range rec.Events {
		if err := j.play(ev); err != nil {
			return PredictorResult{}, err
		}
	}
	player.Drain(func() bool { return j.tracker.open == nil && player.Machine().State() == statemachine.Stable })
	j.tracker.finish()
	j.judgeMisses()
	res := PredictorResult{Predictor: predictor, Classes: j.classes(), Outcomes: map[string]int{}, Policy: j.policy.summary(player.Now())}
	for _, p := range j.tracker.made {
		res.Outcomes[p.Outcome]++
	}
	if cfg.Learning {
		res.LearntKinds = len(player.Machine().Learnt())
	}
	return res, nil
}

// Result is the replay of one recording by every predictor.
type Result struct {
	Input string `json:"input"`
	// Events and Reports count what the recording holds. Span is the time
	// it covers on its own clock: the gaps between consecutive events,
	// leaving out pauses longer than QuietAfter and the jumps between the
	// recordings of a log made of several.
	Events  int               `json:"events"`
	Reports int               `json:"reports"`
	Span    time.Duration     `json:"span_ns"`
	Skipped map[string]uint64 `json:"skipped,omitempty"`
	// Subscriptions, for a multi-SIM modem, is the subscription replayed
	// and what each one sent.
	Subscriptions *rrc.SubscriptionStatus `json:"subscriptions,omitempty"`
	// Networks are the PLMNs the recording named (Recording.Networks).
	Networks []string `json:"networks,omitempty"`
	// Predictors are in the order of Predictors().
	Predictors []PredictorResult `json:"predictors"`
}

// Predictor returns the result of a predictor, if judged.
func (r *Result) Predictor(name string) (*PredictorResult, bool) {
	for i := range r.Predictors {
		if r.Predictors[i].Predictor == name {
			return &r.Predictors[i], true
		}
	}
	return nil, false
}

// Replay reads a recording, following the SIM subscription follow
// selects, and judges every predictor on it, the learning predictor
// starting from learnt and learning into it (nil: from nothing, and
// what it learns is not kept).
func Replay(ctx context.Context, uri string, follow rrc.Follow, learnt *Learnt) (*Result, error) {
	rec, err := Read(ctx, uri, follow)
	if err != nil {
		return nil, err
	}
	res := &Result{Input: uri, Events: len(rec.Events), Reports: len(rec.Reports), Skipped: rec.Skipped, Subscriptions: rec.Subscriptions,
		Networks: rec.Networks}
	if len(rec.Skipped) == 0 {
		res.Skipped = nil
	}
	for i := 1; i < len(rec.Events); i++ {
		if gap := rec.Events[i].Time.Sub(rec.Events[i-1].Time); gap > 0 && gap <= QuietAfter {
			res.Span += gap
		}
	}
	for _, name := range Predictors() {
		p, err := Judge(rec, name, learnt)
		if err != nil {
			return nil, fmt.Errorf("replay %s: %w", uri, err)
		}
		res.Predictors = append(res.Predictors, p)
	}
	return res, nil
}

// sortReports puts reports in time order, as the judge looks them up.
func sortReports(reports []Report) {
	slices.SortStableFunc(reports, func(a, b Report) int { return a.Time.Compare(b.Time) })
}
