package eval

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/report"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/testbed"
)

// The BBR pair, whose ratio is a goal of its own: m2ho must not slow a
// sender that does not shrink on loss.
const (
	variantBBR     = "bbr"
	variantBBRM2HO = "bbr+m2ho"
)

// Analysis is the evaluation's results.
type Analysis struct {
	UnitsFinished int `json:"units_finished"`
	UnitsTotal    int `json:"units_total"`
	// RunTime is the time the finished units took, First and Last when
	// the first and the last of them finished.
	RunTime time.Duration `json:"run_time_ns"`
	First   time.Time     `json:"first_finished"`
	Last    time.Time     `json:"last_finished"`
	// Parallel is the most units that ran at once (Options.Parallel).
	Parallel int `json:"parallel"`
	// Reference is the variant every other is compared with, Headline
	// the m2ho variant whose gains are the goals.
	Reference string `json:"reference"`
	Headline  string `json:"headline"`
	// Scenarios the reference finished; Runs the scenarios each variant
	// finished.
	Scenarios []string       `json:"scenarios"`
	Runs      map[string]int `json:"runs"`
	// Paired compares each variant with the reference, and BBRPaired
	// BBR + m2ho with BBR, on the scenarios both finished.
	Paired    map[string]Paired `json:"paired"`
	BBRPaired *Paired           `json:"bbr_paired,omitempty"`
	// ByMobility compares the headline variant with the reference on
	// each mobility pattern's scenarios alone.
	ByMobility map[string]Paired `json:"paired_by_mobility"`
	// groups are the finished units per variant.
	groups map[string][]UnitResult
	// Summaries are per variant, a row per handover class and overall.
	Summaries map[string][]report.Summary `json:"summaries"`
	// Handovers per variant, for the plots.
	Handovers map[string][]report.Handover `json:"-"`
	Daemon    map[string]DaemonSummary     `json:"daemon"`
	Fidelity  map[string]FidelitySummary   `json:"fidelity"`
	// Prediction replays the signalling of the corpus through Algorithm 1
	// and the baselines (Tables 4 and 5), with the live counters of the
	// CUBIC + m2ho daemons.
	Prediction *report.PredictionResult `json:"prediction,omitempty"`
	// PredictionPrecision and PredictionRecall are m2ho's overall
	// figures with their intervals over the runs; recall over handovers,
	// as the paper counts it: a radio link failure has no command to
	// predict.
	PredictionPrecision Interval `json:"prediction_precision"`
	PredictionRecall    Interval `json:"prediction_recall"`
	// DupAcks is Table 3 for the variants whose daemon suppresses
	// duplicate ACKs; DupAckModel checks the receiver model on the others,
	// where nothing drops them.
	DupAcks     []DupAckResult            `json:"dupacks"`
	DupAckModel []report.DupAckModelCheck `json:"dupack_model"`
	// Cuts are each variant's window cuts over the scenarios it shares
	// with the reference, and the reference's over the same scenarios.
	Cuts map[string]PairedCuts `json:"window_cuts"`
	// Phases are the headline variant's bytes against the reference's by
	// phase of the handovers, grouped by loss outcome.
	Phases []PhaseCost `json:"phase_costs"`
	Goals  []Goal      `json:"goals"`
}

// PairedCuts are a variant's window cuts and the reference's, summed over
// the scenarios both finished.
type PairedCuts struct {
	Scenarios int         `json:"scenarios"`
	Variant   report.Cuts `json:"variant"`
	Reference report.Cuts `json:"reference"`
}

func pairCuts(ref, v []UnitResult) PairedCuts {
	var p PairedCuts
	sameScenario(ref, v, func(r, u *UnitResult) {
		p.Scenarios++
		p.Variant, p.Reference = p.Variant.Add(u.Cuts), p.Reference.Add(r.Cuts)
	})
	return p
}

// DupAckResult is Table 3 for one variant, with the duplicate ACKs the
// datapath itself counted as suppressed.
type DupAckResult struct {
	report.DupAckSummary
	// EventPrecision and EventRecall are Table 3's total precision and
	// recall of congestion events with their intervals over the runs.
	EventPrecision Interval `json:"event_precision"`
	EventRecall    Interval `json:"event_recall"`
	// DatapathSuppressed sums the datapath's counter over the runs.
	DatapathSuppressed uint64 `json:"datapath_suppressed"`
}

// DaemonSummary is m2hod's cost over a variant's units.
type DaemonSummary struct {
	Units          int     `json:"units"`
	MeanCPUPercent float64 `json:"mean_cpu_percent"`
	MaxCPUPercent  float64 `json:"max_cpu_percent"`
	MaxPeakRSS     uint64  `json:"max_peak_rss_bytes"`
	Errors         int     `json:"errors"`
}

