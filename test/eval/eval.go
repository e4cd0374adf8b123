// Package eval runs the paper's section 6 evaluation in the testbed: a
// generated corpus of handovers, every variant over every scenario of it
// in one session, and the tables, CSV and plots of the results. A run is
// resumable: each finished (scenario, variant) unit is kept, and a new
// invocation with the same parameters runs only what is missing.
package eval

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/report"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/testbed"
)

// The evaluation's defaults: the headline pair runs on every scenario of
// the corpus, the baselines and ablations (the extra variants) on the
// first few scenarios of each mobility pattern, all paired with the
// headline pair's reference on the same scenarios.
var (
	// DefaultVariants are CUBIC scaled like the testbed (full-scale
	// dynamics, test/scaledcc) with and without m2ho.
	DefaultVariants = []string{"scubic", "scubic+m2ho"}
	// DefaultExtraVariants are the kernel's CUBIC with and without m2ho
	// (the scale's own dynamics), the Freeze-TCP baseline, BBR with and
	// without m2ho, and the ablations of m2ho's components.
	DefaultExtraVariants = []string{
		"cubic", "cubic+m2ho", "scubic+freeze", "bbr", "bbr+m2ho",
		"scubic+m2ho-no-prediction", "scubic+m2ho-no-suppression", "scubic+m2ho-no-bandwidth_clamp", "scubic+m2ho-no-ramp",
	}
	DefaultMobilities = []string{scenario.MobilityWalking, scenario.MobilityDriving}
)

// Corpus is how an evaluation's scenarios are generated.
type Corpus struct {
	// Handovers is the minimum number of handovers (radio link failures
	// not counted) of each mobility pattern's corpus.
	Handovers int
	// Seed is the first scenario's generator seed; the next scenarios
	// take the following seeds.
	Seed uint64
	// ScenarioDuration is the length of each scenario of the corpus.
	ScenarioDuration time.Duration
	Mobilities       []string
	Scale            float64
	// Traces is the folder whose traces give the mmWave cells their
	// capacity; empty for synthetic cells.
	Traces string
	// Leads is the lead model (scenario.LeadsPaper when empty).
	Leads string
	// CellBuffer sizes the cells' buffers in time at their band's mean
	// capacity (scenario.GenerateOptions.CellBuffer); 0 for the
	// generator's defaults.
	CellBuffer time.Duration
	// SourceDiscard has the source discard the packets a context release
	// holds back (scenario.GenerateOptions.SourceDiscard); false
	// forwards them to the target.
	SourceDiscard bool
}

// Options are one evaluation's parameters. Everything but Out, Log,
// Progress and Parallel is recorded in the manifest and must match when a
// run resumes: M2hod by the SHA-256 of the binary it names.
type Options struct {
	Out string
	Corpus
	// Variants run on every scenario. The first is the reference every
	// other variant is compared with, the second the headline m2ho
	// variant.
	Variants []string
	// ExtraVariants run on the first ExtraScenarios scenarios of each
	// mobility pattern.
	ExtraVariants  []string
	ExtraScenarios int
	M2hod          string
	// DiagFlush is how the emulator feeds m2hod its diag events
	// (testbed.Config.DiagFlush).
	DiagFlush time.Duration
	Log       *slog.Logger
	// Progress receives a line per unit started and finished.
	Progress io.Writer
	// Parallel is how many units run at once (at least one). Each unit
	// has its own namespaces, emulator and daemon; what a unit shares
	// with the others is the machine, so every unit records how many ran
	// beside it, and its emulator's delivery timing (the report's
	// fidelity table) says whether they disturbed it.
	Parallel int
}

// Files and directories of an evaluation's output directory.
const (
	ManifestFile = "manifest.json"
	corpusDir    = "corpus"
	runsDir      = "runs"
	// doneFile marks a finished unit; it is written last.
	doneFile = "done.json"
	// HandoversFile holds a unit's per-handover metrics.
	HandoversFile = "handovers.json"
)

