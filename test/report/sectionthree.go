package report

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/traffic"
)

// The paper's section 3 observations with plain CUBIC on real cells: what
// the testbed must reproduce before m2ho's relief in it means much.
const (
	PaperCwndCut              = 0.483
	PaperConvergence          = 6.7  // s, any handover
	PaperConvergenceSub6MmW   = 17.2 // s, sub-6 to mmWave
	PaperThroughputAfter      = -0.263
	PaperReorderShare         = 0.184
	PaperReorderCwndCut       = 0.633
	PaperTargetLossShare      = 0.177
	PaperTargetLossCwndCut    = 0.704
	PaperStaticMmWaveUse      = 0.80
	PaperMobileMmWaveUse      = 0.472
	FidelityTolerance         = 0.25
	throughputAfterWindow     = 3 * time.Second
	staticMeasurementSkipping = 10 * time.Second
)

// ObservedRun is one run of a sender without m2ho.
type ObservedRun struct {
	Scenario     *scenario.Scenario
	Truth        *emu.GroundTruth
	Measurements *traffic.Measurements
	Handovers    []Handover
}

// Observation is one of the paper's figures measured in the testbed.
type Observation struct {
	Name  string  `json:"name"`
	Paper float64 `json:"paper"`
	// Seconds is set for times, else the figures are fractions.
	Seconds bool    `json:"seconds"`
	Value   float64 `json:"value"`
	// N is how many handovers (or runs) the value rests on.
	N int `json:"n"`
	// LowerBound marks a value that counts unconverged handovers with
	// the time they were observed: the true mean is at least this.
	LowerBound bool `json:"lower_bound,omitempty"`
	Valid      bool `json:"valid"`
}

// Within reports whether the value lies within FidelityTolerance of the
// paper's, relative to it.
func (o Observation) Within() bool {
	return o.Valid && math.Abs(o.Value/o.Paper-1) <= FidelityTolerance
}