// FidelitySummary is how closely the emulator kept its schedule over a
// variant's units.
type FidelitySummary struct {
	WorstDownlinkP99 time.Duration `json:"worst_downlink_timing_p99_ns"`
	MeanDownlinkP99  time.Duration `json:"mean_downlink_timing_p99_ns"`
	SendErrors       uint64        `json:"send_errors"`
	// Implausible names the scenarios whose sender lost its state
	// (report.SenderLostState).
	Implausible []string `json:"implausible_cwnd"`
}

// implausibleRuns names the scenarios of units whose sender lost its
// state (report.SenderLostState).
func implausibleRuns(units []UnitResult) []string {
	var names []string
	for _, u := range units {
		if u.SenderLostState {
			names = append(names, u.Scenario.Name)
		}
	}
	return names
}

// Goal is one target of the evaluation and whether it was met.
type Goal struct {
	Name     string  `json:"name"`
	Target   string  `json:"target"`
	Measured string  `json:"measured"`
	Met      bool    `json:"met"`
	Value    float64 `json:"value"`
}

func analyse(m *Manifest, results []UnitResult) (*Analysis, error) {
	groups := byVariant(results)
	a := &Analysis{
		Reference: m.Variants[0], Headline: m.Variants[1],
		Summaries: map[string][]report.Summary{}, Handovers: map[string][]report.Handover{},
		Daemon: map[string]DaemonSummary{}, Fidelity: map[string]FidelitySummary{}, Paired: map[string]Paired{},
		Runs: map[string]int{}, Cuts: map[string]PairedCuts{}, groups: groups,
	}
	for _, r := range groups[a.Reference] {
		a.Scenarios = append(a.Scenarios, r.Scenario.Name)
	}
	for _, r := range results {
		a.RunTime += r.Done.Took
		if a.First.IsZero() || r.Done.Finished.Before(a.First) {
			a.First = r.Done.Finished
		}
		if r.Done.Finished.After(a.Last) {
			a.Last = r.Done.Finished
		}
		a.Parallel = max(a.Parallel, r.Done.Parallel, 1)
	}
	for _, v := range m.AllVariants() {
		units := groups[v]
		if len(units) == 0 {
			continue
		}
		a.Runs[v] = len(units)
		a.Cuts[v] = pairCuts(groups[a.Reference], units)
		if v != a.Reference {
			a.Paired[v] = comparePaired(a.Reference, groups[a.Reference], v, units)
		}
		hs := handovers(units)
		a.Handovers[v] = hs
		a.Summaries[v] = report.Summarize(v, hs)
		var fid FidelitySummary
		var ds DaemonSummary
		for _, u := range units {
			fid.WorstDownlinkP99 = max(fid.WorstDownlinkP99, u.Fidelity.DownlinkP99)
			fid.MeanDownlinkP99 += u.Fidelity.DownlinkP99 / time.Duration(len(units))
			fid.SendErrors += u.Fidelity.SendErrors
			if d := u.Daemon; d != nil {
				if d.Error != "" {
					ds.Errors++
					continue
				}
				ds.Units++
				ds.MeanCPUPercent += d.CPUPercent
				ds.MaxCPUPercent = max(ds.MaxCPUPercent, d.CPUPercent)
				ds.MaxPeakRSS = max(ds.MaxPeakRSS, d.PeakRSSBytes)
			}
		}
		fid.Implausible = implausibleRuns(units)
		a.Fidelity[v] = fid
		if ds.Units > 0 {
			ds.MeanCPUPercent /= float64(ds.Units)
		}
		if ds.Units+ds.Errors > 0 {
			a.Daemon[v] = ds
		}
	}
	if len(groups[a.Headline]) > 0 {
		a.Phases = pairPhases(groups[a.Reference], groups[a.Headline])
		a.ByMobility = pairByMobility(a.Reference, groups[a.Reference], a.Headline, groups[a.Headline], m.Mobilities)
	}
	if len(groups[variantBBR]) > 0 && len(groups[variantBBRM2HO]) > 0 {
		p := comparePaired(variantBBR, groups[variantBBR], variantBBRM2HO, groups[variantBBRM2HO])
		a.BBRPaired = &p
	}
	if err := a.evaluatePrediction(groups); err != nil {
		return nil, err
	}
	if err := a.evaluateDupAcks(m, groups); err != nil {
		return nil, err
	}
	a.Goals = append(append(goals(a), a.predictionGoals()...), a.dupAckGoals()...)
	return a, nil
}

