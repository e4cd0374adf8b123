package eval

import (
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/report"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/testbed"
	"github.com/m2ho/m2ho/test/traffic"
)

// Files of the results.
const (
	ResultsMarkdown = "results.md"
	ResultsJSON     = "results.json"
	HandoversCSV    = "handovers.csv"
)

// UnitResult is a finished unit's files.
type UnitResult struct {
	Unit
	Handovers []report.Handover
	Truth     *emu.GroundTruth
	Fidelity  testbed.Fidelity
	// Cuts are the sender's window cuts, by where they fell.
	Cuts report.Cuts
	// RunGoodputBps is the run's goodput after its startup
	// (report.RunGoodput).
	RunGoodputBps float64
	// SenderLostState: its sender reported a window or a slow start
	// threshold no sender can hold (report.SenderLostState).
	SenderLostState bool
	// Daemon is nil for variants without m2hod.
	Daemon *testbed.DaemonUsage
	Dir    string
	// Done is when the unit finished and how long it took.
	Done done
}

// Load reads every finished unit of an evaluation, in running order.
func Load(out string) (*Manifest, []UnitResult, error) {
	return loadFinished(out, func(Unit) bool { return true })
}

// loadFinished reads the finished units of an evaluation that keep
// accepts, in running order.
func loadFinished(out string, keep func(Unit) bool) (*Manifest, []UnitResult, error) {
	m, err := ReadManifest(out)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the evaluation in %s: %w", out, err)
	}
	var results []UnitResult
	for _, u := range m.Units() {
		if !keep(u) || !u.Finished(out) {
			continue
		}
		r, _, err := loadUnit(out, u)
		if err != nil {
			return nil, nil, fmt.Errorf("%s %s: %w", u.Scenario.Name, u.Variant, err)
		}
		results = append(results, r)
	}
	return m, results, nil
}

// recorded is what a unit's run recorded that its UnitResult keeps no
// copy of.
type recorded struct {
	scenario     *scenario.Scenario
	measurements *traffic.Measurements
}

// loadUnit reads a finished unit, with its scenario and measurements.
func loadUnit(out string, u Unit) (UnitResult, recorded, error) {
	r := UnitResult{Unit: u, Dir: u.Dir(out)}
	var rec recorded
	if err := testbed.ReadJSON(filepath.Join(r.Dir, doneFile), &r.Done); err != nil {
		return r, rec, err
	}
	if err := testbed.ReadJSON(filepath.Join(r.Dir, testbed.FidelityFile), &r.Fidelity); err != nil {
		return r, rec, err
	}
	truth, err := emu.ReadGroundTruth(filepath.Join(r.Dir, testbed.GroundTruthFile))
	if err != nil {
		return r, rec, err
	}
	r.Truth = truth
	sc, err := scenario.Load(filepath.Join(out, u.Scenario.File))
	if err != nil {
		return r, rec, err
	}
	ms, err := testbed.ReadMeasurements(filepath.Join(r.Dir, testbed.MeasurementsFile))
	if err != nil {
		return r, rec, err
	}
	rec = recorded{scenario: sc, measurements: ms}
	// The metrics are computed again from what the run recorded, not
	// read from HandoversFile, so that every unit of a report, whenever
	// it ran, is measured by the same definitions.
	if r.Handovers, err = report.Analyze(sc, truth, ms); err != nil {
		return r, rec, err
	}
	if r.Cuts, err = report.WindowCuts(sc, truth, ms); err != nil {
		return r, rec, err
	}
	r.RunGoodputBps = report.RunGoodput(ms)
	r.SenderLostState = report.SenderLostState(ms)
	var usage testbed.DaemonUsage
	switch err := testbed.ReadJSON(filepath.Join(r.Dir, testbed.M2hodUsageFile), &usage); {
	case err == nil:
		r.Daemon = &usage
	case !errors.Is(err, os.ErrNotExist):
		return r, rec, err
	}
	return r, rec, nil
}

// byVariant groups the finished units per variant, in the manifest's
// variant order.
func byVariant(results []UnitResult) map[string][]UnitResult {
	out := map[string][]UnitResult{}
	for _, r := range results {
		out[r.Variant] = append(out[r.Variant], r)
	}
	return out
}

