package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/replay"
	"github.com/m2ho/m2ho/pkg/statemachine"
	"github.com/m2ho/m2ho/test/emu"
)

// Handover predictors compared in Tables 4 and 5 of the paper.
const (
	// PredictorM2HO is m2hod's predictor as it runs by default (the
	// learning predictor, Algorithm 1 its prior): the run's signalling
	// replayed through statemachine.Machine. A prediction is correct when
	// the machine confirms it (a handover command, or a completion the log
	// announced no command for, arrives while it is pending) and a
	// handover of the ground truth is under way at that moment.
	PredictorM2HO = "m2ho"
	// PredictorNaive is the paper's HO-Naive: every measurement report,
	// whatever its event, predicts a handover. It is correct when a
	// handover's command comes at or after the report and its execution
	// within NaiveWindow of it.
	PredictorNaive = "ho_naive"
	// PredictorAtCommand is "No Pred." of Table 5: the handover command is
	// the first indication, and it is correct when a handover of the
	// ground truth is under way at that moment.
	PredictorAtCommand = "react_at_command"
)

// predictorOrder is the row order of Table 4 (baselines first, as the
// paper) and of PredictionResult.Predictors.
var predictorOrder = []string{PredictorNaive, PredictorAtCommand, PredictorM2HO}

// predictorLabels are the names the paper's tables use.
var predictorLabels = map[string]string{
	PredictorM2HO:      "M2HO",
	PredictorNaive:     "HO-Naive",
	PredictorAtCommand: "No Pred.",
}

// NaiveWindow is how long after a measurement report a handover may
// execute and still count as the one HO-Naive predicted: the longest
// report-to-execution interval of the paper's measurements (310.2 ms,
// section 4.2; data/handover-timing.md): every report that led to a
// handover in those traces falls inside it, and a report further ahead of
// a handover than any measured one is not its announcement.
const NaiveWindow = 310200 * time.Microsecond

// matchTolerance absorbs timestamps a tool rounded to the millisecond
// when a signalling time is matched to a ground-truth time; handovers of
// one run are much further apart.
const matchTolerance = time.Millisecond

// Outcomes of a replayed M2HO prediction besides the machine's own, as
// the replay names them.
const (
	OutcomeSuperseded = replay.OutcomeSuperseded
	OutcomeDropped    = replay.OutcomeDropped
	OutcomeUnresolved = replay.OutcomeUnresolved
)

// Reasons a signalling record is skipped, besides diag's parse reasons.
const (
	skipNoTime           = "no_time"
	skipOutcomeUnmatched = "outcome_without_prediction"
)

// Ratio is a count over a total, kept as both so that tables can show
// "93.8 (45/48)"; the replay's, so that every prediction table prints
// the same way.
type Ratio = replay.Ratio

// ClassPrediction is how one predictor did on one handover class (or on
// all of them, diag.AllClasses).
//
// A prediction's class is that of the handover it correctly predicted;
// a wrong prediction's class is made of the bands it names: M2HO's
// serving cell and predicted target, a command's source and target, a
// report's serving cell and neighbour (a report naming no neighbour
// describes the serving cell alone and counts as intra-band).
type ClassPrediction struct {
	Class string `json:"class"`
	// Precision is correct predictions over predictions made.
	Precision Ratio `json:"precision"`
	// Recall is handovers correctly predicted at or before their command
	// over every handover and radio link failure: failures come without
	// a measurement report or command (the paper's "handovers without
	// measurement reports") and are never predicted.
	Recall Ratio `json:"recall"`
	// RecallHandovers is Recall without the radio link failures.
	RecallHandovers Ratio `json:"recall_handovers"`
	// Earliness is execution minus the first correct prediction of a
	// handover, over the correctly predicted ones (Recall.Num of them).
	EarlinessMean   time.Duration `json:"earliness_mean_ns"`
	EarlinessMedian time.Duration `json:"earliness_median_ns"`
}