// evaluateDupAcks fills Table 3 for every variant whose daemon suppresses
// duplicate ACKs and the model check for the rest.
func (a *Analysis) evaluateDupAcks(m *Manifest, groups map[string][]UnitResult) error {
	for _, name := range m.AllVariants() {
		units := groups[name]
		if len(units) == 0 {
			continue
		}
		v, err := testbed.ParseVariant(name)
		if err != nil {
			return err
		}
		runs := make([]report.DupAckRun, len(units))
		for i, u := range units {
			runs[i] = report.AnalyzeDupAcks(i, u.Truth)
		}
		summary := report.SummarizeDupAcks(name, runs)
		if !v.Suppresses() {
			a.DupAckModel = append(a.DupAckModel, report.CheckDupAckModel(summary))
			continue
		}
		res := DupAckResult{DupAckSummary: summary}
		var precision, recall []cluster
		for i, run := range runs {
			one := report.SummarizeDupAcks(name, []report.DupAckRun{run})
			overall, _ := one.Class(diag.AllClasses)
			p, r := overall.Events.Precision(), overall.Events.Recall()
			mobility := units[i].Scenario.Mobility
			precision = append(precision, cluster{num: float64(p.Num), den: float64(p.Den), stratum: mobility})
			recall = append(recall, cluster{num: float64(r.Num), den: float64(r.Den), stratum: mobility})
		}
		res.EventPrecision, res.EventRecall = ratioInterval(precision, 0), ratioInterval(recall, 0)
		for _, u := range units {
			n, err := datapathSuppressed(u.Dir)
			if err != nil {
				return err
			}
			res.DatapathSuppressed += n
		}
		a.DupAcks = append(a.DupAcks, res)
	}
	return nil
}

// datapathSuppressed reads the datapath's count of suppressed duplicate
// ACKs from the daemon's status at the end of a run.
func datapathSuppressed(dir string) (uint64, error) {
	var status struct {
		Datapath struct {
			Counters struct {
				DupACKsSuppressed uint64 `json:"dupack_suppressed"`
			} `json:"counters"`
		} `json:"datapath"`
	}
	if err := testbed.ReadJSON(filepath.Join(dir, testbed.M2hodStatusFile), &status); err != nil {
		return 0, fmt.Errorf("reading the daemon's status: %w", err)
	}
	return status.Datapath.Counters.DupACKsSuppressed, nil
}

func (a *Analysis) dupAckGoals() []Goal {
	for _, d := range a.DupAcks {
		if d.Variant != a.Headline {
			continue
		}
		overall, ok := d.Class(diag.AllClasses)
		if !ok {
			return nil
		}
		return []Goal{
			{Name: "duplicate-ACK handling precision (congestion events)", Target: ">= 90%",
				Measured: fmt.Sprintf("%s (%d/%d)", d.EventPrecision.Percent(false), overall.Events.Precision().Num, overall.Events.Precision().Den),
				Met:      d.EventPrecision.AtLeast(0.9), Value: d.EventPrecision.Value},
			{Name: "duplicate-ACK handling recall (congestion events)", Target: ">= 98%",
				Measured: fmt.Sprintf("%s (%d/%d)", d.EventRecall.Percent(false), overall.Events.Recall().Num, overall.Events.Recall().Den),
				Met:      d.EventRecall.AtLeast(0.98), Value: d.EventRecall.Value},
		}
	}
	return nil
}

// evaluatePrediction replays the headline m2ho variant's signalling: the
// signalling of a scenario is the same in every variant, and this one's
// daemons also report their own counts.
func (a *Analysis) evaluatePrediction(groups map[string][]UnitResult) error {
	units := groups[a.Headline]
	if len(units) == 0 {
		return nil
	}
	truths := make([]*emu.GroundTruth, len(units))
	metrics := make([]string, len(units))
	for i, u := range units {
		truths[i] = u.Truth
		metrics[i] = filepath.Join(u.Dir, testbed.M2hodMetricsFile)
	}
	res, err := report.EvaluatePrediction(truths)
	if err != nil {
		return fmt.Errorf("evaluating prediction: %w", err)
	}
	live, err := report.ReadLivePredictionFiles(metrics)
	if err != nil {
		return fmt.Errorf("reading the daemons' prediction counters: %w", err)
	}
	res.Live = &live
	a.Prediction = res
	mobilities := make([]string, len(units))
	for i, u := range units {
		mobilities[i] = u.Scenario.Mobility
	}
	a.PredictionPrecision, a.PredictionRecall, err = predictionIntervals(truths, mobilities)
	return err
}

