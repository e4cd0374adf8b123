package eval

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/report"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/testbed"
)

// PaperFidelityOptions choose how the testbed is held to the paper's
// section 3: which plain senders, on which corpus, with which static runs.
type PaperFidelityOptions struct {
	Out string
	// From is an evaluation whose runs of the senders are used instead
	// of running a corpus here.
	From string
	// Senders are congestion controls without m2ho: "cubic" (the
	// kernel's, whose dynamics shrink with the scale) and "scubic"
	// (scaled like the testbed).
	Senders []string
	// Corpus is the handover corpus, as the evaluation's (when From is
	// empty).
	Corpus
	// StaticRuns static mmWave runs of StaticDuration per sender.
	StaticRuns     int
	StaticDuration time.Duration
	Log            *slog.Logger
	Progress       io.Writer
}

// Files of a paper fidelity measurement.
const (
	PaperFidelityMarkdown = "fidelity-paper.md"
	PaperFidelityJSON     = "fidelity-paper.json"
)

// PaperFidelity measures the paper's section 3 observations for each
// plain sender and writes the table; it returns its path.
func PaperFidelity(ctx context.Context, o PaperFidelityOptions) (string, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	for _, s := range o.Senders {
		if v, err := testbed.ParseVariant(s); err != nil || v.M2HO {
			return "", fmt.Errorf("sender %q is not a congestion control without m2ho", s)
		}
	}
	corpus := o.From
	if corpus == "" {
		corpus = filepath.Join(o.Out, "handovers")
		_, err := Run(ctx, Options{Out: corpus, Corpus: o.Corpus, Variants: o.Senders, Log: o.Log, Progress: o.Progress})
		if err != nil {
			return "", err
		}
	}
	var traces []scenario.Trace
	if o.Traces != "" {
		var err error
		if traces, err = emu.LoadTraceDir(o.Traces); err != nil {
			return "", err
		}
	}
	obs := map[string][]report.Observation{}
	for _, sender := range o.Senders {
		runs, err := ObservedRuns(corpus, sender)
		if err != nil {
			return "", err
		}
		if obs[sender], err = report.SectionThree(runs); err != nil {
			return "", err
		}
		static, err := staticRuns(ctx, o, sender, traces)
		if err != nil {
			return "", err
		}
		st, err := report.StaticMmWaveUse(static)
		if err != nil {
			return "", err
		}
		obs[sender] = append(obs[sender], st)
	}
	if err := testbed.WriteJSON(filepath.Join(o.Out, PaperFidelityJSON), obs); err != nil {
		return "", err
	}
	path := filepath.Join(o.Out, PaperFidelityMarkdown)
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("writing the fidelity table: %w", err)
	}
	fmt.Fprintf(f, "# The testbed against the paper's section 3\n\nHandover runs: %s; static runs: %d of %v per sender on one mmWave cell (traces %s). Senders without m2ho: %s.\n\n",
		corpus, o.StaticRuns, o.StaticDuration, o.Traces, strings.Join(o.Senders, ", "))
	report.WriteSectionThree(f, o.Senders, obs)
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("writing the fidelity table: %w", err)
	}
	return path, nil
}

// staticRuns runs (or reads back) the static mmWave runs of a sender.
func staticRuns(ctx context.Context, o PaperFidelityOptions, sender string, traces []scenario.Trace) ([]report.ObservedRun, error) {
	v, err := testbed.ParseVariant(sender)
	if err != nil {
		return nil, err
	}
	var runs []report.ObservedRun
	for i := range o.StaticRuns {
		seed := o.Seed + uint64(i)
		sc, err := scenario.GenerateStatic(scenario.GenerateOptions{
			Seed: seed, Duration: o.StaticDuration, Mobility: scenario.MobilityWalking, Scale: o.Scale, Traces: traces,
			CellBuffer: o.CellBuffer,
		})
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(o.Out, "static", sc.Name, sender)
		measurements := filepath.Join(dir, testbed.MeasurementsFile)
		if _, err := os.Stat(measurements); err != nil {
			fmt.Fprintf(o.Progress, "static run %s %s (%v)\n", sc.Name, sender, o.StaticDuration)
			if _, err := testbed.Run(ctx, testbed.Config{Scenario: sc, Variant: v, OutDir: dir, Log: o.Log}); err != nil {
				return nil, fmt.Errorf("static run %s %s: %w", sc.Name, sender, err)
			}
		}
		ms, err := testbed.ReadMeasurements(measurements)
		if err != nil {
			return nil, err
		}
		runs = append(runs, report.ObservedRun{Scenario: sc, Measurements: ms})
	}
	return runs, nil
}