// PredictorResult is one predictor over every run.
type PredictorResult struct {
	Predictor string `json:"predictor"`
	// Classes are in the paper's order, diag.AllClasses last; a class with
	// neither handovers nor predictions is left out.
	Classes []ClassPrediction `json:"classes"`
	// Outcomes counts M2HO's predictions by outcome (the machine's, or
	// OutcomeSuperseded, OutcomeDropped, OutcomeUnresolved).
	Outcomes map[string]int `json:"outcomes,omitempty"`
}

// Class returns the row of class, if there is one.
func (p *PredictorResult) Class(class string) (ClassPrediction, bool) {
	i := slices.IndexFunc(p.Classes, func(c ClassPrediction) bool { return c.Class == class })
	if i < 0 {
		return ClassPrediction{}, false
	}
	return p.Classes[i], true
}

// HandoverPrediction is one handover or radio link failure of a run and
// how early each predictor that predicted it did so.
type HandoverPrediction struct {
	Run       int           `json:"run"`
	Scenario  string        `json:"scenario"`
	Index     int           `json:"index"`
	Procedure string        `json:"procedure"`
	Class     string        `json:"class"`
	ExecAt    time.Duration `json:"exec_ns"`
	// Earliness by predictor, for those that predicted it.
	Earliness map[string]time.Duration `json:"earliness_ns,omitempty"`
}

// PredictionResult is the evaluation of handover prediction over runs.
type PredictionResult struct {
	Runs       int                  `json:"runs"`
	Predictors []PredictorResult    `json:"predictors"`
	Handovers  []HandoverPrediction `json:"handovers"`
	// Skipped counts signalling records the replay could not use, by
	// reason (diag's parse reasons, no_time), and machine outcomes that
	// matched no prediction.
	Skipped map[string]int `json:"skipped,omitempty"`
	// Live is what the daemons of the runs counted themselves, when the
	// caller read their metrics (ReadLivePredictionFiles).
	Live *LivePrediction `json:"live,omitempty"`
}

// Predictor returns the result of a predictor, if evaluated.
func (r *PredictionResult) Predictor(name string) (*PredictorResult, bool) {
	for i := range r.Predictors {
		if r.Predictors[i].Predictor == name {
			return &r.Predictors[i], true
		}
	}
	return nil, false
}

// scoredPrediction is one prediction of a run, judged against its ground
// truth.
type scoredPrediction struct {
	// at is when it was made, from the run's start.
	at    time.Duration
	class string
	// handover is the index of the ground-truth record it correctly
	// predicted, -1 when it was wrong.
	handover int
}

// EvaluatePrediction replays every run's signalling through M2HO's
// state machine and the two baselines and scores them against the runs'
// ground truth. Each run gets a fresh machine and estimator, as each
// testbed run starts a fresh m2hod. Malformed signalling records are
// counted in Skipped and left out.
func EvaluatePrediction(truths []*emu.GroundTruth) (*PredictionResult, error) {
	res := &PredictionResult{Runs: len(truths), Skipped: map[string]int{}}
	acc := map[string]*predictorAccumulator{}
	for _, name := range predictorOrder {
		acc[name] = newPredictorAccumulator()
	}
	outcomes := map[string]int{}
	for run, truth := range truths {
		switch {
		case truth == nil:
			return nil, fmt.Errorf("run %d: no ground truth", run)
		case len(truth.Signalling) == 0 && len(truth.Handovers) > 0:
			// Every handover and failure is signalled: a ground truth
			// without signalling predates its recording, and would score
			// as if nothing had been predicted.
			return nil, fmt.Errorf("run %d (%s): %d handovers but no signalling recorded", run, truth.Scenario, len(truth.Handovers))
		}
		events := parseSignalling(truth, res.Skipped)
		made, err := replayM2HO(events, res.Skipped)
		if err != nil {
			return nil, fmt.Errorf("run %d (%s): %w", run, truth.Scenario, err)
		}
		for _, p := range made {
			outcomes[p.Outcome]++
		}
		scored := map[string][]scoredPrediction{
			PredictorM2HO:      scoreM2HO(truth, made),
			PredictorNaive:     scoreNaive(truth, events),
			PredictorAtCommand: scoreAtCommand(truth, events),
		}
		res.Handovers = append(res.Handovers, handoverPredictions(run, truth, scored)...)
		for name, preds := range scored {
			acc[name].addRun(truth, preds)
		}
	}
	for _, name := range predictorOrder {
		pr := PredictorResult{Predictor: name, Classes: acc[name].classes()}
		if name == PredictorM2HO {
			pr.Outcomes = outcomes
		}
		res.Predictors = append(res.Predictors, pr)
	}
	return res, nil
}