// handovers concatenates the handovers of a variant's units.
func handovers(units []UnitResult) []report.Handover {
	var hs []report.Handover
	for _, u := range units {
		hs = append(hs, u.Handovers...)
	}
	return hs
}

// WriteResults builds the results of the finished units: the Markdown
// report, a JSON summary, a CSV line per handover and plots. It returns
// the Markdown file's path.
func WriteResults(out string) (string, error) {
	m, all, err := Load(out)
	if err != nil {
		return "", err
	}
	results := all
	if len(m.Variants) < 2 {
		return "", fmt.Errorf("%s: the results compare a reference variant with an m2ho variant; it runs only %s", out, strings.Join(m.Variants, ", "))
	}
	if !slices.ContainsFunc(results, func(r UnitResult) bool { return r.Variant == m.Variants[0] }) {
		return "", fmt.Errorf("no run of the reference variant %s has finished yet", m.Variants[0])
	}
	if err := writeCSV(filepath.Join(out, HandoversCSV), results); err != nil {
		return "", err
	}
	a, err := analyse(m, results)
	if err != nil {
		return "", err
	}
	a.UnitsFinished, a.UnitsTotal = len(all), len(m.Units())
	if err := writePlots(out, m, a); err != nil {
		return "", err
	}
	if err := testbed.WriteJSON(filepath.Join(out, ResultsJSON), a); err != nil {
		return "", err
	}
	path := filepath.Join(out, ResultsMarkdown)
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("writing results: %w", err)
	}
	werr := writeMarkdown(f, m, a)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return path, werr
}

func writeCSV(path string, results []UnitResult) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"variant", "scenario", "seed", "index", "procedure", "class", "exec_s", "throughput_mbps",
		"convergence_s", "converged", "retransmissions", "loss_free", "cwnd_before", "cwnd_min", "cwnd_drop",
		"reordered", "overflow_drops", "drops_after", "reorder_dupacks", "target_capacity_mbps"})
	for _, r := range results {
		for _, h := range r.Handovers {
			_ = w.Write([]string{
				r.Variant, r.Scenario.Name, strconv.FormatUint(r.Scenario.Seed, 10), strconv.Itoa(h.Index), h.Procedure, h.Class,
				seconds(h.ExecAt), mbps(h.ThroughputBps), seconds(h.ConvergenceTime), strconv.FormatBool(h.Converged),
				strconv.FormatUint(uint64(h.Retransmissions), 10), strconv.FormatBool(h.LossFree),
				strconv.FormatUint(uint64(h.CwndBefore), 10), strconv.FormatUint(uint64(h.CwndMin), 10),
				strconv.FormatFloat(h.CwndDrop, 'f', 4, 64), strconv.FormatBool(h.Reordered),
				strconv.Itoa(h.OverflowDrops), strconv.Itoa(h.DropsAfter), strconv.Itoa(h.ReorderDupAck), mbps(h.TargetCapacityBps),
			})
		}
	}
	w.Flush()
	err = w.Error()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }
func mbps(bps float64) string        { return strconv.FormatFloat(bps/1e6, 'f', 3, 64) }

// ObservedRuns reads the finished runs of one variant with everything
// the paper's section 3 observations need.
func ObservedRuns(out, variant string) ([]report.ObservedRun, error) {
	m, err := ReadManifest(out)
	if err != nil {
		return nil, fmt.Errorf("reading the evaluation in %s: %w", out, err)
	}
	var runs []report.ObservedRun
	for _, u := range m.Units() {
		if u.Variant != variant || !u.Finished(out) {
			continue
		}
		r, rec, err := loadUnit(out, u)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", u.Scenario.Name, u.Variant, err)
		}
		runs = append(runs, report.ObservedRun{Scenario: rec.scenario, Truth: r.Truth, Measurements: rec.measurements, Handovers: r.Handovers})
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("%s has no finished run of %s (variants: %v)", out, variant, m.AllVariants())
	}
	return runs, nil
}