// Manifest is what an evaluation runs: its parameters and its corpus.
type Manifest struct {
	Handovers        int           `json:"handovers"`
	Seed             uint64        `json:"seed"`
	ScenarioDuration time.Duration `json:"scenario_duration_ns"`
	Mobilities       []string      `json:"mobilities"`
	Scale            float64       `json:"scale"`
	Traces           string        `json:"traces,omitempty"`
	Variants         []string      `json:"variants"`
	ExtraVariants    []string      `json:"extra_variants,omitempty"`
	ExtraScenarios   int           `json:"extra_scenarios,omitempty"`
	Leads            string        `json:"leads,omitempty"`
	CellBuffer       time.Duration `json:"cell_buffer_ns,omitempty"`
	SourceDiscard    bool          `json:"source_discard,omitempty"`
	// DiagFlush is the period of the emulator's diag datagrams, absent
	// for one event per datagram (as every evaluation before the field
	// was fed): m2hod's cost depends on it.
	DiagFlush time.Duration `json:"diag_flush_ns,omitempty"`
	// M2hodSHA256 is the SHA-256 of the m2hod binary the m2ho variants
	// run, empty without such variants: a resumed evaluation must run the
	// same daemon, or one table would mix versions.
	M2hodSHA256 string `json:"m2hod_sha256,omitempty"`
	// M2hodVersion is what that binary's --version says, its commit
	// among it: the build to make again to resume on another machine.
	M2hodVersion string        `json:"m2hod_version,omitempty"`
	Corpus       []CorpusEntry `json:"corpus"`
	Created      time.Time     `json:"created"`
}

// CorpusEntry is one generated scenario.
type CorpusEntry struct {
	Name     string `json:"name"`
	Mobility string `json:"mobility"`
	Seed     uint64 `json:"seed"`
	// Extra marks the scenarios the extra variants run on too.
	Extra bool `json:"extra,omitempty"`
	// File is relative to the output directory.
	File      string         `json:"file"`
	Handovers int            `json:"handovers"`
	RLFs      int            `json:"rlfs"`
	Reports   int            `json:"false_reports"`
	Classes   map[string]int `json:"classes"`
	Reordered int            `json:"reordered"`
	Overflow  int            `json:"overflow"`
}

// Unit is one variant over one scenario.
type Unit struct {
	Scenario CorpusEntry
	Variant  string
}

// Dir is where a unit's files go.
func (u Unit) Dir(out string) string {
	return filepath.Join(out, runsDir, u.Scenario.Name, u.Variant)
}

// done records a finished unit.
type done struct {
	Finished time.Time     `json:"finished"`
	Took     time.Duration `json:"took_ns"`
	// Parallel is how many units the evaluation ran at once when this
	// one ran; absent for one.
	Parallel int `json:"parallel,omitempty"`
}