// parseSignalling decodes a run's signalling in time order; records that
// do not decode or carry no time are counted by reason and left out.
func parseSignalling(truth *emu.GroundTruth, skipped map[string]int) []diag.Event {
	events := make([]diag.Event, 0, len(truth.Signalling))
	for _, raw := range truth.Signalling {
		ev, err := diag.ParseJSON(raw)
		switch {
		case err != nil:
			skipped[diag.ErrorReason(err, diag.ReasonJSONSyntax)]++
		case ev.Time.IsZero():
			// The emulator stamps every event; without a time the
			// record cannot be placed on the run's timeline.
			skipped[skipNoTime]++
		default:
			events = append(events, ev)
		}
	}
	slices.SortStableFunc(events, func(a, b diag.Event) int { return a.Time.Compare(b.Time) })
	return events
}

// replayM2HO runs the events through a fresh machine and estimator with
// the daemon's default configuration, on the run's clock, and returns
// its predictions. Outcomes that matched no prediction are counted in
// skipped.
func replayM2HO(events []diag.Event, skipped map[string]int) ([]*replay.Prediction, error) {
	made, unmatched, err := replay.Predictions(events, replay.Options{})
	if err != nil {
		return nil, err
	}
	if unmatched > 0 {
		skipped[skipOutcomeUnmatched] += unmatched
	}
	return made, nil
}

// scoreM2HO judges the machine's predictions: correct when confirmed
// while a ground-truth handover was under way (from its command to its
// completion).
func scoreM2HO(truth *emu.GroundTruth, made []*replay.Prediction) []scoredPrediction {
	out := make([]scoredPrediction, 0, len(made))
	for _, p := range made {
		s := scoredPrediction{
			at:       p.PredictedAt.Sub(truth.Start),
			class:    diag.HandoverClass(p.Source.Band, p.Target.Band),
			handover: -1,
		}
		if p.Outcome == statemachine.OutcomeConfirmed {
			s.judge(truth, handoverUnderWay(truth, p.ResolvedAt.Sub(truth.Start)))
		}
		out = append(out, s)
	}
	return out
}

// scoreNaive makes every measurement report a prediction.
func scoreNaive(truth *emu.GroundTruth, events []diag.Event) []scoredPrediction {
	var out []scoredPrediction
	for _, ev := range events {
		if ev.Type != diag.TypeMeasReport {
			continue
		}
		target := ev.Neighbor.Band
		if ev.Neighbor.IsZero() {
			target = ev.Serving.Band
		}
		s := scoredPrediction{at: ev.Time.Sub(truth.Start), class: diag.HandoverClass(ev.Serving.Band, target), handover: -1}
		s.judge(truth, handoverWithin(truth, s.at, NaiveWindow))
		out = append(out, s)
	}
	return out
}

// scoreAtCommand makes every handover command a prediction.
func scoreAtCommand(truth *emu.GroundTruth, events []diag.Event) []scoredPrediction {
	var out []scoredPrediction
	for _, ev := range events {
		if ev.Type != diag.TypeHOCommand {
			continue
		}
		s := scoredPrediction{at: ev.Time.Sub(truth.Start), class: diag.HandoverClass(ev.Source.Band, ev.Target.Band), handover: -1}
		s.judge(truth, handoverUnderWay(truth, s.at))
		out = append(out, s)
	}
	return out
}

