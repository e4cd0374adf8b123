package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/m2ho/m2ho/test/eval"
	"github.com/m2ho/m2ho/test/scenario"
)

// defaultTraces is the shared data's Lumos5G folder beside the
// repository, the real mmWave capacity the evaluation runs on.
const defaultTraces = "../shared/data/traces/lumos5g"

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func cmdEval(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	outDir := fs.String("out", "out/eval", "output directory (an earlier evaluation there resumes)")
	handovers := fs.Int("handovers", 70, "minimum handovers of each mobility pattern's corpus")
	seed := fs.Uint64("seed", 1, "seed of the first scenario of the corpus")
	duration := fs.Duration("scenario-duration", 2*time.Minute, "length of each scenario")
	mobility := fs.String("mobility", strings.Join(eval.DefaultMobilities, ","), "comma-separated mobility patterns: walking, driving")
	scale := fs.Float64("scale", 0.1, "capacity and buffer scale factor")
	traces := fs.String("traces", defaultTraces, "folder of Lumos5G or Mahimahi traces for the mmWave cells (\"\" for synthetic cells)")
	leads := fs.String("leads", scenario.LeadsPaper, "lead model of the corpus: paper or captures")
	variants := fs.String("variants", strings.Join(eval.DefaultVariants, ","), "comma-separated variants run on every scenario: the reference first, then the headline m2ho variant")
	extra := fs.String("extra-variants", strings.Join(eval.DefaultExtraVariants, ","), "comma-separated variants run on the first --extra-scenarios scenarios of each mobility pattern")
	extraScenarios := fs.Int("extra-scenarios", 1, "scenarios of each mobility pattern the extra variants run on")
	m2hod := fs.String("m2hod", "bin/m2hod", "m2hod binary")
	reportOnly := fs.Bool("report-only", false, "only rebuild the results from the finished units")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := eval.Options{
		Out: *outDir,
		Corpus: eval.Corpus{Handovers: *handovers, Seed: *seed, ScenarioDuration: *duration, Mobilities: splitList(*mobility),
			Scale: *scale, Traces: *traces, Leads: *leads},
		Variants: splitList(*variants), ExtraVariants: splitList(*extra), ExtraScenarios: *extraScenarios,
		M2hod: *m2hod, Log: log, Progress: out,
	}
	var runErr error
	if !*reportOnly {
		if err := requireRoot(); err != nil {
			return err
		}
		_, runErr = eval.Run(ctx, opts)
		if runErr != nil && !errors.Is(runErr, context.Canceled) {
			return runErr
		}
	}
	path, err := eval.WriteResults(*outDir)
	if err != nil {
		return errors.Join(runErr, err)
	}
	fmt.Fprintf(out, "results: %s\n", path)
	if runErr != nil {
		return fmt.Errorf("stopped before every unit ran (run the same command again to resume): %w", runErr)
	}
	return nil
}
