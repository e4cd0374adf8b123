package eval

import (
	"fmt"
	"io"

	"github.com/m2ho/m2ho/test/report"
)

// Loss outcomes of a handover paired across two variants: whether each
// retransmitted in it (report.Handover.LossFree).
const (
	OutcomeMadeLossFree = "made_loss_free"
	OutcomeBothLossFree = "both_loss_free"
	OutcomeBothLossy    = "both_lossy"
	OutcomeMadeLossy    = "made_lossy"
)

// outcomes in the order of the table.
var outcomes = []string{OutcomeMadeLossFree, OutcomeBothLossFree, OutcomeBothLossy, OutcomeMadeLossy}

var outcomeTitles = map[string]string{
	OutcomeMadeLossFree: "lossy with the reference, loss-free with the variant",
	OutcomeBothLossFree: "loss-free with both",
	OutcomeBothLossy:    "lossy with both",
	OutcomeMadeLossy:    "loss-free with the reference, lossy with the variant",
}

// PhaseCost is what a variant delivered against the reference in each
// phase of the handovers of one loss outcome, paired handover by
// handover: the gain (variant bytes over reference bytes, minus one) with
// its interval over scenarios.
type PhaseCost struct {
	Outcome   string              `json:"outcome"`
	Handovers int                 `json:"handovers"`
	Variant   report.Phases       `json:"variant_bytes"`
	Reference report.Phases       `json:"reference_bytes"`
	Gains     map[string]Interval `json:"gains"`
}

// Phase names of PhaseCost.Gains, in the order of the table.
var phaseNames = []string{"before_report", "preparation", "after_exec", "later", "window"}

func phaseValues(p report.Phases) []float64 {
	return []float64{p.BeforeReport, p.Preparation, p.AfterExec, p.Later, p.BeforeReport + p.Preparation + p.AfterExec + p.Later}
}

// pairPhases pairs the handovers of v with the reference's (same
// scenario, same index) and sums their phases by loss outcome, one
// cluster per scenario for the intervals.
func pairPhases(ref, v []UnitResult) []PhaseCost {
	costs := make(map[string]*PhaseCost, len(outcomes))
	clusters := make(map[string][][]cluster, len(outcomes))
	for _, o := range outcomes {
		costs[o] = &PhaseCost{Outcome: o, Gains: map[string]Interval{}}
	}
	sameScenario(ref, v, func(ru, u *UnitResult) {
		refs := map[int]report.Handover{}
		for _, h := range ru.Handovers {
			refs[h.Index] = h
		}
		perOutcome := map[string][]cluster{}
		for _, h := range u.Handovers {
			r, ok := refs[h.Index]
			if !ok {
				continue
			}
			o := pairOutcome(r.LossFree, h.LossFree)
			c := costs[o]
			c.Handovers++
			c.Variant, c.Reference = c.Variant.Add(h.Phases), c.Reference.Add(r.Phases)
			if perOutcome[o] == nil {
				perOutcome[o] = make([]cluster, len(phaseNames))
				for i := range perOutcome[o] {
					perOutcome[o][i].stratum = u.Scenario.Mobility
				}
			}
			vv, rv := phaseValues(h.Phases), phaseValues(r.Phases)
			for i := range phaseNames {
				perOutcome[o][i].num += vv[i]
				perOutcome[o][i].den += rv[i]
			}
		}
		for o, cs := range perOutcome {
			clusters[o] = append(clusters[o], cs)
		}
	})
	out := make([]PhaseCost, 0, len(outcomes))
	for _, o := range outcomes {
		c := costs[o]
		for i, name := range phaseNames {
			var cs []cluster
			for _, scenario := range clusters[o] {
				cs = append(cs, scenario[i])
			}
			c.Gains[name] = ratioInterval(cs, 1)
		}
		out = append(out, *c)
	}
	return out
}

func pairOutcome(refLossFree, variantLossFree bool) string {
	switch {
	case !refLossFree && variantLossFree:
		return OutcomeMadeLossFree
	case refLossFree && variantLossFree:
		return OutcomeBothLossFree
	case !refLossFree:
		return OutcomeBothLossy
	default:
		return OutcomeMadeLossy
	}
}

// writePhases tabulates the headline variant's PhaseCosts: where, around
// a handover, the window it kept (or the loss it took) made a difference.
func writePhases(w io.Writer, a *Analysis) {
	if len(a.Phases) == 0 {
		return
	}
	fmt.Fprintf(w, "%s against %s, handover by handover on the same scenarios, by whether each retransmitted from the handover's report until %v after its completion: the bytes delivered in each phase of the [-%v, +%v] window of execution, as a gain with its 95%% interval over scenarios. Phases: before the report (the clamps of earlier handovers and of predictions nothing followed), report to execution (the Preparation clamp), the %v after execution (the ramp), and the rest of the window.\n\n",
		report.Title(a.Headline), report.Title(a.Reference), report.LossFreeAfter, report.ThroughputWindow, report.ThroughputWindow, report.RampPhase)
	fmt.Fprintln(w, "| handovers | n | before report | report to execution | first second | rest | whole window |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, c := range a.Phases {
		fmt.Fprintf(w, "| %s | %d |", outcomeTitles[c.Outcome], c.Handovers)
		for _, name := range phaseNames {
			fmt.Fprintf(w, " %s |", c.Gains[name].Percent(true))
		}
		fmt.Fprintln(w)
	}
}
