package eval

import (
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/report"
)

// Paired compares a variant with the reference on the scenarios both
// finished, handover by handover (the same scenario gives both the same
// handovers), with bootstrap intervals over those scenarios.
type Paired struct {
	Variant   string `json:"variant"`
	Reference string `json:"reference"`
	Scenarios int    `json:"scenarios"`
	Handovers int    `json:"handovers"`
	// Gain is the mean handover throughput over the reference's, less 1,
	// per class and overall.
	Gain map[string]Interval `json:"throughput_gain"`
	// ConvergenceRatio is the mean convergence time over the reference's,
	// overall; ConvergenceByClass per class and overall.
	ConvergenceRatio   Interval            `json:"convergence_ratio"`
	ConvergenceByClass map[string]Interval `json:"convergence_ratio_by_class"`
	// LossFree is the variant's share of loss-free handovers,
	// ReferenceLossFree the reference's on the same handovers.
	LossFree          Interval `json:"loss_free"`
	ReferenceLossFree Interval `json:"reference_loss_free"`
	// RunGain is the variant's goodput over whole runs (after their
	// startup) over the reference's, less 1.
	RunGain Interval `json:"run_gain"`
}

// scenarioPair is one scenario's handovers under the reference and the
// variant, matched by index, and the scenario's mobility pattern.
type scenarioPair struct {
	ref, v   []report.Handover
	mobility string
}

// sameScenario calls each with the reference's and the variant's unit
// of every scenario both finished, in the variant's order.
func sameScenario(ref, v []UnitResult, each func(r, u *UnitResult)) {
	byName := map[string]*UnitResult{}
	for i := range ref {
		byName[ref[i].Scenario.Name] = &ref[i]
	}
	for i := range v {
		if r, ok := byName[v[i].Scenario.Name]; ok {
			each(r, &v[i])
		}
	}
}

// pairScenarios matches the handovers of two variants scenario by
// scenario, for the scenarios both finished.
func pairScenarios(ref, v []UnitResult) []scenarioPair {
	var pairs []scenarioPair
	sameScenario(ref, v, func(r, u *UnitResult) {
		pairs = append(pairs, pairHandovers(r, u))
	})
	return pairs
}

// pairHandovers matches the handovers of one scenario's units by index.
func pairHandovers(r, u *UnitResult) scenarioPair {
	index := map[int]report.Handover{}
	for _, h := range r.Handovers {
		index[h.Index] = h
	}
	p := scenarioPair{mobility: u.Scenario.Mobility}
	for _, h := range u.Handovers {
		if rh, ok := index[h.Index]; ok && rh.Class == h.Class {
			p.ref = append(p.ref, rh)
			p.v = append(p.v, h)
		}
	}
	return p
}

// comparePaired computes a variant's paired figures against the reference.
func comparePaired(refName string, ref []UnitResult, name string, v []UnitResult) Paired {
	pairs := pairScenarios(ref, v)
	p := Paired{Variant: name, Reference: refName, Scenarios: len(pairs), Gain: map[string]Interval{}, ConvergenceByClass: map[string]Interval{}}
	for _, class := range diag.ClassesWithAll() {
		tput := make([]cluster, 0, len(pairs))
		conv := make([]cluster, 0, len(pairs))
		for _, sp := range pairs {
			t, c := cluster{stratum: sp.mobility}, cluster{stratum: sp.mobility}
			for i := range sp.v {
				if class == diag.AllClasses || sp.v[i].Class == class {
					t.num += sp.v[i].ThroughputBps
					t.den += sp.ref[i].ThroughputBps
					c.num += sp.v[i].ConvergenceTime.Seconds()
					c.den += sp.ref[i].ConvergenceTime.Seconds()
				}
			}
			tput, conv = append(tput, t), append(conv, c)
		}
		if iv := ratioInterval(tput, 1); iv.Valid {
			p.Gain[class] = iv
		}
		if iv := ratioInterval(conv, 0); iv.Valid {
			p.ConvergenceByClass[class] = iv
		}
	}
	p.ConvergenceRatio = p.ConvergenceByClass[diag.AllClasses]
	var lossFree, refLossFree []cluster
	for _, sp := range pairs {
		l, rl := cluster{stratum: sp.mobility}, cluster{stratum: sp.mobility}
		for i := range sp.v {
			l.den++
			rl.den++
			if sp.v[i].LossFree {
				l.num++
			}
			if sp.ref[i].LossFree {
				rl.num++
			}
		}
		p.Handovers += len(sp.v)
		lossFree, refLossFree = append(lossFree, l), append(refLossFree, rl)
	}
	p.LossFree = ratioInterval(lossFree, 0)
	p.ReferenceLossFree = ratioInterval(refLossFree, 0)
	p.RunGain = ratioInterval(pairRuns(ref, v), 1)
	return p
}

// pairRuns is the whole-run goodput of each scenario both finished: the
// variant's over the reference's.
func pairRuns(ref, v []UnitResult) []cluster {
	var runs []cluster
	sameScenario(ref, v, func(r, u *UnitResult) {
		runs = append(runs, cluster{num: u.RunGoodputBps, den: r.RunGoodputBps, stratum: u.Scenario.Mobility})
	})
	return runs
}
