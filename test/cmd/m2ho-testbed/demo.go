package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/m2ho/m2ho/test/eval"
	"github.com/m2ho/m2ho/test/report"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/testbed"
)

// Files of the demo's output directory.
const (
	demoPlot    = "demo.png"
	demoSummary = "summary.txt"
)

func cmdDemo(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	outDir := fs.String("out", "out/demo", "output directory")
	scenarioPath := fs.String("scenario", "test/scenarios/demo.yaml", "scenario file")
	m2hod := fs.String("m2hod", "bin/m2hod", "m2hod binary")
	diagFlush := diagFlushFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := requireRoot(); err != nil {
		return err
	}
	sc, err := scenario.Load(*scenarioPath)
	if err != nil {
		return err
	}
	variants := []testbed.Variant{{CC: "cubic"}}
	var notes []string
	if _, err := os.Stat(*m2hod); err == nil {
		variants = append(variants, testbed.Variant{CC: "cubic", M2HO: true})
	} else {
		notes = append(notes, fmt.Sprintf("m2hod is missing (%s not found): only the CUBIC side is shown; build it with `make build`", *m2hod))
	}
	var summary bytes.Buffer
	w := io.MultiWriter(out, &summary)
	fmt.Fprintf(w, "scenario %s (%s), %v, scale %.2g: capacities and buffers x%.2g, delays as is\n\n",
		sc.Name, sc.Description, sc.Duration, sc.Scale, sc.Scale)

	var runs []report.Run
	var summaries [][]report.Summary
	var results []*testbed.Result
	var handovers [][]report.Handover
	for _, v := range variants {
		dir := filepath.Join(*outDir, v.String())
		log.Info("demo run", "variant", v, "out", dir)
		res, err := testbed.Run(ctx, testbed.Config{Scenario: sc, Variant: v, OutDir: dir, M2hod: *m2hod, DiagFlush: *diagFlush, Log: log})
		if err != nil {
			return fmt.Errorf("variant %s: %w", v, err)
		}
		hs, err := eval.AnalyzeRun(sc, res, dir)
		if err != nil {
			return err
		}
		if err := report.PlotRuns(filepath.Join(dir, plotFile), fmt.Sprintf("%s: %s", sc.Name, report.Title(v.String())), sc, res.Truth,
			[]report.Run{{Variant: v.String(), Measurements: res.Measurements}}); err != nil {
			return err
		}
		results = append(results, res)
		handovers = append(handovers, hs)
		runs = append(runs, report.Run{Variant: v.String(), Measurements: res.Measurements})
		summaries = append(summaries, report.Summarize(v.String(), hs))
	}

	fmt.Fprintln(w, "Comparison (means per handover; throughput over [-5 s, +5 s] of execution, scaled Mbit/s)")
	if err := report.WriteComparison(w, summaries); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for i, res := range results {
		if err := report.WriteHandoverTable(w, res.Variant.String(), handovers[i]); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "Paper findings with plain CUBIC:")
	for _, line := range report.Findings(handovers[0]) {
		fmt.Fprintf(w, "  %s\n", line)
	}
	fmt.Fprintln(w)
	for _, res := range results {
		printFidelity(w, res)
	}
	for _, n := range notes {
		fmt.Fprintf(w, "NOTE: %s\n", n)
	}
	plotPath := filepath.Join(*outDir, demoPlot)
	if err := report.PlotRuns(plotPath, fmt.Sprintf("%s: goodput and cwnd, handovers marked", sc.Name), sc, results[0].Truth, runs); err != nil {
		return err
	}
	fmt.Fprintf(w, "plot: %s\n", plotPath)
	if err := os.WriteFile(filepath.Join(*outDir, demoSummary), summary.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing summary: %w", err)
	}
	return nil
}