func (o *Options) validate() error {
	switch {
	case o.Out == "":
		return errors.New("an output directory is required")
	case o.Handovers < 1:
		return errors.New("the corpus needs at least one handover")
	case o.ScenarioDuration < 10*time.Second:
		return errors.New("scenarios must be at least 10s long")
	case len(o.Variants) == 0:
		return errors.New("the corpus needs a variant to run")
	case len(o.Mobilities) == 0:
		return errors.New("no mobility pattern")
	case o.ExtraScenarios < 0:
		return errors.New("negative number of scenarios for the extra variants")
	case o.DiagFlush < 0:
		return fmt.Errorf("negative diag flush period %v", o.DiagFlush)
	}
	seen := map[string]bool{}
	for _, name := range append(slices.Clone(o.Variants), o.ExtraVariants...) {
		if seen[name] {
			return fmt.Errorf("variant %s is named twice", name)
		}
		seen[name] = true
		v, err := testbed.ParseVariant(name)
		if err != nil {
			return err
		}
		if v.String() != name {
			return fmt.Errorf("variant %q is spelt %q", name, v.String())
		}
		if v.M2HO && o.M2hod == "" {
			return fmt.Errorf("variant %s needs the m2hod binary", name)
		}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return nil
}

// Prepare loads the manifest of an earlier invocation with the same
// parameters, or generates the corpus and writes a new one.
func Prepare(opts Options) (*Manifest, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	daemon, err := m2hodDigest(opts)
	if err != nil {
		return nil, err
	}
	want := Manifest{
		Handovers: opts.Handovers, Seed: opts.Seed, ScenarioDuration: opts.ScenarioDuration,
		Mobilities: opts.Mobilities, Scale: opts.Scale, Traces: opts.Traces, Variants: opts.Variants,
		ExtraVariants: opts.ExtraVariants, ExtraScenarios: opts.ExtraScenarios, Leads: opts.Leads, CellBuffer: opts.CellBuffer,
		SourceDiscard: opts.SourceDiscard, DiagFlush: opts.DiagFlush, M2hodSHA256: daemon,
	}
	path := filepath.Join(opts.Out, ManifestFile)
	if old, err := ReadManifest(opts.Out); err == nil {
		if !sameParameters(old, &want) {
			return nil, fmt.Errorf("%s holds an evaluation with other parameters (%s): use another --out or remove it", opts.Out, path)
		}
		if err := sameM2hod(opts, old, want.M2hodSHA256); err != nil {
			return nil, err
		}
		return old, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(opts.Out, corpusDir), 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	traces, err := opts.loadTraces()
	if err != nil {
		return nil, err
	}
	err = opts.forEachSeed(func(mobility string, seed uint64) (int, error) {
		entry, err := generate(opts, mobility, seed, traces)
		if err != nil {
			return 0, err
		}
		entry.Extra = int(seed-opts.Seed) < opts.ExtraScenarios
		want.Corpus = append(want.Corpus, entry)
		return entry.Handovers, nil
	})
	if err != nil {
		return nil, err
	}
	want.Created = time.Now().UTC()
	if want.M2hodSHA256 != "" {
		want.M2hodVersion = m2hodVersion(opts.M2hod)
	}
	if err := testbed.WriteJSON(path, &want); err != nil {
		return nil, err
	}
	return &want, nil
}

// m2hodVersion is the first line m2hod --version prints, or empty for a
// binary that cannot say (the SHA-256 still tells builds apart).
func m2hodVersion(binary string) string {
	out, err := exec.Command(binary, "--version").Output()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// m2hodDigest returns the hex SHA-256 of the m2hod binary, found as the
// runs will find it, or "" when no variant runs it.
func m2hodDigest(opts Options) (string, error) {
	needed := false
	for _, name := range append(slices.Clone(opts.Variants), opts.ExtraVariants...) {
		if v, err := testbed.ParseVariant(name); err == nil && v.M2HO {
			needed = true
		}
	}
	if !needed {
		return "", nil
	}
	path, err := exec.LookPath(opts.M2hod)
	if err != nil {
		return "", fmt.Errorf("m2hod binary: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("m2hod binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("m2hod binary %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sameM2hod checks that digest, the SHA-256 of the m2hod binary now, is
// the one m records, so that one table never mixes daemon versions:
// neither a resume nor a unit run after a rebuild may use another.
func sameM2hod(opts Options, m *Manifest, digest string) error {
	if digest != m.M2hodSHA256 {
		return fmt.Errorf("%s holds an evaluation run with another m2hod binary (SHA-256 %q, %s; %s has %q): resume it with that build, or use another --out",
			opts.Out, m.M2hodSHA256, cmp.Or(m.M2hodVersion, "version not recorded"), opts.M2hod, digest)
	}
	return nil
}

func sameParameters(a, b *Manifest) bool {
	return a.Handovers == b.Handovers && a.Seed == b.Seed && a.ScenarioDuration == b.ScenarioDuration &&
		slices.Equal(a.Mobilities, b.Mobilities) && a.Scale == b.Scale && a.Traces == b.Traces &&
		slices.Equal(a.Variants, b.Variants) && slices.Equal(a.ExtraVariants, b.ExtraVariants) &&
		a.ExtraScenarios == b.ExtraScenarios && a.Leads == b.Leads && a.CellBuffer == b.CellBuffer &&
		a.SourceDiscard == b.SourceDiscard && a.DiagFlush == b.DiagFlush
}

// loadTraces reads the corpus's trace folder; none without one.
func (c Corpus) loadTraces() ([]scenario.Trace, error) {
	if c.Traces == "" {
		return nil, nil
	}
	return emu.LoadTraceDir(c.Traces)
}

// forEachSeed walks the corpus's scenarios in order: for each mobility
// pattern, the seeds from c.Seed on until their scenarios hold
// c.Handovers handovers, fn telling how many each one holds.
func (c Corpus) forEachSeed(fn func(mobility string, seed uint64) (handovers int, err error)) error {
	for _, mobility := range c.Mobilities {
		total := 0
		for seed := c.Seed; total < c.Handovers; seed++ {
			n, err := fn(mobility, seed)
			if err != nil {
				return err
			}
			total += n
		}
	}
	return nil
}

// generateOptions are the generator's options for the scenario of one
// seed of the corpus.
func (c Corpus) generateOptions(mobility string, seed uint64, traces []scenario.Trace) scenario.GenerateOptions {
	return scenario.GenerateOptions{Seed: seed, Duration: c.ScenarioDuration, Mobility: mobility, Scale: c.Scale,
		MatchMix: true, Traces: traces, TracesFrom: c.Traces, Leads: c.Leads, LANReceiver: true, CellBuffer: c.CellBuffer,
		SourceDiscard: c.SourceDiscard}
}

// generate writes the scenario of one seed into the corpus, its handover
// types kept at the measured mix and its receiver behind the UE, so that
// the duplicate ACKs m2ho drops are known exactly.
func generate(opts Options, mobility string, seed uint64, traces []scenario.Trace) (CorpusEntry, error) {
	gen := opts.generateOptions(mobility, seed, traces)
	sc, err := scenario.Generate(gen)
	if err != nil {
		return CorpusEntry{}, fmt.Errorf("seed %d: %w", seed, err)
	}
	raw, err := sc.Marshal()
	if err != nil {
		return CorpusEntry{}, err
	}
	header := "# Evaluation corpus: m2ho-testbed gen-scenario " + gen.Flags() + "\n"
	file := filepath.Join(corpusDir, sc.Name+".yaml")
	if err := os.WriteFile(filepath.Join(opts.Out, file), append([]byte(header), raw...), 0o644); err != nil {
		return CorpusEntry{}, fmt.Errorf("writing scenario: %w", err)
	}
	entry := CorpusEntry{Name: sc.Name, Mobility: mobility, Seed: seed, File: file, Classes: map[string]int{}}
	cells := map[string]scenario.Cell{}
	for _, c := range sc.Cells {
		cells[c.Name] = c
	}
	for _, e := range sc.Timeline {
		switch e.Type {
		case scenario.TypeHandover:
			entry.Handovers++
			entry.Classes[diag.HandoverClass(cells[e.Source].Band, cells[e.Target].Band)]++
			if e.ContextRelease != nil {
				entry.Reordered++
			}
			if e.TargetBufferBytes > 0 {
				entry.Overflow++
			}
		case scenario.TypeRLF:
			entry.RLFs++
		case scenario.TypeReport:
			entry.Reports++
		}
	}
	return entry, nil
}

// ReadManifest loads an evaluation's manifest.
func ReadManifest(out string) (*Manifest, error) {
	var m Manifest
	if err := testbed.ReadJSON(filepath.Join(out, ManifestFile), &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Units lists every unit in running order: scenario by scenario, so an
// interrupted evaluation still compares the variants on the same
// handovers, with the variants of each scenario in an order drawn from
// its seed, so that no variant systematically runs first after a pause
// or next to the same neighbour.
func (m *Manifest) Units() []Unit {
	var units []Unit
	for _, entry := range m.Corpus {
		for _, v := range m.ScenarioVariants(entry) {
			units = append(units, Unit{Scenario: entry, Variant: v})
		}
	}
	return units
}

// ScenarioVariants are the variants that run on a scenario, in their
// running order.
func (m *Manifest) ScenarioVariants(entry CorpusEntry) []string {
	variants := slices.Clone(m.Variants)
	if entry.Extra {
		variants = append(variants, m.ExtraVariants...)
	}
	rng := rand.New(rand.NewPCG(entry.Seed, uint64(len(entry.Name))))
	rng.Shuffle(len(variants), func(i, j int) { variants[i], variants[j] = variants[j], variants[i] })
	return variants
}

// AllVariants are the headline variants, then the extra ones.
func (m *Manifest) AllVariants() []string {
	return append(slices.Clone(m.Variants), m.ExtraVariants...)
}

// Finished reports whether a unit's files are complete.
func (u Unit) Finished(out string) bool {
	_, err := os.Stat(filepath.Join(u.Dir(out), doneFile))
	return err == nil
}

// Run runs every unit not yet finished, reporting progress. Cancelling ctx
// stops after removing the topology of the unit under way; what finished
// stays.
func Run(ctx context.Context, opts Options) (*Manifest, error) {
	m, err := Prepare(opts)
	if err != nil {
		return nil, err
	}
	units := m.Units()
	var todo []Unit
	for _, u := range units {
		if !u.Finished(opts.Out) {
			todo = append(todo, u)
		}
	}
	total := 0
	for _, e := range m.Corpus {
		total += e.Handovers
	}
	fmt.Fprintf(opts.Progress, "corpus: %d scenarios, %d handovers; %d variants on every scenario, %d on %d per mobility pattern; %d of %d units to run\n",
		len(m.Corpus), total, len(m.Variants), len(m.ExtraVariants), m.ExtraScenarios, len(todo), len(units))
	start := time.Now()
	var (
		mu       sync.Mutex
		finished int
	)
	progress := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(opts.Progress, format, args...)
	}
	// Units run in batches, and the garbage of a batch is collected once
	// it ended: the host process runs without collections (emu.TuneRuntime)
	// until its heap reaches a limit, which a long evaluation reaches
	// after ten units or so, and a collection in the middle of a unit
	// stalls its emulator.
	err = runEach(ctx, len(todo), opts.Parallel, func(ctx context.Context, i int) error {
		u := todo[i]
		// The binary may have been rebuilt since the evaluation began.
		digest, err := m2hodDigest(opts)
		if err != nil {
			return err
		}
		if err := sameM2hod(opts, m, digest); err != nil {
			return err
		}
		mu.Lock()
		left := eta(start, finished, len(todo))
		mu.Unlock()
		progress("[%d/%d] %s %s (%d handovers)%s\n", i+1, len(todo), u.Scenario.Name, u.Variant, u.Scenario.Handovers, left)
		took, err := runUnit(ctx, opts, u)
		if err != nil {
			return fmt.Errorf("%s %s: %w", u.Scenario.Name, u.Variant, err)
		}
		mu.Lock()
		finished++
		mu.Unlock()
		progress("[%d/%d] done in %v\n", i+1, len(todo), took.Round(100*time.Millisecond))
		return nil
	}, runtime.GC)
	return m, err
}

// runEach calls run for every index below n in batches of parallel, in
// index order, and between after each batch, when no unit runs. After
// the first error, or once ctx is done, it starts no more, waits for those
// under way (their ctx is cancelled, so a unit stops and removes its
// topology) and returns that error.
func runEach(ctx context.Context, n, parallel int, run func(context.Context, int) error, between func()) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	parallel = max(parallel, 1)
	for first := 0; first < n && ctx.Err() == nil; first += parallel {
		var wg sync.WaitGroup
		for i := first; i < min(first+parallel, n); i++ {
			wg.Go(func() {
				if err := run(ctx, i); err != nil {
					cancel(err)
				}
			})
		}
		wg.Wait()
		between()
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// eta estimates the time left from the units done so far.
func eta(start time.Time, done, total int) string {
	if done == 0 {
		return ""
	}
	left := time.Duration(float64(time.Since(start)) / float64(done) * float64(total-done))
	return fmt.Sprintf(", about %v left", left.Round(time.Second))
}

// AnalyzeRun computes a run's per-handover metrics and stores them in the
// run's directory (HandoversFile).
func AnalyzeRun(sc *scenario.Scenario, res *testbed.Result, dir string) ([]report.Handover, error) {
	hs, err := report.Analyze(sc, res.Truth, res.Measurements)
	if err != nil {
		return nil, fmt.Errorf("analysing %s: %w", res.Variant, err)
	}
	if err := testbed.WriteJSON(filepath.Join(dir, HandoversFile), hs); err != nil {
		return nil, err
	}
	return hs, nil
}

func runUnit(ctx context.Context, opts Options, u Unit) (time.Duration, error) {
	sc, err := scenario.Load(filepath.Join(opts.Out, u.Scenario.File))
	if err != nil {
		return 0, err
	}
	v, err := testbed.ParseVariant(u.Variant)
	if err != nil {
		return 0, err
	}
	dir := u.Dir(opts.Out)
	// A unit that did not finish starts over.
	if err := os.RemoveAll(dir); err != nil {
		return 0, fmt.Errorf("removing an unfinished run: %w", err)
	}
	begin := time.Now()
	res, err := testbed.Run(ctx, testbed.Config{Scenario: sc, Variant: v, OutDir: dir, M2hod: opts.M2hod, DiagFlush: opts.DiagFlush, Log: opts.Log})
	if err != nil {
		return 0, err
	}
	if _, err := AnalyzeRun(sc, res, dir); err != nil {
		return 0, err
	}
	took := time.Since(begin)
	parallel := 0
	if opts.Parallel > 1 {
		parallel = opts.Parallel
	}
	return took, testbed.WriteJSON(filepath.Join(dir, doneFile), done{Finished: time.Now().UTC(), Took: took, Parallel: parallel})
}