// predictionIntervals are the intervals of M2HO's overall prediction
// precision and recall, resampling runs: each run's replay on its own;
// mobilities[i] is truths[i]'s scenario's pattern.
func predictionIntervals(truths []*emu.GroundTruth, mobilities []string) (precision, recall Interval, err error) {
	var p, r []cluster
	for i, truth := range truths {
		one, err := report.EvaluatePrediction([]*emu.GroundTruth{truth})
		if err != nil {
			return Interval{}, Interval{}, fmt.Errorf("evaluating prediction: %w", err)
		}
		if pr, ok := one.Predictor(report.PredictorM2HO); ok {
			if overall, ok := pr.Class(diag.AllClasses); ok {
				p = append(p, cluster{num: float64(overall.Precision.Num), den: float64(overall.Precision.Den), stratum: mobilities[i]})
				r = append(r, cluster{num: float64(overall.RecallHandovers.Num), den: float64(overall.RecallHandovers.Den), stratum: mobilities[i]})
			}
		}
	}
	return ratioInterval(p, 0), ratioInterval(r, 0), nil
}

func (a *Analysis) predictionGoals() []Goal {
	if a.Prediction == nil {
		return nil
	}
	overall, ok := m2hoOverall(a.Prediction)
	if !ok {
		return nil
	}
	pr, rc := a.PredictionPrecision, a.PredictionRecall
	return []Goal{
		{Name: "prediction precision (replay of the generated signalling)", Target: ">= 95%",
			Measured: fmt.Sprintf("%s (%d/%d)", pr.Percent(false), overall.Precision.Num, overall.Precision.Den), Met: pr.AtLeast(0.95), Value: pr.Value},
		{Name: "prediction recall over handovers (replay of the generated signalling)", Target: ">= 88%",
			Measured: fmt.Sprintf("%s (%d/%d; with radio link failures %d/%d)", rc.Percent(false), overall.RecallHandovers.Num, overall.RecallHandovers.Den,
				overall.Recall.Num, overall.Recall.Den), Met: rc.AtLeast(0.88), Value: rc.Value},
	}
}

// summary finds a variant's row of a class.
func (a *Analysis) summary(variant, class string) (report.Summary, bool) {
	for _, s := range a.Summaries[variant] {
		if s.Class == class {
			return s, true
		}
	}
	return report.Summary{}, false
}

// generatedSource says where the runs' generated duplicate ACKs come
// from: the receiver's own ACKs read before the UE's datapath, the
// receiver model, or both in a mixed evaluation.
func generatedSource(groups map[string][]UnitResult) string {
	sources := map[string]bool{}
	for _, units := range groups {
		for _, u := range units {
			sources[cmp.Or(u.Truth.GeneratedFrom, emu.GeneratedFromModel)] = true
		}
	}
	switch {
	case len(sources) > 1:
		return "the receiver's ACKs read before the UE where the receiver is behind it, the receiver model elsewhere"
	case sources[emu.GeneratedFromLANTap]:
		return "the receiver's own ACKs read on the UE's LAN side, before its datapath: exact"
	}
	return "the emulator's receiver model"
}

// pair compares variant x with base on the scenarios both finished.
func (a *Analysis) pair(x, base string) (Paired, bool) {
	if len(a.groups[x]) == 0 || len(a.groups[base]) == 0 {
		return Paired{}, false
	}
	if p, ok := a.Paired[x]; ok && base == a.Reference {
		return p, true
	}
	return comparePaired(base, a.groups[base], x, a.groups[x]), true
}

// pairByMobility compares a variant with the reference on each mobility
// pattern's scenarios alone; a pattern neither ran is left out.
func pairByMobility(refName string, ref []UnitResult, name string, v []UnitResult, mobilities []string) map[string]Paired {
	ofMobility := func(units []UnitResult, mobility string) []UnitResult {
		var out []UnitResult
		for _, u := range units {
			if u.Scenario.Mobility == mobility {
				out = append(out, u)
			}
		}
		return out
	}
	out := map[string]Paired{}
	for _, mobility := range mobilities {
		r, u := ofMobility(ref, mobility), ofMobility(v, mobility)
		if p := comparePaired(refName, r, name, u); p.Scenarios > 0 {
			out[mobility] = p
		}
	}
	return out
}

// maxGainHalfWidth is the widest the overall gain's interval may be for
// the evaluation to tell a gain of a few points from its noise: ±5
// points.
const maxGainHalfWidth = 0.05

// scenariosFor is about how many scenarios like those behind iv would
// narrow its interval to halfWidth: an interval over independent
// scenarios narrows with the square root of their number.
func scenariosFor(iv Interval, halfWidth float64) int {
	return int(math.Ceil(float64(iv.Scenarios) * math.Pow(iv.HalfWidth()/halfWidth, 2)))
}

