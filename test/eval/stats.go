package eval

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// The confidence intervals of the evaluation are percentile bootstrap
// intervals over scenarios: handovers of one scenario share its cells,
// its load and the sender's state, so the scenario, not the handover, is
// the independent unit that is resampled. Every figure is a ratio of sums
// over the resampled scenarios (a mean of paired throughputs, a share of
// handovers, precision), so one resampling routine serves them all.
//
// The corpus is generated per mobility pattern, each pattern's scenarios
// until it has its number of handovers: how many scenarios of each
// pattern a corpus holds is fixed by its design, not drawn. The bootstrap
// follows that design and resamples each pattern's scenarios among
// themselves, as many as it has, so the intervals do not count, as
// uncertainty, the mixes of patterns the design never makes. A figure
// resting on fewer than minStratumScenarios scenarios of some pattern (the
// extra variants run on one scenario of each) resamples all its
// scenarios together: a pattern's one or two scenarios cannot say how
// its scenarios spread.
const (
	bootstrapResamples = 10000
	// bootstrapSeed fixes the resampling: the same results give the
	// same intervals.
	bootstrapSeed = 0x6d32686f
	confidence    = 0.95
	// minStratumScenarios is the fewest scenarios a pattern must have for
	// the bootstrap to resample within patterns.
	minStratumScenarios = 5
)

// cluster is one scenario's contribution to a ratio of sums; stratum is
// the scenario's mobility pattern (empty where none is known).
type cluster struct {
	num, den float64
	stratum  string
}

// Interval is an estimate with its 95% confidence interval.
type Interval struct {
	Value float64 `json:"value"`
	Low   float64 `json:"low"`
	High  float64 `json:"high"`
	// Scenarios is how many scenarios the figure rests on.
	Scenarios int `json:"scenarios"`
	// Valid is false when no scenario had anything to count.
	Valid bool `json:"valid"`
}

// ratioInterval is sum(num)/sum(den) over the clusters with its bootstrap
// interval, resampled within strata where each has enough clusters;
// shift is subtracted from every value (1 turns a ratio into a gain).
// Resamples whose denominator is zero are left out.
func ratioInterval(clusters []cluster, shift float64) Interval {
	var num, den float64
	for _, c := range clusters {
		num += c.num
		den += c.den
	}
	if len(clusters) == 0 || den == 0 {
		return Interval{Scenarios: len(clusters)}
	}
	iv := Interval{Value: num/den - shift, Scenarios: len(clusters), Valid: true}
	strata := resamplingStrata(clusters)
	rng := rand.New(rand.NewPCG(bootstrapSeed, uint64(len(clusters))))
	estimates := make([]float64, 0, bootstrapResamples)
	for range bootstrapResamples {
		var n, d float64
		for _, stratum := range strata {
			for range stratum {
				c := stratum[rng.IntN(len(stratum))]
				n += c.num
				d += c.den
			}
		}
		if d != 0 {
			estimates = append(estimates, n/d-shift)
		}
	}
	slices.Sort(estimates)
	iv.Low = quantile(estimates, (1-confidence)/2)
	iv.High = quantile(estimates, 1-(1-confidence)/2)
	return iv
}

// resamplingStrata groups the clusters by stratum, in the order the strata
// first appear, or returns them as one group when a stratum has fewer
// than minStratumScenarios clusters (or all share one stratum).
func resamplingStrata(clusters []cluster) [][]cluster {
	index := map[string]int{}
	var strata [][]cluster
	for _, c := range clusters {
		i, ok := index[c.stratum]
		if !ok {
			i = len(strata)
			index[c.stratum] = i
			strata = append(strata, nil)
		}
		strata[i] = append(strata[i], c)
	}
	for _, s := range strata {
		if len(s) < minStratumScenarios {
			return [][]cluster{clusters}
		}
	}
	return strata
}

// BootstrapRatio is sum(num)/sum(den) - shift over scenarios, num[i] and
// den[i] being scenario i's, with the evaluation's bootstrap interval:
// for figures computed outside an evaluation's units (the fleet's runs).
func BootstrapRatio(num, den []float64, shift float64) Interval {
	clusters := make([]cluster, len(num))
	for i := range num {
		clusters[i] = cluster{num: num[i], den: den[i]}
	}
	return ratioInterval(clusters, shift)
}

// quantile of sorted values, linearly interpolated.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (pos-float64(lo))*(sorted[hi]-sorted[lo])
}

// AtLeast reports whether the whole interval lies at or above x.
func (iv Interval) AtLeast(x float64) bool { return iv.Valid && iv.Low >= x }

// AtMost reports whether the whole interval lies at or below x.
func (iv Interval) AtMost(x float64) bool { return iv.Valid && iv.High <= x }

// Percent prints the interval in percent: "+12.3% [+5.1, +19.0]" with
// sign for gains, "85.2% [80.1, 90.0]" without.
func (iv Interval) Percent(signed bool) string {
	if !iv.Valid {
		return "-"
	}
	f := "%.1f"
	if signed {
		f = "%+.1f"
	}
	return fmt.Sprintf(f+"%% ["+f+", "+f+"]", 100*iv.Value, 100*iv.Low, 100*iv.High)
}

// HalfWidth is half the interval's width.
func (iv Interval) HalfWidth() float64 { return (iv.High - iv.Low) / 2 }
