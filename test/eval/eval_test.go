package eval

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/report"
)

func TestMain(m *testing.M) {
	// As the m2ho-testbed command does: no collector pauses in the
	// packet path.
	emu.TuneRuntime()
	os.Exit(m.Run())
}

func TestPrepareGeneratesEnoughHandoversAndResumes(t *testing.T) {
	out := t.TempDir()
	daemon := filepath.Join(t.TempDir(), "m2hod")
	require.NoError(t, os.WriteFile(daemon, []byte("one build"), 0o755))
	opts := Options{Out: out, Handovers: 30, Seed: 5, ScenarioDuration: time.Minute, Mobility: "driving", Scale: 0.1,
		Variants: []string{"cubic", "cubic+m2ho"}, M2hod: daemon}
	m, err := Prepare(opts)
	require.NoError(t, err)
	total := 0
	for i, e := range m.Corpus {
		assert.Equal(t, opts.Seed+uint64(i), e.Seed, "consecutive seeds")
		assert.FileExists(t, filepath.Join(out, e.File))
		classes := 0
		for _, n := range e.Classes {
			classes += n
		}
		assert.Equal(t, e.Handovers, classes, "every handover has a class")
		total += e.Handovers
	}
	assert.GreaterOrEqual(t, total, 30)
	assert.Less(t, total-m.Corpus[len(m.Corpus)-1].Handovers, 30, "no scenario more than needed")

	again, err := Prepare(opts)
	require.NoError(t, err)
	assert.Equal(t, m.Corpus, again.Corpus, "a second invocation reuses the corpus")
	assert.Equal(t, "35b5c9836731bd31e75d30f3186350b17b62adf380da9d852d822b741f05922a", again.M2hodSHA256)

	// another build of the daemon must not finish what this one began
	require.NoError(t, os.WriteFile(daemon, []byte("another build"), 0o755))
	_, err = Prepare(opts)
	assert.ErrorContains(t, err, "another m2hod binary")

	opts.Seed = 6
	_, err = Prepare(opts)
	assert.ErrorContains(t, err, "other parameters")

	// variants without the daemon record none
	opts.Out, opts.Variants = t.TempDir(), []string{"cubic"}
	plain, err := Prepare(opts)
	require.NoError(t, err)
	assert.Empty(t, plain.M2hodSHA256)
}

// rebuildOnFirstUnit stands for a rebuild of m2hod while an evaluation
// runs: when the progress reports the first unit done, it changes the
// binary at path.
type rebuildOnFirstUnit struct {
	t    *testing.T
	path string
	log  bytes.Buffer
}

func (w *rebuildOnFirstUnit) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("[1/2] done")) {
		assert.NoError(w.t, os.WriteFile(w.path, []byte("another build"), 0o755))
	}
	return w.log.Write(p)
}

// TestRunRefusesAnM2hodRebuiltMidway rebuilds m2hod after the first unit
// of an evaluation: the next unit must not run with the new binary, or
// one table would mix two daemons. The first unit is plain CUBIC, which
// runs no m2hod, so the binary need not be one.
func TestRunRefusesAnM2hodRebuiltMidway(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, AF_PACKET sockets and BPF")
	}
	daemon := filepath.Join(t.TempDir(), "m2hod")
	require.NoError(t, os.WriteFile(daemon, []byte("one build"), 0o755))
	progress := &rebuildOnFirstUnit{t: t, path: daemon}
	opts := Options{Out: t.TempDir(), Handovers: 1, Seed: 1, ScenarioDuration: 10 * time.Second, Mobility: "driving",
		Scale: 0.1, Variants: []string{"cubic", "cubic+m2ho"}, M2hod: daemon, Progress: progress}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := Run(ctx, opts)
	require.ErrorContains(t, err, "another m2hod binary", "progress:\n%s", progress.log.String())
	assert.Contains(t, progress.log.String(), "[1/2] done")
	assert.NotContains(t, progress.log.String(), "[2/2]", "the second unit never started")
	units := m.Units()
	require.Len(t, units, 2)
	assert.True(t, units[0].Finished(opts.Out))
	assert.False(t, units[1].Finished(opts.Out))
}