// goals checks the throughput, convergence, loss and never-hurts targets
// on the paired comparison of the headline variant with the reference; a
// goal is met when its whole 95% interval meets it. Prediction and
// duplicate-ACK targets are checked where those are computed.
func goals(a *Analysis) []Goal {
	var out []Goal
	p, ok := a.Paired[a.Headline]
	if !ok {
		return nil
	}
	ref := report.Title(a.Reference)
	gain := p.Gain[diag.AllClasses]
	out = append(out, Goal{Name: "handover throughput over " + ref + ", overall", Target: ">= +46%, whole interval above +30%",
		Measured: gain.Percent(true), Met: gain.Value >= 0.46 && gain.AtLeast(0.30), Value: gain.Value})
	if gain.Valid {
		out = append(out, Goal{Name: "width of the overall gain's interval", Target: fmt.Sprintf("at most ±%.0f points", 100*maxGainHalfWidth),
			Measured: fmt.Sprintf("±%.1f points over %d scenarios (about %d for ±%.0f at this spread)", 100*gain.HalfWidth(), gain.Scenarios,
				scenariosFor(gain, maxGainHalfWidth), 100*maxGainHalfWidth),
			Met: gain.HalfWidth() <= maxGainHalfWidth, Value: gain.HalfWidth()})
	}
	if g, ok := p.Gain[diag.ClassSub6MmWave]; ok {
		out = append(out, Goal{Name: "handover throughput over " + ref + ", sub6 to mmWave", Target: ">= +100%",
			Measured: g.Percent(true), Met: g.AtLeast(1), Value: g.Value})
	}
	out = append(out, Goal{Name: "convergence time relative to " + ref, Target: "<= 33%",
		Measured: p.ConvergenceRatio.Percent(false), Met: p.ConvergenceRatio.AtMost(1.0 / 3), Value: p.ConvergenceRatio.Value})
	out = append(out, Goal{Name: "loss-free handovers with m2ho", Target: ">= 85%",
		Measured: fmt.Sprintf("%s (%s: %s)", p.LossFree.Percent(false), ref, p.ReferenceLossFree.Percent(false)),
		Met:      p.LossFree.AtLeast(0.85), Value: p.LossFree.Value})
	var worse []string
	for _, class := range diag.HandoverClasses {
		if g, ok := p.Gain[class]; ok && !g.AtLeast(-0.02) {
			worse = append(worse, fmt.Sprintf("%s %s", class, g.Percent(true)))
		}
	}
	measured := "none"
	if len(worse) > 0 {
		measured = strings.Join(worse, "; ")
	}
	out = append(out, Goal{Name: "no handover class where m2ho may be worse than " + ref, Target: "every class's interval above -2%",
		Measured: measured, Met: len(worse) == 0, Value: float64(len(worse))})
	if b := a.BBRPaired; b != nil {
		g := b.Gain[diag.AllClasses]
		ratio := Interval{Value: 1 + g.Value, Low: 1 + g.Low, High: 1 + g.High, Scenarios: g.Scenarios, Valid: g.Valid}
		out = append(out, Goal{Name: "BBR + m2ho relative to BBR", Target: ">= 99%",
			Measured: ratio.Percent(false), Met: ratio.AtLeast(0.99), Value: ratio.Value})
	}
	return out
}

// writeTable2 prints the paper's Table 2 for one m2ho variant against
// baselines: throughput (Mbit/s) and convergence time t (s) per class over
// the variant's runs, with eta0 = (m2ho - algo) / algo for throughput and
// eta1 = (algo - m2ho) / algo for convergence, both paired on the
// scenarios the two share, with their 95% intervals.
func writeTable2(w io.Writer, a *Analysis, m2ho string, baselines []string, pair func(m2ho, base string) (Paired, bool)) {
	fmt.Fprintf(w, "| HO type | %s Tput | %s t |", report.Title(m2ho), report.Title(m2ho))
	sep := "|---|---:|---:|"
	for _, b := range baselines {
		fmt.Fprintf(w, " %s Tput | η0 (%%) | t | η1 (%%) |", report.Title(b))
		sep += "---:|---:|---:|---:|"
	}
	fmt.Fprintf(w, "\n%s\n", sep)
	for _, class := range diag.ClassesWithAll() {
		x, ok := a.summary(m2ho, class)
		if !ok {
			continue
		}
		fmt.Fprintf(w, "| %s (%d) | %.1f | %.1f |", diag.ClassLabel(class), x.Handovers, x.ThroughputBps/1e6, x.ConvergenceTime.Seconds())
		for _, b := range baselines {
			s, ok := a.summary(b, class)
			p, paired := pair(m2ho, b)
			if !ok || !paired {
				fmt.Fprint(w, " | | | |")
				continue
			}
			eta0 := p.Gain[class]
			conv := p.ConvergenceByClass[class]
			eta1 := Interval{Value: 1 - conv.Value, Low: 1 - conv.High, High: 1 - conv.Low, Valid: conv.Valid}
			fmt.Fprintf(w, " %.1f | %s | %.1f | %s |", s.ThroughputBps/1e6, eta0.Percent(true), s.ConvergenceTime.Seconds(), eta1.Percent(true))
		}
		fmt.Fprintln(w)
	}
}

