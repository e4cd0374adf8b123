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

func cmdEval(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	outDir := fs.String("out", "out/eval", "output directory (an earlier evaluation there resumes)")
	handovers := fs.Int("handovers", 120, "minimum handovers in the generated corpus")
	seed := fs.Uint64("seed", 1, "seed of the first scenario of the corpus")
	duration := fs.Duration("scenario-duration", 2*time.Minute, "length of each scenario")
	mobility := fs.String("mobility", scenario.MobilityDriving, "walking or driving")
	scale := fs.Float64("scale", 0.1, "capacity and buffer scale factor")
	variants := fs.String("variants", strings.Join(eval.DefaultVariants, ","), "comma-separated variants")
	m2hod := fs.String("m2hod", "bin/m2hod", "m2hod binary")
	reportOnly := fs.Bool("report-only", false, "only rebuild the results from the finished units")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := eval.Options{
		Out: *outDir, Handovers: *handovers, Seed: *seed, ScenarioDuration: *duration, Mobility: *mobility,
		Scale: *scale, Variants: strings.Split(*variants, ","), M2hod: *m2hod, Log: log, Progress: out,
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