func TestOptionsAreValidated(t *testing.T) {
	base := Options{Out: "x", Handovers: 4, ScenarioDuration: time.Minute, Variants: []string{"cubic"}}
	tests := []struct {
		name    string
		edit    func(*Options)
		wantErr string
	}{
		{name: "no output", edit: func(o *Options) { o.Out = "" }, wantErr: "output directory"},
		{name: "no handovers", edit: func(o *Options) { o.Handovers = 0 }, wantErr: "at least one handover"},
		{name: "short scenarios", edit: func(o *Options) { o.ScenarioDuration = time.Second }, wantErr: "at least 10s"},
		{name: "unknown variant", edit: func(o *Options) { o.Variants = []string{"vegas"} }, wantErr: "vegas"},
		{name: "m2ho without daemon", edit: func(o *Options) { o.Variants = []string{"bbr+m2ho"} }, wantErr: "needs the m2hod binary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base
			tt.edit(&o)
			assert.ErrorContains(t, o.validate(), tt.wantErr)
		})
	}
	ok := base
	assert.NoError(t, ok.validate())
}

func TestUnitsRotateTheVariantOrder(t *testing.T) {
	m := &Manifest{Variants: []string{"a", "b", "c"}, Corpus: []CorpusEntry{{Name: "s1"}, {Name: "s2"}}}
	var got []string
	for _, u := range m.Units() {
		got = append(got, u.Scenario.Name+"/"+u.Variant)
	}
	assert.Equal(t, []string{"s1/a", "s1/b", "s1/c", "s2/b", "s2/c", "s2/a"}, got)
}

// summaries builds an analysis from per-variant overall and per-class
// throughput (Mbit/s) and convergence (s).
func analysisOf(rows map[string]map[string][2]float64) *Analysis {
	a := &Analysis{Summaries: map[string][]report.Summary{}}
	for v, classes := range rows {
		for _, class := range report.ClassOrder {
			x, ok := classes[class]
			if !ok {
				continue
			}
			a.Summaries[v] = append(a.Summaries[v], report.Summary{
				Variant: v, Class: class, Handovers: 10, LossFree: 9,
				ThroughputBps: x[0] * 1e6, ConvergenceTime: time.Duration(x[1] * float64(time.Second)),
			})
		}
	}
	return a
}

func TestGoalsAndTable2(t *testing.T) {
	a := analysisOf(map[string]map[string][2]float64{
		"cubic":      {"sub6_mmwave": {10, 9}, "mmwave_sub6": {30, 3}, report.ClassOverall: {20, 6}},
		"cubic+m2ho": {"sub6_mmwave": {25, 2}, "mmwave_sub6": {27, 1}, report.ClassOverall: {30, 1.5}},
		"bbr":        {report.ClassOverall: {40, 2}},
		"bbr+m2ho":   {report.ClassOverall: {39.6, 2}},
	})
	byName := map[string]Goal{}
	for _, g := range goals(a) {
		byName[g.Name] = g
	}
	assert.InDelta(t, 0.5, byName["handover throughput over CUBIC, overall"].Value, 1e-9)
	assert.True(t, byName["handover throughput over CUBIC, overall"].Met)
	assert.InDelta(t, 1.5, byName["handover throughput over CUBIC, sub6 to mmWave"].Value, 1e-9)
	assert.InDelta(t, 0.25, byName["convergence time relative to CUBIC"].Value, 1e-9)
	assert.True(t, byName["loss-free handovers with m2ho"].Met, "9 of 10")
	never := byName["no handover class where CUBIC + m2ho is below CUBIC"]
	assert.False(t, never.Met)
	assert.Contains(t, never.Measured, "mmwave_sub6 -10.0%")
	assert.InDelta(t, 0.99, byName["BBR + m2ho relative to BBR"].Value, 1e-9)
	assert.True(t, byName["BBR + m2ho relative to BBR"].Met)

	var buf bytes.Buffer
	writeTable2(&buf, a, "cubic+m2ho", []string{"cubic"})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 5, "header, separator, two classes, overall")
	// eta0 = (25 - 10) / 10, eta1 = (9 - 2) / 9.
	assert.Equal(t, "| sub6-mmW (10) | 25.0 | 2.0 | 10.0 | 150 | 9.0 | 78 |", lines[2])
	assert.Equal(t, "| Overall (10) | 30.0 | 1.5 | 20.0 | 50 | 6.0 | 75 |", lines[4])
}

