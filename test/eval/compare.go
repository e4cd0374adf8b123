package eval

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/m2ho/m2ho/pkg/diag"
)

// Two evaluations of one corpus draw the same scenarios from the same
// seeds, so one variant's units in both pair handover by handover. With
// the same daemon that is an A/A comparison of how they ran (one unit at
// a time against several, one machine against another); with two m2hod
// builds, what the second build changed on the whole corpus.

// EvaluationSide is one evaluation of a comparison.
type EvaluationSide struct {
	Dir          string `json:"dir"`
	M2hodVersion string `json:"m2hod_version,omitempty"`
	// Units is how many of the variant's units it finished.
	Units int `json:"units"`
	// Parallel lists how many units ran at once while they ran.
	Parallel []int `json:"parallel"`
}

// ScenarioComparison is one scenario both evaluations finished.
type ScenarioComparison struct {
	Scenario  string `json:"scenario"`
	Handovers int    `json:"handovers"`
	// HandoverGain is the second evaluation's mean handover throughput
	// over the first's, less 1; RunGain the same for whole runs.
	HandoverGain float64 `json:"handover_gain"`
	RunGain      float64 `json:"run_gain"`
	// LossFreeA and LossFreeB count its loss-free handovers in each.
	LossFreeA int `json:"loss_free_a"`
	LossFreeB int `json:"loss_free_b"`
}

// Comparison is one variant in two evaluations: the second's figures
// against the first's, paired, with bootstrap intervals over scenarios.
type Comparison struct {
	Variant   string               `json:"variant"`
	A         EvaluationSide       `json:"a"`
	B         EvaluationSide       `json:"b"`
	Paired    Paired               `json:"paired"`
	Scenarios []ScenarioComparison `json:"scenarios"`
}

// CompareEvaluations pairs variant's finished units in the evaluations in
// dirs a and b. A scenario of one name must be the same scenario in both
// (the same file): draws that differ do not pair.
func CompareEvaluations(a, b, variant string) (*Comparison, error) {
	ofVariant := func(u Unit) bool { return u.Variant == variant }
	ma, ua, err := loadFinished(a, ofVariant)
	if err != nil {
		return nil, err
	}
	mb, ub, err := loadFinished(b, ofVariant)
	if err != nil {
		return nil, err
	}
	if err := sameDraws(a, ma, b, mb); err != nil {
		return nil, err
	}
	c := compareUnits(variant, side(a, ma, ua), ua, side(b, mb, ub), ub)
	if c.Paired.Scenarios == 0 {
		return nil, fmt.Errorf("%s: no scenario finished in both %s and %s", variant, a, b)
	}
	return c, nil
}

// compareUnits pairs one variant's units of two evaluations.
func compareUnits(variant string, a EvaluationSide, ua []UnitResult, b EvaluationSide, ub []UnitResult) *Comparison {
	c := &Comparison{Variant: variant, A: a, B: b, Paired: comparePaired(a.Dir, ua, b.Dir, ub)}
	sameScenario(ua, ub, func(r, u *UnitResult) {
		pair := pairHandovers(r, u)
		sc := ScenarioComparison{Scenario: u.Scenario.Name, Handovers: len(pair.v)}
		var ta, tb float64
		for j := range pair.v {
			ta += pair.ref[j].ThroughputBps
			tb += pair.v[j].ThroughputBps
			if pair.ref[j].LossFree {
				sc.LossFreeA++
			}
			if pair.v[j].LossFree {
				sc.LossFreeB++
			}
		}
		if ta > 0 {
			sc.HandoverGain = tb/ta - 1
		}
		if r.RunGoodputBps > 0 {
			sc.RunGain = u.RunGoodputBps/r.RunGoodputBps - 1
		}
		c.Scenarios = append(c.Scenarios, sc)
	})
	return c
}

// sameDraws refuses two evaluations whose scenarios of one name differ.
func sameDraws(a string, ma *Manifest, b string, mb *Manifest) error {
	files := map[string]string{}
	for _, e := range ma.Corpus {
		files[e.Name] = e.File
	}
	var errs []error
	for _, e := range mb.Corpus {
		fa, ok := files[e.Name]
		if !ok {
			continue
		}
		da, err := os.ReadFile(filepath.Join(a, fa))
		if err != nil {
			return fmt.Errorf("reading %s's scenario: %w", e.Name, err)
		}
		db, err := os.ReadFile(filepath.Join(b, e.File))
		if err != nil {
			return fmt.Errorf("reading %s's scenario: %w", e.Name, err)
		}
		if !bytes.Equal(da, db) {
			errs = append(errs, fmt.Errorf("%s differs between %s and %s", e.Name, a, b))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("the evaluations drew different scenarios (another generator or corpus options): %w", errors.Join(errs...))
	}
	return nil
}

// side describes an evaluation's finished units of the compared variant.
func side(dir string, m *Manifest, units []UnitResult) EvaluationSide {
	s := EvaluationSide{Dir: dir, M2hodVersion: m.M2hodVersion, Units: len(units)}
	for _, u := range units {
		p := max(u.Done.Parallel, 1)
		if !slices.Contains(s.Parallel, p) {
			s.Parallel = append(s.Parallel, p)
		}
	}
	slices.Sort(s.Parallel)
	return s
}

// WriteComparison prints a comparison as Markdown.
func WriteComparison(w io.Writer, c *Comparison) error {
	p := c.Paired
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s: %s against %s\n\n", c.Variant, c.B.Dir, c.A.Dir)
	for _, s := range []struct {
		label string
		side  EvaluationSide
	}{{"A", c.A}, {"B", c.B}} {
		version := s.side.M2hodVersion
		if version == "" {
			version = "no m2hod"
		}
		fmt.Fprintf(&b, "- %s: %s, %d units finished, up to %v at a time, %s\n", s.label, s.side.Dir, s.side.Units, s.side.Parallel, version)
	}
	fmt.Fprintf(&b, "\nPaired on %d scenarios and %d handovers, B over A, with 95%% bootstrap intervals over scenarios.\n\n", p.Scenarios, p.Handovers)
	b.WriteString("| figure | B against A |\n|---|---:|\n")
	for _, class := range diag.ClassesWithAll() {
		if iv, ok := p.Gain[class]; ok {
			fmt.Fprintf(&b, "| handover throughput, %s | %s |\n", diag.ClassLabel(class), iv.Percent(true))
		}
	}
	fmt.Fprintf(&b, "| whole runs | %s |\n", p.RunGain.Percent(true))
	fmt.Fprintf(&b, "| convergence time, B/A | %s |\n", p.ConvergenceRatio.Percent(false))
	fmt.Fprintf(&b, "| loss-free handovers, A | %s |\n", p.ReferenceLossFree.Percent(false))
	fmt.Fprintf(&b, "| loss-free handovers, B | %s |\n", p.LossFree.Percent(false))
	b.WriteString("\n| scenario | handovers | handover throughput | whole run | loss-free A | loss-free B |\n|---|---:|---:|---:|---:|---:|\n")
	for _, s := range c.Scenarios {
		fmt.Fprintf(&b, "| %s | %d | %+.1f%% | %+.1f%% | %d | %d |\n", s.Scenario, s.Handovers, 100*s.HandoverGain, 100*s.RunGain, s.LossFreeA, s.LossFreeB)
	}
	_, err := w.Write(b.Bytes())
	return err
}
