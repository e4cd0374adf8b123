package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/m2ho/m2ho/test/eval"
	"github.com/m2ho/m2ho/test/report"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/testbed"
	"github.com/m2ho/m2ho/test/topo"
)

// plotFile is the plot the commands write next to a run's own files.
const plotFile = "plot.png"

func requireRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, AF_PACKET): run with sudo")
	}
	return nil
}

func cmdRun(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	scenarioPath := fs.String("scenario", "", "scenario file (YAML)")
	variantName := fs.String("variant", "cubic", "congestion control, optionally +m2ho")
	outDir := fs.String("out", "", "output directory")
	m2hod := fs.String("m2hod", "bin/m2hod", "m2hod binary for +m2ho variants")
	pcap := fs.Bool("pcap", false, "capture the UE's modem interface to ue.pcap")
	diagFlush := diagFlushFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *scenarioPath == "" || *outDir == "" {
		return errors.New("--scenario and --out are required")
	}
	if err := requireRoot(); err != nil {
		return err
	}
	variant, err := testbed.ParseVariant(*variantName)
	if err != nil {
		return err
	}
	sc, err := scenario.Load(*scenarioPath)
	if err != nil {
		return err
	}
	if variant.M2HO {
		if _, err := os.Stat(*m2hod); err != nil {
			return fmt.Errorf("variant %s needs m2hod: %w", variant, err)
		}
	}
	res, err := testbed.Run(ctx, testbed.Config{Scenario: sc, Variant: variant, OutDir: *outDir, M2hod: *m2hod, Pcap: *pcap, DiagFlush: *diagFlush, Log: log})
	if err != nil {
		return err
	}
	hs, err := eval.AnalyzeRun(sc, res, *outDir)
	if err != nil {
		return err
	}
	if err := report.PlotRuns(filepath.Join(*outDir, plotFile), fmt.Sprintf("%s: %s", sc.Name, report.Title(variant.String())), sc, res.Truth,
		[]report.Run{{Variant: variant.String(), Measurements: res.Measurements}}); err != nil {
		return err
	}
	if err := report.WriteHandoverTable(out, variant.String(), hs); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nThe paper's findings 2-4 as seen in this run (%s):\n", variant)
	for _, line := range report.Findings(hs) {
		fmt.Fprintf(out, "  %s\n", line)
	}
	printFidelity(out, res)
	fmt.Fprintf(out, "files in %s\n", *outDir)
	return nil
}

func printFidelity(out io.Writer, res *testbed.Result) {
	f := res.Fidelity
	fmt.Fprintf(out, "%s: %d deliveries, timing error p50 %v p99 %v max %v (scheduler wake-up p99 %v max %v, burst send p99 %v max %v); uplink p50 %v p99 %v; send errors %d; buffer drops %d\n",
		res.Variant, f.Deliveries, f.DownlinkP50, f.DownlinkP99, f.DownlinkMax, f.WakeupP99, f.WakeupMax, f.SendBatchP99, f.SendBatchMax,
		f.UplinkP50, f.UplinkP99, f.SendErrors, res.Truth.Totals.BufferDrops)
}

func cmdCleanup(_ context.Context, args []string, out io.Writer, _ *slog.Logger) error {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := requireRoot(); err != nil {
		return err
	}
	removed, err := topo.CleanupStale()
	if len(removed) > 0 {
		fmt.Fprintf(out, "removed %s\n", strings.Join(removed, " "))
	} else {
		fmt.Fprintln(out, "nothing to remove")
	}
	return err
}