func (o Observation) format(v float64) string {
	if o.Seconds {
		return fmt.Sprintf("%.1f s", v)
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

// String is the value as the table prints it.
func (o Observation) String() string {
	if !o.Valid {
		return "-"
	}
	s := o.format(o.Value)
	if o.LowerBound {
		s = ">= " + s
	}
	return fmt.Sprintf("%s (n=%d)", s, o.N)
}

// SectionThree measures the paper's section 3 observations on runs of a
// sender without m2ho over handover scenarios.
func SectionThree(runs []ObservedRun) ([]Observation, error) {
	var all, sub6MmW, reordered, lost []Handover
	// The goodput of the 3 s after and before every handover, summed: a
	// ratio per handover would let one whose 3 s before were a stall
	// (a sender waiting out a retransmission timeout) outweigh all others.
	var afterSum, beforeSum float64
	var afterN int
	var mmWaveGood, mmWaveCap float64
	for _, r := range runs {
		for _, h := range r.Handovers {
			if h.Procedure != emu.ProcedureHandover {
				continue
			}
			all = append(all, h)
			if h.Class == diag.ClassSub6MmWave {
				sub6MmW = append(sub6MmW, h)
			}
			if h.Reordered {
				reordered = append(reordered, h)
			}
			if h.OverflowDrops > 0 {
				lost = append(lost, h)
			}
			before := meanGoodput(r.Measurements, h.ExecAt-throughputAfterWindow, h.ExecAt)
			after := meanGoodput(r.Measurements, h.ExecAt, h.ExecAt+throughputAfterWindow)
			if before > 0 {
				afterSum += after
				beforeSum += before
				afterN++
			}
		}
		good, capacity, err := mmWaveUse(r)
		if err != nil {
			return nil, err
		}
		mmWaveGood += good
		mmWaveCap += capacity
	}
	conv := func(name string, paper float64, hs []Handover) Observation {
		o := Observation{Name: name, Paper: paper, Seconds: true, N: len(hs), Valid: len(hs) > 0}
		for _, h := range hs {
			o.Value += h.ConvergenceTime.Seconds() / float64(len(hs))
			if !h.Converged {
				o.LowerBound = true
			}
		}
		return o
	}
	obs := []Observation{
		{Name: "cwnd cut after a handover", Paper: PaperCwndCut, Value: meanCwndDrop(all), N: len(all), Valid: len(all) > 0},
		conv("convergence after a handover", PaperConvergence, all),
		conv("convergence after sub-6 to mmWave", PaperConvergenceSub6MmW, sub6MmW),
		{Name: "throughput in the 3 s after a handover against the 3 s before", Paper: PaperThroughputAfter, N: afterN, Valid: afterN > 0},
		{Name: "handovers with source-cell reordering", Paper: PaperReorderShare, Value: share(len(reordered), len(all)), N: len(all), Valid: len(all) > 0},
		{Name: "cwnd cut after reordering", Paper: PaperReorderCwndCut, Value: meanCwndDrop(reordered), N: len(reordered), Valid: len(reordered) > 0},
		{Name: "handovers with target-cell loss", Paper: PaperTargetLossShare, Value: share(len(lost), len(all)), N: len(all), Valid: len(all) > 0},
		{Name: "cwnd cut after target-cell loss", Paper: PaperTargetLossCwndCut, Value: meanCwndDrop(lost), N: len(lost), Valid: len(lost) > 0},
		{Name: "TCP throughput over mmWave capacity, mobile", Paper: PaperMobileMmWaveUse, Value: share2(mmWaveGood, mmWaveCap), N: len(runs), Valid: mmWaveCap > 0},
	}
	if afterN > 0 {
		obs[3].Value = afterSum/beforeSum - 1
	}
	return obs, nil
}

// StaticMmWaveUse is the paper's static check: TCP over a mmWave cell
// without handovers reaches more than 80% of its capacity. It is the IP
// rate of the goodput after the first 10 s (slow start and the first
// sawtooth) over the cell's capacity in that time.
func StaticMmWaveUse(runs []ObservedRun) (Observation, error) {
	o := Observation{Name: "TCP throughput over mmWave capacity, static", Paper: PaperStaticMmWaveUse, N: len(runs)}
	var good, capacity float64
	for _, r := range runs {
		if len(r.Scenario.Cells) != 1 || len(r.Measurements.Goodput) == 0 {
			return o, fmt.Errorf("scenario %s is not a static run on one cell", r.Scenario.Name)
		}
		caps, err := emu.CellCapacities(r.Scenario)
		if err != nil {
			return o, err
		}
		end := r.Measurements.Goodput[len(r.Measurements.Goodput)-1].At
		good += (bytesAt(r.Measurements, end) - bytesAt(r.Measurements, staticMeasurementSkipping)) * traffic.IPPerPayload
		capacity += caps[r.Scenario.Cells[0].Name].Bytes(staticMeasurementSkipping, end)
	}
	o.Value, o.Valid = share2(good, capacity), capacity > 0
	return o, nil
}

// mmWaveUse is the IP bytes received and the capacity offered while a
// mmWave cell served, interruptions excluded.
func mmWaveUse(r ObservedRun) (good, capacity float64, err error) {
	caps, err := emu.CellCapacities(r.Scenario)
	if err != nil {
		return 0, 0, err
	}
	if len(r.Measurements.Goodput) == 0 {
		return 0, 0, nil
	}
	end := r.Measurements.Goodput[len(r.Measurements.Goodput)-1].At
	serving, from := r.Scenario.InitialCell, time.Duration(0)
	stretch := func(to time.Duration) {
		c, ok := r.Scenario.Cell(serving)
		if !ok || c.Band != diag.BandMmWave || to <= from {
			return
		}
		good += (bytesAt(r.Measurements, to) - bytesAt(r.Measurements, from)) * traffic.IPPerPayload
		capacity += caps[serving].Bytes(from, to)
	}
	for _, h := range r.Truth.Handovers {
		stretch(min(h.ExecAt, end))
		serving, from = h.Target, h.CompleteAt
	}
	stretch(end)
	return good, capacity, nil
}

func meanCwndDrop(hs []Handover) float64 {
	if len(hs) == 0 {
		return 0
	}
	var sum float64
	for _, h := range hs {
		sum += h.CwndDrop
	}
	return sum / float64(len(hs))
}

func share(n, of int) float64 { return share2(float64(n), float64(of)) }

func share2(x, of float64) float64 {
	if of == 0 {
		return 0
	}
	return x / of
}

// WriteSectionThree prints the observations of several senders side by
// side with the paper's, marking those within FidelityTolerance.
func WriteSectionThree(w io.Writer, senders []string, obs map[string][]Observation) {
	fmt.Fprint(w, "| observation (plain sender, no m2ho) | paper |")
	sep := "|---|---:|"
	for _, s := range senders {
		fmt.Fprintf(w, " %s | within ±%.0f%% |", Title(s), 100*FidelityTolerance)
		sep += "---:|:---:|"
	}
	fmt.Fprintf(w, "\n%s\n", sep)
	if len(senders) == 0 {
		return
	}
	for i, first := range obs[senders[0]] {
		fmt.Fprintf(w, "| %s | %s |", first.Name, first.format(first.Paper))
		for _, s := range senders {
			o := obs[s][i]
			mark := "no"
			if o.Within() {
				mark = "yes"
			}
			fmt.Fprintf(w, " %s | %s |", o, mark)
		}
		fmt.Fprintln(w)
	}
}
