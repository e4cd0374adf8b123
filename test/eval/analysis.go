package eval

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/report"
	"github.com/m2ho/m2ho/test/testbed"
)

// Variants the analysis compares against each other.
const (
	variantCubic     = "cubic"
	variantCubicM2HO = "cubic+m2ho"
	variantBBR       = "bbr"
	variantBBRM2HO   = "bbr+m2ho"
)

// Analysis is the evaluation's results.
type Analysis struct {
	UnitsFinished int      `json:"units_finished"`
	UnitsTotal    int      `json:"units_total"`
	Scenarios     []string `json:"scenarios"`
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
	// DupAcks is Table 3 for the variants whose daemon suppresses
	// duplicate ACKs; DupAckModel checks the receiver model on the others,
	// where nothing drops them.
	DupAcks     []DupAckResult            `json:"dupacks"`
	DupAckModel []report.DupAckModelCheck `json:"dupack_model"`
	Goals       []Goal                    `json:"goals"`
}

// DupAckResult is Table 3 for one variant, with the duplicate ACKs the
// datapath itself counted as suppressed.
type DupAckResult struct {
	report.DupAckSummary
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
		Summaries: map[string][]report.Summary{}, Handovers: map[string][]report.Handover{},
		Daemon: map[string]DaemonSummary{}, Fidelity: map[string]FidelitySummary{},
	}
	for _, r := range groups[m.Variants[0]] {
		a.Scenarios = append(a.Scenarios, r.Scenario.Name)
	}
	// Every variant has results: they cover the scenarios all finished.
	for _, v := range m.Variants {
		units := groups[v]
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
		a.Fidelity[v] = fid
		if ds.Units > 0 {
			ds.MeanCPUPercent /= float64(ds.Units)
		}
		if ds.Units+ds.Errors > 0 {
			a.Daemon[v] = ds
		}
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
	for _, name := range m.Variants {
		units := groups[name]
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
		if d.Variant != variantCubicM2HO {
			continue
		}
		overall, ok := d.Class(report.ClassOverall)
		if !ok {
			return nil
		}
		precision, _ := overall.Events.Precision().Value()
		recall, _ := overall.Events.Recall().Value()
		return []Goal{
			{Name: "duplicate-ACK handling precision (congestion events)", Target: ">= 90%", Measured: overall.Events.Precision().String() + "%", Met: precision >= 0.9, Value: precision},
			{Name: "duplicate-ACK handling recall (congestion events)", Target: ">= 98%", Measured: overall.Events.Recall().String() + "%", Met: recall >= 0.98, Value: recall},
		}
	}
	return nil
}

// predictionVariant is the variant whose runs give the prediction
// figures: the signalling of a scenario is the same in every variant,
// and this one's daemons also report their own counts.
const predictionVariant = variantCubicM2HO

func (a *Analysis) evaluatePrediction(groups map[string][]UnitResult) error {
	units := groups[predictionVariant]
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
	return nil
}

