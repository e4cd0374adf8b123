package eval

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/test/report"
)

// phasedRun is a unit whose handovers have the given loss outcomes and
// phases.
func phasedRun(scenario, variant string, lossFree []bool, phases []report.Phases) UnitResult {
	u := UnitResult{Unit: Unit{Scenario: CorpusEntry{Name: scenario}, Variant: variant}}
	for i := range lossFree {
		u.Handovers = append(u.Handovers, report.Handover{Index: i, LossFree: lossFree[i], Phases: phases[i]})
	}
	return u
}

func TestPairPhasesGroupsHandoversByLossOutcome(t *testing.T) {
	even := report.Phases{BeforeReport: 100, Preparation: 10, AfterExec: 20, Later: 80}
	clamped := report.Phases{BeforeReport: 90, Preparation: 5, AfterExec: 15, Later: 80}
	ref := []UnitResult{
		phasedRun("s0", "scubic", []bool{false, true, false, true}, []report.Phases{even, even, even, even}),
		phasedRun("s1", "scubic", []bool{false}, []report.Phases{even}),
	}
	m2ho := []UnitResult{
		phasedRun("s0", "scubic+m2ho", []bool{true, true, false, false}, []report.Phases{clamped, even, even, clamped}),
		phasedRun("s1", "scubic+m2ho", []bool{true}, []report.Phases{clamped}),
		// Unpaired: a scenario the reference did not finish.
		phasedRun("lonely", "scubic+m2ho", []bool{true}, []report.Phases{{Later: 1e9}}),
	}
	costs := pairPhases(ref, m2ho)
	require.Len(t, costs, len(outcomes))
	byOutcome := map[string]PhaseCost{}
	for _, c := range costs {
		byOutcome[c.Outcome] = c
	}

	made := byOutcome[OutcomeMadeLossFree]
	assert.Equal(t, 2, made.Handovers)
	assert.Equal(t, even.Add(even), made.Reference)
	assert.Equal(t, clamped.Add(clamped), made.Variant)
	assert.InDelta(t, -0.5, made.Gains["preparation"].Value, 1e-9)
	assert.InDelta(t, -0.10, made.Gains["before_report"].Value, 1e-9)
	assert.InDelta(t, -0.25, made.Gains["after_exec"].Value, 1e-9)
	assert.InDelta(t, 0, made.Gains["later"].Value, 1e-9)
	assert.InDelta(t, 190.0/210-1, made.Gains["window"].Value, 1e-9)
	assert.Equal(t, 2, made.Gains["window"].Scenarios)

	assert.Equal(t, 1, byOutcome[OutcomeBothLossFree].Handovers)
	assert.InDelta(t, 0, byOutcome[OutcomeBothLossFree].Gains["window"].Value, 1e-9)
	assert.Equal(t, 1, byOutcome[OutcomeBothLossy].Handovers)
	lossy := byOutcome[OutcomeMadeLossy]
	assert.Equal(t, 1, lossy.Handovers)
	assert.Equal(t, 1, lossy.Gains["window"].Scenarios)

	var out bytes.Buffer
	writePhases(&out, &Analysis{Reference: "scubic", Headline: "scubic+m2ho", Phases: costs})
	assert.Contains(t, out.String(), "| lossy with the reference, loss-free with the variant | 2 | -10.0% [")
}

func TestPairPhasesWithoutPairedHandovers(t *testing.T) {
	costs := pairPhases(nil, []UnitResult{phasedRun("s0", "scubic+m2ho", []bool{true}, []report.Phases{{Later: 1}})})
	for _, c := range costs {
		assert.Zero(t, c.Handovers)
		assert.False(t, c.Gains["window"].Valid, c.Outcome)
	}
}