// writeOutcomes prints, per variant, the overall handover outcomes over
// its runs, and its throughput against the reference on the scenarios
// both ran, with the 95% interval.
func writeOutcomes(w io.Writer, a *Analysis, variants []string) {
	fmt.Fprintf(w, "| variant | scenarios | handovers | tput (Mbit/s) | vs %s (paired, 95%% CI) | whole runs vs %s | convergence (s) | converged | loss-free | retrans/HO | cwnd drop | buffer drops |\n",
		report.Title(a.Reference), report.Title(a.Reference))
	fmt.Fprintln(w, "|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
	for _, v := range variants {
		s, ok := a.summary(v, diag.AllClasses)
		if !ok {
			continue
		}
		vs, runs := "reference", "reference"
		if p, ok := a.Paired[v]; ok {
			vs = fmt.Sprintf("%s (%d scenarios)", p.Gain[diag.AllClasses].Percent(true), p.Scenarios)
			runs = p.RunGain.Percent(true)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %.1f | %s | %s | %.2f | %d | %d (%.1f%%) | %.1f | %.0f%% | %d |\n",
			report.Title(v), a.Runs[v], s.Handovers, s.ThroughputBps/1e6, vs, runs, s.ConvergenceTime.Seconds(), s.Converged,
			s.LossFree, 100*float64(s.LossFree)/float64(s.Handovers), s.Retransmissions, 100*s.CwndDrop, s.OverflowDrops)
	}
	fmt.Fprintf(w, "\nWhole runs: the goodput of each run after its first %v (its first slow start), the mmWave dwells after each handover included; paired by scenario.\n", report.Startup)
}

// writeLossFree prints the loss-free fraction per class and variant
// (the paper's figure 13).
func writeLossFree(w io.Writer, a *Analysis, variants []string) {
	classes := diag.ClassesWithAll()
	fmt.Fprint(w, "| variant |")
	for _, c := range classes {
		fmt.Fprintf(w, " %s |", diag.ClassLabel(c))
	}
	fmt.Fprint(w, "\n|---|")
	for range classes {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, v := range variants {
		fmt.Fprintf(w, "| %s |", report.Title(v))
		for _, c := range classes {
			if s, ok := a.summary(v, c); ok {
				fmt.Fprintf(w, " %.0f%% (%d/%d) |", 100*float64(s.LossFree)/float64(s.Handovers), s.LossFree, s.Handovers)
			} else {
				fmt.Fprint(w, " |")
			}
		}
		fmt.Fprintln(w)
	}
}

// lossCauseLabels head the columns of writeLossCauses.
var lossCauseLabels = map[string]string{
	report.LossRLF:           "radio link failure",
	report.LossSourceDiscard: "source discard",
	report.LossOverflow:      "target overflow during",
	report.LossAfter:         "target overflow after",
	report.LossReordering:    "reordering alone",
	report.LossOther:         "other",
}

// writeLossCauses tabulates why the handovers that were not loss-free
// lost packets, from the ground truth.
func writeLossCauses(w io.Writer, a *Analysis, variants []string) {
	fmt.Fprintf(w, "\nWhy the others were not, from the emulator's ground truth, the first that applies: a radio link failure; the source discarding what its context release held; the target's buffer overflowing while the handover completed, or within %v after; the context release's reordering alone; other (a drop outside the handover's buffers, or a timer).\n\n", emu.PostHandoverWindow)
	fmt.Fprint(w, "| variant | not loss-free |")
	causes := report.LossCauses()
	for _, c := range causes {
		fmt.Fprintf(w, " %s |", lossCauseLabels[c])
	}
	fmt.Fprint(w, "\n|---|---:|")
	for range causes {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, v := range variants {
		s, ok := a.summary(v, diag.AllClasses)
		if !ok {
			continue
		}
		fmt.Fprintf(w, "| %s | %d |", report.Title(v), s.Handovers-s.LossFree)
		for _, c := range causes {
			fmt.Fprintf(w, " %d |", s.LossCauses[c])
		}
		fmt.Fprintln(w)
	}
}

// writeCuts tabulates the window cuts of every variant beside the
// reference's on the same scenarios: what a policy saves during handovers
// and what it costs between them.
func writeCuts(w io.Writer, a *Analysis, variants []string) {
	fmt.Fprintf(w, "Cuts of the first flow's congestion window (loss episodes, retransmissions less than %v apart taken as one, in which the cwnd fell below %.0f%% of its value before), after the first %v; during a handover: from its report until %v after its completion. Each cell: the variant (%s on the same scenarios). BBR, which does not cut its window by a factor on loss, has no row.\n\n",
		report.CutEpisodeGap, 100*report.CutShare, report.Startup, report.LossFreeAfter, report.Title(a.Reference))
	fmt.Fprintln(w, "| variant | scenarios | during handovers | between, sub-6 | between, mmWave | all | of them timeouts |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, v := range variants {
		c, ok := a.Cuts[v]
		if tb, err := testbed.ParseVariant(v); !ok || err != nil || tb.CC == variantBBR {
			continue
		}
		cell := func(x, ref int) string {
			if v == a.Reference {
				return strconv.Itoa(x)
			}
			return fmt.Sprintf("%d (%d)", x, ref)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s |\n", report.Title(v), c.Scenarios,
			cell(c.Variant.Handover, c.Reference.Handover), cell(c.Variant.Sub6, c.Reference.Sub6),
			cell(c.Variant.MmWave, c.Reference.MmWave), cell(c.Variant.Total(), c.Reference.Total()),
			cell(c.Variant.Timeouts, c.Reference.Timeouts))
	}
}

// diagFeed says how the emulator fed m2hod its diag events, on which the
// daemon's cost depends.
func diagFeed(flush time.Duration) string {
	if flush == 0 {
		return "one event per datagram"
	}
	return fmt.Sprintf("rb_alloc events coalesced into a datagram every %v, every other event at once (--diag-flush)", flush)
}

func writeDaemon(w io.Writer, a *Analysis, variants []string) {
	fmt.Fprintln(w, "| variant | runs | mean CPU (% of a core) | max CPU | peak RSS (MiB) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	for _, v := range variants {
		d, ok := a.Daemon[v]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %.2f | %.2f | %.1f |\n", report.Title(v), d.Units, d.MeanCPUPercent, d.MaxCPUPercent, float64(d.MaxPeakRSS)/(1<<20))
	}
}

// writeByMobility prints the headline comparison on each mobility
// pattern's scenarios alone: what each pattern gains, and how much of
// the overall interval's width each contributes.
func writeByMobility(w io.Writer, a *Analysis, mobilities []string) {
	fmt.Fprintf(w, "| mobility | scenarios | handovers | vs %s (paired, 95%% CI) | half-width | whole runs | loss-free (%s) |\n", report.Title(a.Reference), report.Title(a.Reference))
	fmt.Fprintln(w, "|---|---:|---:|---|---:|---|---|")
	for _, mobility := range mobilities {
		p, ok := a.ByMobility[mobility]
		if !ok {
			continue
		}
		g := p.Gain[diag.AllClasses]
		fmt.Fprintf(w, "| %s | %d | %d | %s | ±%.1f | %s | %s (%s) |\n", mobility, p.Scenarios, p.Handovers, g.Percent(true), 100*g.HalfWidth(),
			p.RunGain.Percent(true), p.LossFree.Percent(false), p.ReferenceLossFree.Percent(false))
	}
}

func writeGoals(w io.Writer, gs []Goal) {
	fmt.Fprintln(w, "| goal | target | measured | met |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, g := range gs {
		met := "no"
		if g.Met {
			met = "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", g.Name, g.Target, g.Measured, met)
	}
}

func writeMarkdown(w io.Writer, m *Manifest, a *Analysis) error {
	variants := m.AllVariants()
	total := 0
	for _, e := range m.Corpus {
		if slices.Contains(a.Scenarios, e.Name) {
			total += e.Handovers
		}
	}
	fmt.Fprintf(w, "# Evaluation results\n\n")
	fmt.Fprintf(w, "Corpus: %d of %d scenarios finished by the reference (%d handovers; %s mobility, %v per scenario, scale %g, seeds from %d, traces %s, %s leads); %d of %d units finished. %s run on every scenario, the other variants on the first %d of each mobility pattern.\n\n",
		len(a.Scenarios), len(m.Corpus), total, strings.Join(m.Mobilities, " and "), m.ScenarioDuration, m.Scale, m.Seed,
		cmp.Or(m.Traces, "none (synthetic)"), cmp.Or(m.Leads, scenario.LeadsPaper), a.UnitsFinished, a.UnitsTotal, strings.Join(m.Variants, " and "), m.ExtraScenarios)
	fmt.Fprintf(w, "The finished units ran for %v in all (first finished %s, last %s%s); m2hod %s, SHA-256 %s.\n\n",
		a.RunTime.Round(time.Second), a.First.Format(time.RFC3339), a.Last.Format(time.RFC3339), parallelNote(a.Parallel),
		cmp.Or(m.M2hodVersion, "-"), cmp.Or(m.M2hodSHA256, "-"))
	fmt.Fprintln(w, "Throughput is the mean goodput over [-5 s, +5 s] of execution in scaled Mbit/s; convergence is capped at the next handover. Comparisons are paired (the same scenarios and handovers) with 95% bootstrap intervals over scenarios; a goal is met when its whole interval is.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Goals")
	writeGoals(w, a.Goals)
	fmt.Fprintln(w, "\n## Outcomes per variant")
	writeOutcomes(w, a, variants)
	if len(a.ByMobility) > 0 {
		fmt.Fprintf(w, "\n## %s per mobility pattern\n", report.Title(a.Headline))
		writeByMobility(w, a, m.Mobilities)
	}
	fmt.Fprintf(w, "\n## Table 2: %s against the baselines\n", report.Title(a.Headline))
	baselines := []string{a.Reference}
	for _, v := range variants {
		if tb, err := testbed.ParseVariant(v); err == nil && (tb.Freeze || !tb.M2HO) && v != a.Reference {
			baselines = append(baselines, v)
		}
	}
	writeTable2(w, a, a.Headline, baselines, a.pair)
	if slices.Contains(variants, variantBBRM2HO) && slices.Contains(variants, variantBBR) {
		fmt.Fprintln(w, "\n## BBR + m2ho against BBR")
		writeTable2(w, a, variantBBRM2HO, []string{variantBBR}, a.pair)
	}
	fmt.Fprintln(w, "\n## Loss-free handovers (figure 13)")
	writeLossFree(w, a, variants)
	writeLossCauses(w, a, variants)
	fmt.Fprintln(w, "\n## Where the senders' windows were cut")
	writeCuts(w, a, variants)
	fmt.Fprintln(w, "\n## Where the kept window went")
	writePhases(w, a)
	if a.Prediction != nil {
		if err := writePredictionTables(w, a.Prediction); err != nil {
			return err
		}
	}
	if len(a.DupAcks) > 0 {
		fmt.Fprintln(w, "\n## Table 3: duplicate-ACK handling")
		summaries := make([]report.DupAckSummary, len(a.DupAcks))
		for i, d := range a.DupAcks {
			summaries[i] = d.DupAckSummary
		}
		if err := report.WriteDupAckTable(w, summaries); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nSuppressed is generated (%s) minus seen on the uplink. The datapath's own count of suppressed duplicate ACKs:\n", generatedSource(a.groups))
		for _, d := range a.DupAcks {
			overall, _ := d.Class(diag.AllClasses)
			fmt.Fprintf(w, "%s %d (table: %d);", report.Title(d.Variant), d.DatapathSuppressed, overall.Acks.Suppressed)
		}
		fmt.Fprintln(w)
	}
	if len(a.DupAckModel) > 0 {
		fmt.Fprintln(w, "\nGenerated against seen on the variants where nothing drops duplicate ACKs (zero error with the LAN tap):")
		fmt.Fprintln(w)
		if err := report.WriteDupAckModelCheck(w, a.DupAckModel); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\n## m2hod overhead while the download ran")
	fmt.Fprintf(w, "Diag stream: %s.\n\n", diagFeed(m.DiagFlush))
	writeDaemon(w, a, variants)
	fmt.Fprintln(w, "\n## Emulator fidelity")
	fmt.Fprintf(w, "| variant | mean delivery timing p99 | worst p99 | send errors | runs whose sender lost its state (cwnd of %d segments or more, ssthresh above %d) |\n", report.ImplausibleCwnd, report.InfiniteSsthresh)
	fmt.Fprintln(w, "|---|---:|---:|---:|---|")
	for _, v := range variants {
		if f, ok := a.Fidelity[v]; ok {
			implausible := "none"
			if len(f.Implausible) > 0 {
				implausible = strings.Join(f.Implausible, ", ")
			}
			fmt.Fprintf(w, "| %s | %v | %v | %d | %s |\n", report.Title(v), f.MeanDownlinkP99.Round(10*time.Microsecond), f.WorstDownlinkP99.Round(10*time.Microsecond), f.SendErrors, implausible)
		}
	}
	fmt.Fprintln(w, "\nA sender whose congestion window reached a million segments (1.4 GB, beyond every cell's bandwidth-delay product), or whose slow start threshold exceeded any Linux assigns, lost track of its state; such a run is counted as it ran, and named here so that its scenario's comparisons can be read without it.")
	fmt.Fprintf(w, "\nPlots: %s, %s, %s.\n", plotThroughputCDF, plotConvergenceCDF, plotLossFree)
	return nil
}

// parallelNote says how many units ran at once, when more than one did.
func parallelNote(parallel int) string {
	if parallel <= 1 {
		return ""
	}
	return fmt.Sprintf(", up to %d units at a time", parallel)
}