func (a *Analysis) predictionGoals() []Goal {
	if a.Prediction == nil {
		return nil
	}
	p, ok := a.Prediction.Predictor(report.PredictorM2HO)
	if !ok {
		return nil
	}
	overall, ok := p.Class(report.ClassOverall)
	if !ok {
		return nil
	}
	precision, _ := overall.Precision.Value()
	recall, _ := overall.Recall.Value()
	return []Goal{
		{Name: "prediction precision (Algorithm 1 replay)", Target: ">= 95%", Measured: overall.Precision.String() + "%", Met: precision >= 0.95, Value: precision},
		{Name: "prediction recall (Algorithm 1 replay)", Target: ">= 88%", Measured: overall.Recall.String() + "%", Met: recall >= 0.88, Value: recall},
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

// improvement is (x - base) / base.
func improvement(x, base float64) float64 {
	if base == 0 {
		return 0
	}
	return (x - base) / base
}

// goals checks the throughput, convergence, loss and never-hurts targets;
// prediction and duplicate-ACK targets are checked where those are
// computed.
func goals(a *Analysis) []Goal {
	var out []Goal
	cubic, okC := a.summary(variantCubic, report.ClassOverall)
	m2ho, okM := a.summary(variantCubicM2HO, report.ClassOverall)
	if okC && okM {
		gain := improvement(m2ho.ThroughputBps, cubic.ThroughputBps)
		out = append(out, Goal{Name: "handover throughput over CUBIC, overall", Target: ">= +46%",
			Measured: pct(gain), Met: gain >= 0.46, Value: gain})
		if c, ok := a.summary(variantCubic, "sub6_mmwave"); ok {
			if x, ok := a.summary(variantCubicM2HO, "sub6_mmwave"); ok {
				g := improvement(x.ThroughputBps, c.ThroughputBps)
				out = append(out, Goal{Name: "handover throughput over CUBIC, sub6 to mmWave", Target: ">= +100%",
					Measured: pct(g), Met: g >= 1, Value: g})
			}
		}
		ratio := m2ho.ConvergenceTime.Seconds() / cubic.ConvergenceTime.Seconds()
		out = append(out, Goal{Name: "convergence time relative to CUBIC", Target: "<= 1/3 (33%)",
			Measured: fmt.Sprintf("%.0f%% (%.1f s vs %.1f s)", 100*ratio, m2ho.ConvergenceTime.Seconds(), cubic.ConvergenceTime.Seconds()),
			Met:      ratio <= 1.0/3, Value: ratio})
		lf := float64(m2ho.LossFree) / float64(m2ho.Handovers)
		out = append(out, Goal{Name: "loss-free handovers with m2ho", Target: ">= 85%",
			Measured: fmt.Sprintf("%.1f%% (%d/%d; CUBIC %d/%d)", 100*lf, m2ho.LossFree, m2ho.Handovers, cubic.LossFree, cubic.Handovers),
			Met:      lf >= 0.85, Value: lf})
		var worse []string
		for _, s := range a.Summaries[variantCubic] {
			if s.Class == report.ClassOverall {
				continue
			}
			if x, ok := a.summary(variantCubicM2HO, s.Class); ok && x.ThroughputBps < s.ThroughputBps {
				worse = append(worse, fmt.Sprintf("%s %s", s.Class, pct(improvement(x.ThroughputBps, s.ThroughputBps))))
			}
		}
		measured := "none"
		if len(worse) > 0 {
			measured = fmt.Sprint(worse)
		}
		out = append(out, Goal{Name: "no handover class where CUBIC + m2ho is below CUBIC", Target: "none",
			Measured: measured, Met: len(worse) == 0, Value: float64(len(worse))})
	}
	bbr, okB := a.summary(variantBBR, report.ClassOverall)
	bbrM, okBM := a.summary(variantBBRM2HO, report.ClassOverall)
	if okB && okBM && bbr.ThroughputBps > 0 {
		r := bbrM.ThroughputBps / bbr.ThroughputBps
		out = append(out, Goal{Name: "BBR + m2ho relative to BBR", Target: ">= 98%",
			Measured: fmt.Sprintf("%.1f%%", 100*r), Met: r >= 0.98, Value: r})
	}
	return out
}

func pct(x float64) string { return fmt.Sprintf("%+.1f%%", 100*x) }

// classNames are the paper's labels of the handover classes.
var classNames = map[string]string{
	"sub6_sub6": "sub6-sub6", "sub6_mmwave": "sub6-mmW", "mmwave_mmwave": "mmW-mmW",
	"mmwave_sub6": "mmW-sub6", report.ClassOverall: "Overall",
}

// writeTable2 prints the paper's Table 2 for one m2ho variant against
// baselines: throughput (Mbit/s) and convergence time t (s) per class,
// with eta0 = (m2ho - algo) / algo for throughput and
// eta1 = (algo - m2ho) / algo for convergence.
func writeTable2(w io.Writer, a *Analysis, m2ho string, baselines []string) {
	fmt.Fprintf(w, "| HO type | %s Tput | %s t |", report.Title(m2ho), report.Title(m2ho))
	sep := "|---|---:|---:|"
	for _, b := range baselines {
		fmt.Fprintf(w, " %s Tput | η0 | t | η1 |", report.Title(b))
		sep += "---:|---:|---:|---:|"
	}
	fmt.Fprintf(w, "\n%s\n", sep)
	for _, class := range report.ClassOrder {
		x, ok := a.summary(m2ho, class)
		if !ok {
			continue
		}
		fmt.Fprintf(w, "| %s (%d) | %.1f | %.1f |", classNames[class], x.Handovers, x.ThroughputBps/1e6, x.ConvergenceTime.Seconds())
		for _, b := range baselines {
			s, ok := a.summary(b, class)
			if !ok {
				fmt.Fprint(w, " | | | |")
				continue
			}
			eta0 := improvement(x.ThroughputBps, s.ThroughputBps)
			eta1 := -improvement(x.ConvergenceTime.Seconds(), s.ConvergenceTime.Seconds())
			fmt.Fprintf(w, " %.1f | %.0f | %.1f | %.0f |", s.ThroughputBps/1e6, 100*eta0, s.ConvergenceTime.Seconds(), 100*eta1)
		}
		fmt.Fprintln(w)
	}
}

// writeOutcomes prints, per variant, the overall handover outcomes.
func writeOutcomes(w io.Writer, a *Analysis, variants []string) {
	fmt.Fprintln(w, "| variant | handovers | tput (Mbit/s) | vs CUBIC | convergence (s) | converged | loss-free | retrans/HO | cwnd drop | buffer drops |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	cubic, hasCubic := a.summary(variantCubic, report.ClassOverall)
	for _, v := range variants {
		s, ok := a.summary(v, report.ClassOverall)
		if !ok {
			continue
		}
		vs := ""
		if hasCubic {
			vs = pct(improvement(s.ThroughputBps, cubic.ThroughputBps))
		}
		fmt.Fprintf(w, "| %s | %d | %.1f | %s | %.2f | %d | %d (%.1f%%) | %.1f | %.0f%% | %d |\n",
			report.Title(v), s.Handovers, s.ThroughputBps/1e6, vs, s.ConvergenceTime.Seconds(), s.Converged,
			s.LossFree, 100*float64(s.LossFree)/float64(s.Handovers), s.Retransmissions, 100*s.CwndDrop, s.OverflowDrops)
	}
}

// writeLossFree prints the loss-free fraction per class and variant
// (the paper's figure 13).
func writeLossFree(w io.Writer, a *Analysis, variants []string) {
	fmt.Fprint(w, "| variant |")
	for _, c := range report.ClassOrder {
		fmt.Fprintf(w, " %s |", classNames[c])
	}
	fmt.Fprint(w, "\n|---|")
	for range report.ClassOrder {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, v := range variants {
		fmt.Fprintf(w, "| %s |", report.Title(v))
		for _, c := range report.ClassOrder {
			if s, ok := a.summary(v, c); ok {
				fmt.Fprintf(w, " %.0f%% (%d/%d) |", 100*float64(s.LossFree)/float64(s.Handovers), s.LossFree, s.Handovers)
			} else {
				fmt.Fprint(w, " |")
			}
		}
		fmt.Fprintln(w)
	}
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
	variants := m.Variants
	total := 0
	for _, e := range m.Corpus {
		if slices.Contains(a.Scenarios, e.Name) {
			total += e.Handovers
		}
	}
	fmt.Fprintf(w, "# Evaluation results\n\n")
	fmt.Fprintf(w, "Corpus: %d of %d scenarios finished by every variant (%d handovers each, %s mobility, %v per scenario, scale %g, seeds from %d); %d of %d units finished.\n\n",
		len(a.Scenarios), len(m.Corpus), total, m.Mobility, m.ScenarioDuration, m.Scale, m.Seed, a.UnitsFinished, a.UnitsTotal)
	fmt.Fprintln(w, "Throughput is the mean goodput over [-5 s, +5 s] of execution in scaled Mbit/s; convergence is capped at the next handover.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Goals")
	writeGoals(w, a.Goals)
	fmt.Fprintln(w, "\n## Outcomes per variant")
	writeOutcomes(w, a, variants)
	fmt.Fprintln(w, "\n## Table 2: CUBIC + m2ho against the baselines")
	var baselines []string
	for _, v := range []string{variantCubic, "cubic+freeze", variantBBR} {
		if slices.Contains(variants, v) {
			baselines = append(baselines, v)
		}
	}
	writeTable2(w, a, variantCubicM2HO, baselines)
	if slices.Contains(variants, variantBBRM2HO) && slices.Contains(variants, variantBBR) {
		fmt.Fprintln(w, "\n## BBR + m2ho against BBR")
		writeTable2(w, a, variantBBRM2HO, []string{variantBBR})
	}
	fmt.Fprintln(w, "\n## Loss-free handovers (figure 13)")
	writeLossFree(w, a, variants)
	if a.Prediction != nil {
		fmt.Fprintln(w, "\n## Table 4: handover prediction precision p and recall r (%)")
		if err := report.WritePredictionTable(w, a.Prediction); err != nil {
			return err
		}
		fmt.Fprintln(w, "\n## Table 5: earliness")
		if err := report.WriteEarlinessTable(w, a.Prediction); err != nil {
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
		fmt.Fprintln(w, "\nSuppressed is generated (receiver model) minus seen on the uplink. The datapath's own count of suppressed duplicate ACKs:")
		for _, d := range a.DupAcks {
			overall, _ := d.Class(report.ClassOverall)
			fmt.Fprintf(w, "%s %d (table: %d);", report.Title(d.Variant), d.DatapathSuppressed, overall.Acks.Suppressed)
		}
		fmt.Fprintln(w)
	}
	if len(a.DupAckModel) > 0 {
		fmt.Fprintln(w, "\nReceiver model check on the variants where nothing drops duplicate ACKs:")
		fmt.Fprintln(w)
		if err := report.WriteDupAckModelCheck(w, a.DupAckModel); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\n## m2hod overhead while the download ran")
	writeDaemon(w, a, variants)
	fmt.Fprintln(w, "\n## Emulator fidelity")
	fmt.Fprintln(w, "| variant | mean delivery timing p99 | worst p99 | send errors |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for _, v := range variants {
		if f, ok := a.Fidelity[v]; ok {
			fmt.Fprintf(w, "| %s | %v | %v | %d |\n", report.Title(v), f.MeanDownlinkP99.Round(10*time.Microsecond), f.WorstDownlinkP99.Round(10*time.Microsecond), f.SendErrors)
		}
	}
	fmt.Fprintf(w, "\nPlots: %s, %s, %s.\n", plotThroughputCDF, plotConvergenceCDF, plotLossFree)
	return nil
}