// judge marks the prediction correct for the handover at index i (none
// when i < 0), taking the handover's class.
func (s *scoredPrediction) judge(truth *emu.GroundTruth, i int) {
	if i < 0 {
		return
	}
	s.handover, s.class = i, truth.Handovers[i].Class
}

// handoverUnderWay is the index of the handover whose command-to-
// completion span holds t, or -1.
func handoverUnderWay(truth *emu.GroundTruth, t time.Duration) int {
	return slices.IndexFunc(truth.Handovers, func(h emu.HandoverRecord) bool {
		return h.Procedure == emu.ProcedureHandover && t >= h.CommandAt-matchTolerance && t <= h.CompleteAt+matchTolerance
	})
}

// handoverWithin is the index of the first handover commanded at or
// after t and executed within window of t, or -1.
func handoverWithin(truth *emu.GroundTruth, t, window time.Duration) int {
	return slices.IndexFunc(truth.Handovers, func(h emu.HandoverRecord) bool {
		return h.Procedure == emu.ProcedureHandover && t <= h.CommandAt+matchTolerance && h.ExecAt-t <= window
	})
}

// firstPredictions maps each correctly predicted handover to the time of
// its first correct prediction.
func firstPredictions(preds []scoredPrediction) map[int]time.Duration {
	first := map[int]time.Duration{}
	for _, p := range preds {
		if p.handover < 0 {
			continue
		}
		if at, ok := first[p.handover]; !ok || p.at < at {
			first[p.handover] = p.at
		}
	}
	return first
}

// handoverPredictions lists a run's handovers with each predictor's
// earliness.
func handoverPredictions(run int, truth *emu.GroundTruth, scored map[string][]scoredPrediction) []HandoverPrediction {
	out := make([]HandoverPrediction, len(truth.Handovers))
	for i, h := range truth.Handovers {
		out[i] = HandoverPrediction{Run: run, Scenario: truth.Scenario, Index: h.Index, Procedure: h.Procedure, Class: h.Class, ExecAt: h.ExecAt}
	}
	for name, preds := range scored {
		for i, at := range firstPredictions(preds) {
			if out[i].Earliness == nil {
				out[i].Earliness = map[string]time.Duration{}
			}
			out[i].Earliness[name] = truth.Handovers[i].ExecAt - at
		}
	}
	return out
}

// classCounts accumulates one class of one predictor.
type classCounts struct {
	predictions, correct int
	records, handovers   int
	predicted            int
	earliness            []time.Duration
}

// predictorAccumulator sums one predictor over runs, by class.
type predictorAccumulator struct {
	byClass map[string]*classCounts
}

func newPredictorAccumulator() *predictorAccumulator {
	return &predictorAccumulator{byClass: map[string]*classCounts{}}
}

func (a *predictorAccumulator) counts(class string) *classCounts {
	c, ok := a.byClass[class]
	if !ok {
		c = &classCounts{}
		a.byClass[class] = c
	}
	return c
}

// addRun adds one run's predictions and handovers to the class of each
// and to the overall row.
func (a *predictorAccumulator) addRun(truth *emu.GroundTruth, preds []scoredPrediction) {
	for _, p := range preds {
		for _, c := range []*classCounts{a.counts(p.class), a.counts(diag.AllClasses)} {
			c.predictions++
			if p.handover >= 0 {
				c.correct++
			}
		}
	}
	first := firstPredictions(preds)
	for i, h := range truth.Handovers {
		at, predicted := first[i]
		for _, c := range []*classCounts{a.counts(h.Class), a.counts(diag.AllClasses)} {
			c.records++
			if h.Procedure == emu.ProcedureHandover {
				c.handovers++
			}
			if predicted {
				c.predicted++
				c.earliness = append(c.earliness, h.ExecAt-at)
			}
		}
	}
}

