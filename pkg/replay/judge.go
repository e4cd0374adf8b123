package replay

import (
	"math"
	"slices"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// ReportWindow is how long before a handover command a measurement
// report must have come for the handover to count as announced by one:
// the paper's longest report-to-execution interval is 310 ms (section
// 4.2), and data/handover-timing.md finds none beyond one second.
const ReportWindow = time.Second

// Why an unpredicted handover was missed.
const (
	// MissNoReport: no measurement report came within ReportWindow
	// before the command.
	MissNoReport = "no_report"
	// MissReportNotPredicting: a report with a trigger came, but the
	// predictor does not act on it.
	MissReportNotPredicting = "report_not_predicting"
	// MissPredictionEnded: a prediction came, but it timed out, was
	// cancelled, replaced or ended by a connection release before the
	// command.
	MissPredictionEnded = "prediction_ended"
	// MissPeriodicalReport: only periodical reports (or triggers m2ho does
	// not follow) came.
	MissPeriodicalReport = "periodical_report"
	// MissUnresolvedMeasID: only reports whose measId the capture never
	// configured came (it started mid-connection).
	MissUnresolvedMeasID = "unresolved_meas_id"
	// MissRadioLinkFailure: the connection failed (radio link or handover
	// failure, re-establishment) with no command to predict.
	MissRadioLinkFailure = "radio_link_failure"
)

// Report is one measurement report of a recording: resolved or not,
// with or without a trigger m2ho follows (Event empty: periodical, or
// another trigger).
type Report struct {
	Time     time.Time
	Resolved bool
	Event    diag.MeasEvent
}

// Ratio is a count over a total. Its JSON form carries the value too,
// null when Den is 0.
type Ratio struct {
	Num int `json:"num"`
	Den int `json:"den"`
}

// Value is Num/Den; ok is false when Den is 0.
func (r Ratio) Value() (v float64, ok bool) {
	if r.Den == 0 {
		return 0, false
	}
	return float64(r.Num) / float64(r.Den), true
}

// ClassResult is how a predictor did on one handover class, or on all
// (diag.AllClasses).
type ClassResult struct {
	Class string `json:"class"`
	// Handovers counts handover command sets (the commands of one
	// reconfiguration) and completions no command announced (the log
	// lost their command); Failures connection failures. Conditional counts
	// the handovers that were conditional handovers the UE executed:
	// their command is the configuration that stored the candidate.
	Handovers   int `json:"handovers"`
	Failures    int `json:"failures"`
	Conditional int `json:"conditional"`
	// Reported counts the handovers with a measurement report within
	// ReportWindow before their command.
	Reported int `json:"reported"`
	// Predicted counts the handovers a prediction announced (pending
	// when the command came), PredictedReported those among Reported.
	Predicted         int `json:"predicted"`
	PredictedReported int `json:"predicted_reported"`
	// Predictions counts predictions with an outcome, Confirmed those a
	// command (or an unannounced completion) confirmed.
	Predictions int `json:"predictions"`
	Confirmed   int `json:"confirmed"`
	// Precision is Confirmed/Predictions, Recall Predicted over
	// handovers and failures, RecallReported PredictedReported/Reported.
	Precision      Ratio `json:"precision"`
	Recall         Ratio `json:"recall"`
	RecallReported Ratio `json:"recall_reported"`
	// Earliness is execution minus prediction, Lead command minus
	// prediction, over the predicted handovers (that executed, for
	// Earliness).
	EarlinessMean   time.Duration `json:"earliness_mean_ns"`
	EarlinessMedian time.Duration `json:"earliness_median_ns"`
	LeadMean        time.Duration `json:"lead_mean_ns"`
	LeadMedian      time.Duration `json:"lead_median_ns"`
	// Misses counts the handovers and failures not predicted, by cause
	// (the Miss constants).
	Misses map[string]int `json:"misses"`
}

// handover is one command set of a replay, or a completion no command
// announced.
type handover struct {
	class string
	// commandAt is when the command came; for a completion no command
	// announced, when it completed.
	commandAt time.Time
	// conditional: a stored conditional configuration the UE executed;
	// commandAt is when the network stored it.
	conditional bool
	// executedAt is zero when it did not execute (timed out, failed).
	executedAt time.Time
	// predictedAt is when the prediction it confirmed was made; zero when
	// none did.
	predictedAt time.Time
	failure     bool
	miss        string
	reported    bool
}

// judge follows one replay: the handovers, their predictions and the
// policy the machine applied.
type judge struct {
	player  *Player
	tracker predictionTracker
	policy  *policyRecorder
	reports []Report

	handovers []*handover
	// open is the command set being executed.
	open *handover
	// unannounced is the handover a completion with no command under way
	// makes, while the machine handles that completion.
	unannounced *handover
	// confirmedNow is set when the machine confirms a prediction while
	// it handles a command or a completion.
	confirmedNow bool
	// storedAt is when the conditional handover configurations in force
	// first named each candidate.
	storedAt map[diag.CellKey]time.Time
}

func (j *judge) Transition(statemachine.State, statemachine.State, string, time.Time) {}

// Handover gives the executed command set, or the completion no
// command announced, its class.
func (j *judge) Handover(kind string, at time.Time) {
	switch {
	case j.open != nil:
		j.open.class, j.open.executedAt = kind, at
		j.open = nil
	case j.unannounced != nil:
		j.unannounced.class, j.unannounced.executedAt = kind, at
	}
}

func (j *judge) Prediction(outcome string, at time.Time) {
	if outcome == statemachine.OutcomeConfirmed {
		j.confirmedNow = true
	}
	j.tracker.outcome(outcome, at)
}

// play runs one event and follows what it did.
func (j *judge) play(ev diag.Event) error {
	if ev.Type == diag.TypeCHOConfig {
		j.noteStored(ev)
	}
	if ev.Type == diag.TypeHOComplete {
		return j.complete(ev)
	}
	if ev.Type != diag.TypeHOCommand {
		pending := j.tracker.open
		if err := j.player.Play(ev); err != nil {
			return err
		}
		if ev.Type == diag.TypeRRCRelease {
			// The command set under way ends with the connection, as in
			// the machine: its completion will not come.
			j.open = nil
			if pending != nil {
				noteRedirect(pending, ev.Redirect)
			}
		}
		j.afterEvent(ev)
		return nil
	}
	if err := j.player.Prepare(ev.Time); err != nil {
		return err
	}
	before := j.player.Machine().Status()
	j.confirmedNow = false
	j.player.Handle(ev)
	if before.Command != nil {
		// Another command of the reconfiguration being executed.
		j.afterEvent(ev)
		return nil
	}
	after := j.player.Machine().Status()
	h := &handover{commandAt: ev.Time, class: diag.HandoverClass(before.Serving.Band, before.Serving.Band)}
	if ev.Conditional {
		h.conditional = true
		if stored, ok := j.storedAt[ev.Target.Normalized().Key()]; ok {
			h.commandAt = stored
		}
		j.storedAt = nil // executing one releases them all
	}
	if after.Command != nil {
		h.class = diag.HandoverClass(before.Serving.Band, after.Command.NewServing.Band)
	}
	j.record(h, before)
	j.open = h
	j.afterEvent(ev)
	return nil
}

// complete plays a handover completion. One the machine executes with no
// command under way is a handover of its own: the handover of a command
// the log lost (the UE answers a handover command with its
// reconfiguration complete on the target cell, TS 36.331 5.3.5.4 and TS
// 38.331 5.3.5.3), whose time the log knows only from the completion. It
// counts for recall as for precision, confirming the prediction the
// machine had pending. A late completion of a command set the machine
// gave up on (its execution timed out) is that command set's (Handover).
func (j *judge) complete(ev diag.Event) error {
	if err := j.player.Prepare(ev.Time); err != nil {
		return err
	}
	before := j.player.Machine().Status()
	j.confirmedNow = false
	if before.Command == nil {
		j.unannounced = &handover{commandAt: ev.Time}
	}
	j.player.Handle(ev)
	if h := j.unannounced; h != nil && !h.executedAt.IsZero() {
		j.record(h, before)
	}
	j.unannounced = nil
	j.afterEvent(ev)
	return nil
}

// record adds a handover, predicted when the event that made it
// confirmed the prediction pending before it (before).
func (j *judge) record(h *handover, before statemachine.Status) {
	if j.confirmedNow && before.Prediction != nil {
		h.predictedAt = before.Prediction.PredictedAt
	}
	j.handovers = append(j.handovers, h)
}

// noteRedirect tells apart a prediction that a release redirecting the
// UE to redirect ended, when that is the carrier of its target
// (OutcomeRedirected).
func noteRedirect(p *Prediction, redirect diag.Carrier) {
	if p.Outcome == statemachine.OutcomeReleased && !redirect.IsZero() && p.Target.Carrier() == redirect {
		p.Outcome = OutcomeRedirected
	}
}

// noteStored follows the candidates of the conditional handover
// configurations in force, and since when each is.
func (j *judge) noteStored(ev diag.Event) {
	stored := map[diag.CellKey]time.Time{}
	for _, c := range ev.Candidates {
		key := c.Normalized().Key()
		stored[key] = ev.Time
		if at, ok := j.storedAt[key]; ok {
			stored[key] = at
		}
	}
	j.storedAt = stored
}

func (j *judge) afterEvent(ev diag.Event) {
	if ev.Type == diag.TypeHOFailure {
		j.open = nil
		st := j.player.Machine().Status()
		j.handovers = append(j.handovers, &handover{commandAt: ev.Time, failure: true, miss: MissRadioLinkFailure,
			class: diag.HandoverClass(st.Serving.Band, st.Serving.Band)})
	}
	j.tracker.observe(j.player.Machine().Status().Prediction, ev.Time)
}

// judgeMisses finds why each unpredicted handover was missed, and which
// handovers a report announced.
func (j *judge) judgeMisses() {
	for _, h := range j.handovers {
		if h.failure {
			continue
		}
		from := h.commandAt.Add(-ReportWindow)
		lo, _ := slices.BinarySearchFunc(j.reports, from, func(r Report, t time.Time) int { return r.Time.Compare(t) })
		var event, periodical, unresolved bool
		for _, r := range j.reports[lo:] {
			if r.Time.After(h.commandAt) {
				break
			}
			switch {
			case !r.Resolved:
				unresolved = true
			case r.Event == "":
				periodical = true
			default:
				event = true
			}
		}
		h.reported = event || periodical || unresolved
		if !h.predictedAt.IsZero() {
			continue
		}
		switch {
		case j.predictionEndedBefore(from, h.commandAt):
			h.miss = MissPredictionEnded
		case event:
			h.miss = MissReportNotPredicting
		case periodical:
			h.miss = MissPeriodicalReport
		case unresolved:
			h.miss = MissUnresolvedMeasID
		default:
			h.miss = MissNoReport
		}
	}
}

// predictionEndedBefore reports whether a prediction made in [from, to)
// ended without confirmation.
func (j *judge) predictionEndedBefore(from, to time.Time) bool {
	for _, p := range slices.Backward(j.tracker.made) {
		if p.PredictedAt.Before(from) {
			return false
		}
		if p.PredictedAt.Before(to) && p.Outcome != statemachine.OutcomeConfirmed {
			return true
		}
	}
	return false
}

// classes sums the handovers and predictions by class.
func (j *judge) classes() []ClassResult {
	type acc struct {
		ClassResult
		earliness, lead []time.Duration
	}
	byClass := map[string]*acc{}
	get := func(class string) *acc {
		a, ok := byClass[class]
		if !ok {
			a = &acc{ClassResult: ClassResult{Class: class, Misses: map[string]int{}}}
			byClass[class] = a
		}
		return a
	}
	for _, h := range j.handovers {
		for _, a := range []*acc{get(h.class), get(diag.AllClasses)} {
			if h.failure {
				a.Failures++
				a.Misses[h.miss]++
				continue
			}
			a.Handovers++
			if h.conditional {
				a.Conditional++
			}
			if h.reported {
				a.Reported++
			}
			if h.predictedAt.IsZero() {
				a.Misses[h.miss]++
				continue
			}
			a.Predicted++
			if h.reported {
				a.PredictedReported++
			}
			a.lead = append(a.lead, h.commandAt.Sub(h.predictedAt))
			if !h.executedAt.IsZero() {
				a.earliness = append(a.earliness, h.executedAt.Sub(h.predictedAt))
			}
		}
	}
	for _, p := range j.tracker.made {
		if p.Outcome == OutcomeUnresolved || p.Outcome == OutcomeSuperseded {
			// Neither right nor wrong: the handover it announced may
			// still come, or a later report of the same announcement
			// replaced it.
			continue
		}
		class := diag.HandoverClass(p.Source.Band, p.Target.Band)
		if p.Outcome == statemachine.OutcomeConfirmed {
			if h := j.confirmedBy(p); h != nil {
				class = h.class
			}
		}
		for _, a := range []*acc{get(class), get(diag.AllClasses)} {
			a.Predictions++
			if p.Outcome == statemachine.OutcomeConfirmed {
				a.Confirmed++
			}
		}
	}
	var out []ClassResult
	for _, class := range diag.ClassesWithAll() {
		a, ok := byClass[class]
		if !ok && class != diag.AllClasses {
			continue
		}
		if !ok {
			a = get(class)
		}
		r := a.ClassResult
		r.Precision = Ratio{Num: r.Confirmed, Den: r.Predictions}
		r.Recall = Ratio{Num: r.Predicted, Den: r.Handovers + r.Failures}
		r.RecallReported = Ratio{Num: r.PredictedReported, Den: r.Reported}
		r.EarlinessMean, r.EarlinessMedian = MeanMedian(a.earliness)
		r.LeadMean, r.LeadMedian = MeanMedian(a.lead)
		out = append(out, r)
	}
	return out
}

// confirmedBy is the handover a confirmed prediction announced.
func (j *judge) confirmedBy(p *Prediction) *handover {
	for _, h := range j.handovers {
		if !h.failure && h.predictedAt.Equal(p.PredictedAt) && !h.commandAt.Before(p.PredictedAt) {
			return h
		}
	}
	return nil
}

// MeanMedian of durations, rounded to the nanosecond; zero for none.
func MeanMedian(ds []time.Duration) (mean, median time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	var sum float64
	for _, d := range sorted {
		sum += float64(d)
	}
	mean = time.Duration(math.Round(sum / float64(len(sorted))))
	mid := len(sorted) / 2
	median = sorted[mid]
	if len(sorted)%2 == 0 {
		median = (sorted[mid-1] + sorted[mid]) / 2
	}
	return mean, median
}
