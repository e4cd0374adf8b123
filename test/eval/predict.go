package eval

import (
	"fmt"
	"io"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/report"
	"github.com/m2ho/m2ho/test/scenario"
)

// signallingEpoch is the modem clock's origin of a corpus scenario's
// signalling: any will do, as a run's ground truth keeps its own start.
var signallingEpoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// CorpusPrediction is handover prediction judged on a corpus's signalling
// alone: Table 4 and 5 of an evaluation, on corpora far larger than its
// runs cover.
type CorpusPrediction struct {
	Corpus    Corpus
	Scenarios int
	// Handovers counts the corpus's handovers, radio link failures not
	// counted.
	Handovers int
	Result    *report.PredictionResult
	// Precision and Recall are M2HO's overall figures, with their
	// intervals over scenarios.
	Precision, Recall Interval
}

// PredictCorpus generates the corpus c as an evaluation does and judges
// M2HO's handover prediction (the daemon's own state machine, replayed)
// and the baselines on the signalling of each scenario, which the link
// produces from the timeline alone (emu.SignallingTruth): a run of the
// same scenario records the same signalling at the same times.
func PredictCorpus(c Corpus) (*CorpusPrediction, error) {
	traces, err := c.loadTraces()
	if err != nil {
		return nil, err
	}
	out := &CorpusPrediction{Corpus: c}
	var truths []*emu.GroundTruth
	var mobilities []string
	err = c.forEachSeed(func(mobility string, seed uint64) (int, error) {
		sc, err := scenario.Generate(c.generateOptions(mobility, seed, traces))
		if err != nil {
			return 0, fmt.Errorf("%s seed %d: %w", mobility, seed, err)
		}
		truth, err := emu.SignallingTruth(sc, signallingEpoch)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", sc.Name, err)
		}
		truths = append(truths, truth)
		mobilities = append(mobilities, mobility)
		handovers := 0
		for _, h := range truth.Handovers {
			if h.Procedure == emu.ProcedureHandover {
				handovers++
			}
		}
		out.Scenarios++
		out.Handovers += handovers
		return handovers, nil
	})
	if err != nil {
		return nil, err
	}
	if out.Result, err = report.EvaluatePrediction(truths); err != nil {
		return nil, err
	}
	if out.Precision, out.Recall, err = predictionIntervals(truths, mobilities); err != nil {
		return nil, err
	}
	return out, nil
}

// Write prints the corpus, Table 4 and Table 5, and M2HO's overall
// precision and recall with their intervals.
func (p *CorpusPrediction) Write(w io.Writer) error {
	c := p.Corpus
	fmt.Fprintf(w, "# Handover prediction on generated signalling\n\n")
	fmt.Fprintf(w, "Corpus: %d scenarios of %v (%v, seeds from %d, at least %d handovers each, traces %q, leads %s), %d handovers.\n",
		p.Scenarios, c.ScenarioDuration, c.Mobilities, c.Seed, c.Handovers, c.Traces, leadsName(c.Leads), p.Handovers)
	if err := writePredictionTables(w, p.Result); err != nil {
		return err
	}
	overall, ok := m2hoOverall(p.Result)
	if !ok {
		return nil
	}
	fmt.Fprintf(w, "\nM2HO, 95%% intervals over scenarios: precision %s (%d/%d), recall over handovers %s (%d/%d; with radio link failures %d/%d).\n",
		p.Precision.Percent(false), overall.Precision.Num, overall.Precision.Den,
		p.Recall.Percent(false), overall.RecallHandovers.Num, overall.RecallHandovers.Den, overall.Recall.Num, overall.Recall.Den)
	return nil
}

// writePredictionTables writes Table 4 and Table 5 of res.
func writePredictionTables(w io.Writer, res *report.PredictionResult) error {
	fmt.Fprintln(w, "\n## Table 4: handover prediction precision p and recall r (%)")
	if err := report.WritePredictionTable(w, res); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n## Table 5: earliness")
	return report.WriteEarlinessTable(w, res)
}

// m2hoOverall is M2HO's prediction over every class of res.
func m2hoOverall(res *report.PredictionResult) (report.ClassPrediction, bool) {
	m2ho, ok := res.Predictor(report.PredictorM2HO)
	if !ok {
		return report.ClassPrediction{}, false
	}
	return m2ho.Class(diag.AllClasses)
}

// leadsName names a corpus's lead model.
func leadsName(leads string) string {
	if leads == "" {
		return scenario.LeadsPaper
	}
	return leads
}