// classes renders the rows in the paper's order.
func (a *predictorAccumulator) classes() []ClassPrediction {
	var out []ClassPrediction
	for _, class := range diag.ClassesWithAll() {
		c, ok := a.byClass[class]
		if !ok {
			continue
		}
		row := ClassPrediction{
			Class:           class,
			Precision:       Ratio{Num: c.correct, Den: c.predictions},
			Recall:          Ratio{Num: c.predicted, Den: c.records},
			RecallHandovers: Ratio{Num: c.predicted, Den: c.handovers},
		}
		row.EarlinessMean, row.EarlinessMedian = replay.MeanMedian(c.earliness)
		out = append(out, row)
	}
	return out
}

// WritePredictionTable prints Table 4 of the paper in Markdown: precision
// p and recall r in percent with their counts, per handover class, one
// row per predictor, and the daemons' own totals when res.Live is set.
func WritePredictionTable(w io.Writer, res *PredictionResult) error {
	classes := diag.ClassesWithAll()
	var b strings.Builder
	b.WriteString("| Predictor |")
	for _, class := range classes {
		fmt.Fprintf(&b, " %s p | %s r |", diag.ClassLabel(class), diag.ClassLabel(class))
	}
	fmt.Fprintf(&b, " %s r, handovers only |\n|---|", diag.AllClassesLabel)
	b.WriteString(strings.Repeat("---|", 2*len(classes)+1))
	b.WriteString("\n")
	for _, name := range predictorOrder {
		p, ok := res.Predictor(name)
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "| %s |", predictorLabels[name])
		for _, class := range classes {
			row, _ := p.Class(class)
			fmt.Fprintf(&b, " %s | %s |", row.Precision, row.Recall)
		}
		overall, _ := p.Class(diag.AllClasses)
		fmt.Fprintf(&b, " %s |\n", overall.RecallHandovers)
	}
	if l := res.Live; l != nil {
		fmt.Fprintf(&b, "| M2HO live (m2hod) |%s %s | %s | - |\n",
			strings.Repeat(" - | - |", len(classes)-1), l.Precision(), l.Recall())
	}
	fmt.Fprintf(&b, "\np: correct predictions / predictions; r: handovers predicted at or before their command / handovers and radio link failures (%% and counts). HO-Naive counts a report correct when a handover is commanded after it and executes within %v.", NaiveWindow)
	if res.Live != nil {
		fmt.Fprintf(&b, " Live: the daemons' own counters over %d runs, confirmed / outcomes of %s and confirmed / %s.", res.Live.Runs, metricPredictions, metricHandovers)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteEarlinessTable prints Table 5 of the paper in Markdown: mean and
// median earliness (execution minus prediction) in milliseconds over the
// correctly predicted handovers of each class.
func WriteEarlinessTable(w io.Writer, res *PredictionResult) error {
	columns := []string{PredictorM2HO, PredictorAtCommand, PredictorNaive}
	var b strings.Builder
	b.WriteString("| Handover |")
	for _, name := range columns {
		fmt.Fprintf(&b, " %s |", predictorLabels[name])
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(columns)) + "\n")
	for _, class := range diag.ClassesWithAll() {
		fmt.Fprintf(&b, "| %s |", diag.ClassLabel(class))
		for _, name := range columns {
			b.WriteString(" " + earlinessCell(res, name, class) + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\nEarliness (ms) from prediction to execution: mean / median (correctly predicted handovers).\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func earlinessCell(res *PredictionResult, predictor, class string) string {
	p, ok := res.Predictor(predictor)
	if !ok {
		return "-"
	}
	row, ok := p.Class(class)
	if !ok || row.Recall.Num == 0 {
		return "- (n=0)"
	}
	return fmt.Sprintf("%.1f / %.1f (n=%d)", millis(row.EarlinessMean), millis(row.EarlinessMedian), row.Recall.Num)
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Metrics of m2hod the live cross-check reads (pkg/metrics).
const (
	metricPredictions = "m2hod_predictions_total"
	metricHandovers   = "m2hod_handovers_total"
)

// LivePrediction is what m2hod counted itself during runs, from the
// metrics it left in each run directory (m2hod-metrics.txt).
type LivePrediction struct {
	Runs        int `json:"runs"`
	Confirmed   int `json:"confirmed"`
	CancelledA1 int `json:"cancelled_a1"`
	TimedOut    int `json:"timed_out"`
	// Handovers is every handover the daemon executed, the
	// re-establishment after a radio link failure included (it sees that
	// as a completion no command announced).
	Handovers int `json:"handovers"`
}

// Made is the number of predictions with an outcome (one still pending
// when the metrics were taken is not counted yet).
func (l LivePrediction) Made() int { return l.Confirmed + l.CancelledA1 + l.TimedOut }

// Unpredicted is the handovers executed without a confirmed prediction
// (the daemon counts no such metric itself).
func (l LivePrediction) Unpredicted() int { return max(l.Handovers-l.Confirmed, 0) }

// Precision is confirmed over made.
func (l LivePrediction) Precision() Ratio { return Ratio{Num: l.Confirmed, Den: l.Made()} }

// Recall is confirmed over executed handovers; a confirmed prediction
// whose handover timed out in execution is not one.
func (l LivePrediction) Recall() Ratio {
	return Ratio{Num: min(l.Confirmed, l.Handovers), Den: l.Handovers}
}

// MarshalJSON adds the derived counts and ratios to the counters.
func (l LivePrediction) MarshalJSON() ([]byte, error) {
	type counters LivePrediction
	return json.Marshal(struct {
		counters
		Made        int   `json:"made"`
		Unpredicted int   `json:"unpredicted"`
		Precision   Ratio `json:"precision"`
		Recall      Ratio `json:"recall"`
	}{counters(l), l.Made(), l.Unpredicted(), l.Precision(), l.Recall()})
}

// Add sums o into l.
func (l *LivePrediction) Add(o LivePrediction) {
	l.Runs += o.Runs
	l.Confirmed += o.Confirmed
	l.CancelledA1 += o.CancelledA1
	l.TimedOut += o.TimedOut
	l.Handovers += o.Handovers
}

// ReadLivePrediction parses one run's metrics in the Prometheus text
// format. Outcomes m2hod does not define are ignored.
func ReadLivePrediction(r io.Reader) (LivePrediction, error) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return LivePrediction{}, fmt.Errorf("parsing m2hod metrics: %w", err)
	}
	live := LivePrediction{Runs: 1}
	predictions, ok := families[metricPredictions]
	if !ok {
		return LivePrediction{}, fmt.Errorf("m2hod metrics: no %s", metricPredictions)
	}
	for _, m := range predictions.GetMetric() {
		n := int(math.Round(m.GetCounter().GetValue()))
		for _, label := range m.GetLabel() {
			if label.GetName() != "outcome" {
				continue
			}
			switch label.GetValue() {
			case statemachine.OutcomeConfirmed:
				live.Confirmed += n
			case statemachine.OutcomeCancelledA1:
				live.CancelledA1 += n
			case statemachine.OutcomeTimedOut:
				live.TimedOut += n
			}
		}
	}
	for _, m := range families[metricHandovers].GetMetric() {
		live.Handovers += int(math.Round(m.GetCounter().GetValue()))
	}
	return live, nil
}

// ReadLivePredictionFiles sums the metrics files of several runs. A file
// that cannot be read or parsed is an error naming it; a missing one
// wraps fs.ErrNotExist.
func ReadLivePredictionFiles(paths []string) (LivePrediction, error) {
	var total LivePrediction
	for _, path := range paths {
		live, err := readLivePredictionFile(path)
		if err != nil {
			return LivePrediction{}, err
		}
		total.Add(live)
	}
	return total, nil
}

func readLivePredictionFile(path string) (LivePrediction, error) {
	f, err := os.Open(path)
	if err != nil {
		return LivePrediction{}, fmt.Errorf("m2hod metrics: %w", err)
	}
	defer f.Close()
	live, err := ReadLivePrediction(f)
	if err != nil {
		return LivePrediction{}, fmt.Errorf("%s: %w", path, err)
	}
	return live, nil
}