func TestComparableKeepsScenariosEveryVariantFinished(t *testing.T) {
	m := &Manifest{Variants: []string{"a", "b"}}
	s1, s2 := CorpusEntry{Name: "s1"}, CorpusEntry{Name: "s2"}
	results := []UnitResult{
		{Unit: Unit{Scenario: s1, Variant: "a"}}, {Unit: Unit{Scenario: s1, Variant: "b"}},
		{Unit: Unit{Scenario: s2, Variant: "b"}},
	}
	got := comparable(m, results)
	require.Len(t, got, 2)
	for _, r := range got {
		assert.Equal(t, "s1", r.Scenario.Name)
	}
}

// TestSmokeEvaluation runs the whole harness on a tiny corpus: two
// variants over four handovers, then resumes, which must run nothing. It
// checks the files, not the gains.
func TestSmokeEvaluation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, AF_PACKET sockets and BPF")
	}
	m2hod := filepath.Join(t.TempDir(), "m2hod")
	build := exec.Command("go", "build", "-o", m2hod, "github.com/m2ho/m2ho/cmd/m2hod")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run(), "building m2hod")

	out := t.TempDir()
	var progress bytes.Buffer
	opts := Options{Out: out, Handovers: 4, Seed: 1, ScenarioDuration: 15 * time.Second, Mobility: "driving",
		Scale: 0.1, Variants: []string{"cubic", "cubic+m2ho"}, M2hod: m2hod, Progress: &progress}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := Run(ctx, opts)
	require.NoError(t, err, "progress:\n%s", progress.String())
	assert.Contains(t, progress.String(), "2 of 2 units to run")
	require.Len(t, m.Corpus, 1)
	assert.Equal(t, 4, m.Corpus[0].Handovers)

	path, err := WriteResults(out)
	require.NoError(t, err)
	md, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, want := range []string{"## Goals", "## Table 2", "## Table 3", "## Table 4", "## Table 5", "Receiver model check", "## Loss-free handovers", "## m2hod overhead"} {
		assert.Contains(t, string(md), want)
	}
	for _, f := range []string{ResultsJSON, HandoversCSV, plotThroughputCDF, plotConvergenceCDF, plotLossFree} {
		assert.FileExists(t, filepath.Join(out, f))
	}

	_, results, err := Load(out)
	require.NoError(t, err)
	require.Len(t, results, 2)
	for _, r := range results {
		assert.GreaterOrEqual(t, len(r.Handovers), m.Corpus[0].Handovers, "%s: every handover analysed", r.Variant)
		if r.Variant == "cubic+m2ho" {
			require.NotNil(t, r.Daemon, "m2hod's usage is recorded")
			assert.Positive(t, r.Daemon.PeakRSSBytes)
			assert.Empty(t, r.Daemon.Error)
		} else {
			assert.Nil(t, r.Daemon)
		}
	}
	f, err := os.Open(filepath.Join(out, HandoversCSV))
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	assert.Len(t, rows, 1+len(results[0].Handovers)+len(results[1].Handovers), "a header and a row per handover")

	progress.Reset()
	_, err = Run(ctx, opts)
	require.NoError(t, err)
	assert.Contains(t, progress.String(), "0 of 2 units to run", "a finished evaluation resumes with nothing to do")
}
