package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/m2ho/m2ho/test/emu"
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

// listFlag is a comma-separated flag (splitList) filling a list.
type listFlag struct{ list *[]string }

func (f listFlag) String() string {
	if f.list == nil {
		return ""
	}
	return strings.Join(*f.list, ",")
}

func (f listFlag) Set(s string) error {
	*f.list = splitList(s)
	return nil
}

// cellBufferUsage explains --cell-buffer wherever a corpus is generated.
const cellBufferUsage = "every cell's buffer as the time its band's mean capacity takes to drain it (0: 1.5 MB sub-6, 12 MB mmWave)"

// sourceDiscardUsage explains --source-discard wherever a corpus is
// generated.
const sourceDiscardUsage = "the source discards the packets a context release holds back instead of forwarding them to the target (the paper's finding 2)"

// diagFlushFlag registers --diag-flush, how the emulator feeds m2hod its
// diag events, on the commands whose runs have m2hod read them. Its
// default is what a DIAG port does (emu.DIAGPortFlush, docs/testbed.md).
func diagFlushFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("diag-flush", emu.DIAGPortFlush,
		"period of the diag datagrams m2hod reads: rb_alloc events coalesced as a DIAG port delivers them, every other event at once (0: one event per datagram)")
}

// corpusFlags registers on fs the flags of an evaluation corpus but its
// lead model (--handovers, --seed, --scenario-duration, --mobility,
// --scale, --traces, --cell-buffer, --source-discard), with the values of
// def as their defaults, and returns the corpus they fill in as fs
// parses. with starts every usage ("with --paper: "), empty when the
// flags always apply.
func corpusFlags(fs *flag.FlagSet, def eval.Corpus, with string) *eval.Corpus {
	c := def
	c.Mobilities = slices.Clone(def.Mobilities)
	fs.IntVar(&c.Handovers, "handovers", def.Handovers, with+"minimum handovers of each mobility pattern's corpus")
	fs.Uint64Var(&c.Seed, "seed", def.Seed, with+"seed of the first scenario of the corpus")
	fs.DurationVar(&c.ScenarioDuration, "scenario-duration", def.ScenarioDuration, with+"length of each scenario")
	fs.Var(listFlag{&c.Mobilities}, "mobility", with+"comma-separated mobility `patterns`: walking, driving")
	fs.Float64Var(&c.Scale, "scale", def.Scale, with+"capacity and buffer scale factor")
	fs.StringVar(&c.Traces, "traces", def.Traces, with+"folder of Lumos5G or Mahimahi traces for the mmWave cells (\"\" for synthetic cells)")
	fs.DurationVar(&c.CellBuffer, "cell-buffer", def.CellBuffer, with+cellBufferUsage)
	fs.BoolVar(&c.SourceDiscard, "source-discard", def.SourceDiscard, with+sourceDiscardUsage)
	return &c
}

// defaultCorpus is the corpus the evaluation runs by default, with at
// least handovers handovers of each mobility pattern.
func defaultCorpus(handovers int) eval.Corpus {
	return eval.Corpus{Handovers: handovers, Seed: 1, ScenarioDuration: 2 * time.Minute,
		Mobilities: eval.DefaultMobilities, Scale: 0.1, Traces: defaultTraces}
}

func cmdEval(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	outDir := fs.String("out", "out/eval", "output directory (an earlier evaluation there resumes)")
	corpus := corpusFlags(fs, defaultCorpus(140), "")
	fs.StringVar(&corpus.Leads, "leads", scenario.LeadsPaper, "lead model of the corpus: paper or captures")
	variants := fs.String("variants", strings.Join(eval.DefaultVariants, ","), "comma-separated variants run on every scenario: the reference first, then the headline m2ho variant")
	extra := fs.String("extra-variants", strings.Join(eval.DefaultExtraVariants, ","), "comma-separated variants run on the first --extra-scenarios scenarios of each mobility pattern")
	extraScenarios := fs.Int("extra-scenarios", 1, "scenarios of each mobility pattern the extra variants run on")
	m2hod := fs.String("m2hod", "bin/m2hod", "m2hod binary")
	diagFlush := diagFlushFlag(fs)
	reportOnly := fs.Bool("report-only", false, "only rebuild the results from the finished units")
	parallel := fs.Int("parallel", 1, "units to run at once, each in its own namespaces (the report's fidelity table gives each variant's emulator timing)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := eval.Options{
		Out:      *outDir,
		Corpus:   *corpus,
		Variants: splitList(*variants), ExtraVariants: splitList(*extra), ExtraScenarios: *extraScenarios,
		M2hod: *m2hod, DiagFlush: *diagFlush, Log: log, Progress: out, Parallel: *parallel,
	}
	if *parallel < 1 {
		return fmt.Errorf("--parallel %d: at least one unit runs at a time", *parallel)
	}
	if len(opts.Variants) < 2 {
		return errors.New("--variants: the evaluation compares a reference variant with an m2ho variant (name both)")
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

// cmdCompare pairs one variant's units of two evaluations of one corpus:
// the same daemon run two ways (an A/A check of the testbed), or two
// daemon builds.
func cmdCompare(_ context.Context, args []string, out io.Writer, _ *slog.Logger) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	a := fs.String("a", "", "the first evaluation's output directory")
	b := fs.String("b", "", "the second evaluation's output directory, compared against the first")
	variant := fs.String("variant", eval.DefaultVariants[0], "the variant compared")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *a == "" || *b == "" {
		return errors.New("--a and --b name the two evaluations")
	}
	c, err := eval.CompareEvaluations(*a, *b, *variant)
	if err != nil {
		return err
	}
	return eval.WriteComparison(out, c)
}

// cmdPredict judges handover prediction on a generated corpus's
// signalling alone, without running it: no root, seconds for thousands of
// handovers.
func cmdPredict(_ context.Context, args []string, out io.Writer, _ *slog.Logger) error {
	fs := flag.NewFlagSet("predict", flag.ContinueOnError)
	corpus := corpusFlags(fs, defaultCorpus(1000), "")
	fs.StringVar(&corpus.Leads, "leads", scenario.LeadsPaper, "lead model of the corpus: paper or captures")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	res, err := eval.PredictCorpus(*corpus)
	if err != nil {
		return err
	}
	return res.Write(out)
}
