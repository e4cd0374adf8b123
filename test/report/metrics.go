// Package report computes the evaluation metrics of DESIGN.md ("Evaluation
// metrics", after the paper's section 6) from a testbed run: per handover,
// its throughput, convergence time, whether it was loss-free and what the
// sender's window did; and it summarises, tabulates and plots them.
package report

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/traffic"
)

// Metric windows of the paper's evaluation.
const (
	// ThroughputWindow: handover throughput is the mean goodput from 5 s
	// before to 5 s after execution.
	ThroughputWindow = 5 * time.Second
	// ConvergenceWindow and ConvergenceShare: converged when the 1-s
	// goodput reaches 75% of the target cell's capacity.
	ConvergenceWindow = time.Second
	ConvergenceShare  = 0.75
	// LossFreeAfter: loss-free means no retransmission from prediction
	// until 2 s after execution.
	LossFreeAfter = 2 * time.Second
	// CwndWindow is where the cwnd minimum after execution is looked for.
	CwndWindow = 3 * time.Second
)

// Handover is the metrics of one handover (or radio link failure).
type Handover struct {
	Index     int           `json:"index"`
	Procedure string        `json:"procedure"`
	Class     string        `json:"class"`
	ExecAt    time.Duration `json:"exec_ns"`
	// ThroughputBps is the mean goodput in [exec-5s, exec+5s] (clipped to
	// the run).
	ThroughputBps float64 `json:"throughput_bps"`
	// ConvergenceTime runs from execution to the end of the first 1-s
	// window, wholly after execution, whose goodput reaches 75% of the
	// target's capacity in that window. When that never happens before
	// the next handover (or the run's end) Converged is false and
	// ConvergenceTime is the time observed.
	ConvergenceTime time.Duration `json:"convergence_ns"`
	Converged       bool          `json:"converged"`
	// Retransmissions by the sender from prediction (taken as the
	// measurement report, the earliest a predictor can act) until 2 s
	// after execution; LossFree when zero.
	Retransmissions uint32 `json:"retransmissions"`
	LossFree        bool   `json:"loss_free"`
	// CwndBefore is the last cwnd before the handover began (its
	// measurement report; the failure, for a radio link failure), CwndMin
	// the smallest from then until 3 s after execution, CwndDrop = 1 -
	// min/before (0 when it only grew). Taken before the report, the cut
	// includes one the source cell's context release at the command
	// caused before the execution.
	CwndBefore uint32  `json:"cwnd_before"`
	CwndMin    uint32  `json:"cwnd_min"`
	CwndDrop   float64 `json:"cwnd_drop"`
	// From the ground truth.
	Reordered     bool `json:"reordered"`
	OverflowDrops int  `json:"overflow_drops"`
	DropsAfter    int  `json:"drops_after"`
	ReorderDupAck int  `json:"reorder_dupacks"`
	// SourceDiscards are the held packets a context release lost at the
	// source instead of forwarding them (a scenario's discard option);
	// their duplicate ACKs are losses, not reordering.
	SourceDiscards int `json:"source_discards"`
	// TargetCapacityBps is the target cell's mean capacity over the
	// convergence horizon.
	TargetCapacityBps float64 `json:"target_capacity_bps"`
	// Phases split the bytes of the throughput window at the handover's
	// beginning and execution.
	Phases Phases `json:"phases"`
}

// Analyze computes the metrics of every handover of a run.
func Analyze(sc *scenario.Scenario, truth *emu.GroundTruth, m *traffic.Measurements) ([]Handover, error) {
	if len(m.Goodput) < 2 {
		return nil, errors.New("fewer than two goodput samples")
	}
	capacities, err := emu.CellCapacities(sc)
	if err != nil {
		return nil, err
	}
	runEnd := m.Goodput[len(m.Goodput)-1].At
	reorderDups := map[int]int{}
	for _, d := range truth.DupAcks {
		if d.Cause == emu.DupAckReorder {
			reorderDups[d.Handover]++
		}
	}
	out := make([]Handover, 0, len(truth.Handovers))
	for i, ho := range truth.Handovers {
		horizon := runEnd
		if i+1 < len(truth.Handovers) {
			horizon = min(horizon, truth.Handovers[i+1].ExecAt)
		}
		capacity, ok := capacities[ho.Target]
		if !ok {
			return nil, fmt.Errorf("handover %d: target %q is not a cell of the scenario", i, ho.Target)
		}
		h := Handover{
			Index: ho.Index, Procedure: ho.Procedure, Class: ho.Class, ExecAt: ho.ExecAt,
			Reordered: ho.Reordered, OverflowDrops: ho.OverflowDrops, DropsAfter: ho.DropsAfter,
			ReorderDupAck: reorderDups[ho.Index],
		}
		if ho.Procedure == emu.ProcedureHandover {
			h.SourceDiscards = ho.Discarded
		}
		from := max(ho.ExecAt-ThroughputWindow, m.Goodput[0].At)
		to := min(ho.ExecAt+ThroughputWindow, runEnd)
		h.ThroughputBps = meanGoodput(m, from, to)
		h.Phases = splitPhases(m, from, begins(ho), ho.ExecAt, to)
		if horizon > ho.ExecAt {
			h.TargetCapacityBps = capacity.MeanBitsPerSecond(ho.ExecAt, horizon)
		}
		h.ConvergenceTime, h.Converged = convergence(m, capacity, ho.ExecAt, horizon)
		predicted := begins(ho)
		h.Retransmissions = retransBetween(m, predicted, ho.ExecAt+LossFreeAfter)
		h.LossFree = h.Retransmissions == 0
		h.CwndBefore, h.CwndMin = cwndAround(m, predicted, min(ho.ExecAt+CwndWindow, horizon))
		if h.CwndBefore > 0 {
			h.CwndDrop = max(0, 1-float64(h.CwndMin)/float64(h.CwndBefore))
		}
		out = append(out, h)
	}
	return out, nil
}

// begins is when a handover began: its measurement report, the earliest
// a predictor can act; for a radio link failure, which nothing reports,
// the failure.
func begins(ho emu.HandoverRecord) time.Duration {
	if ho.Procedure == emu.ProcedureRLF {
		return ho.ExecAt
	}
	return ho.MeasAt
}

// bytesAt interpolates the receiver's cumulative byte count at t.
func bytesAt(m *traffic.Measurements, t time.Duration) float64 {
	g := m.Goodput
	i := sort.Search(len(g), func(i int) bool { return g[i].At >= t })
	switch {
	case i == 0:
		return float64(g[0].Bytes)
	case i == len(g):
		return float64(g[len(g)-1].Bytes)
	}
	a, b := g[i-1], g[i]
	frac := float64(t-a.At) / float64(b.At-a.At)
	return float64(a.Bytes) + frac*(float64(b.Bytes)-float64(a.Bytes))
}

// ImplausibleCwnd is a congestion window, in segments, that no sender of
// the testbed can reach: a million segments, 1.4 GB, against the largest
// bandwidth-delay product of a cell it emulates (2 Gbit/s at 400 ms, 100
// MB, before scaling down).
const ImplausibleCwnd = 1 << 20

// InfiniteSsthresh is Linux's TCP_INFINITE_SSTHRESH, a new connection's
// slow start threshold; no Linux path assigns a larger one.
const InfiniteSsthresh = 0x7fffffff

// SenderLostState says whether a run's first flow reported a congestion
// window of ImplausibleCwnd or more, or a slow start threshold above
// InfiniteSsthresh. Such a sender has lost track of its state (a kernel
// that lost a BPF congestion control's ssthresh, bpf/cc/scubic.c), and
// its run says nothing of how its congestion control meets a handover.
func SenderLostState(m *traffic.Measurements) bool {
	for _, s := range m.TCPInfo {
		if s.Flow == 0 && (s.Cwnd >= ImplausibleCwnd || s.Ssthresh > InfiniteSsthresh) {
			return true
		}
	}
	return false
}

// RunGoodput is a run's mean goodput in bit/s from Startup to its last
// sample: what its download delivered, the mmWave dwells that follow a
// handover included, beyond the [-5 s, +5 s] window of each handover. It
// is 0 for a run no longer than Startup.
func RunGoodput(m *traffic.Measurements) float64 {
	if len(m.Goodput) == 0 {
		return 0
	}
	return meanGoodput(m, Startup, m.Goodput[len(m.Goodput)-1].At)
}

// meanGoodput is the goodput in bit/s over [from, to).
func meanGoodput(m *traffic.Measurements, from, to time.Duration) float64 {
	if to <= from {
		return 0
	}
	return (bytesAt(m, to) - bytesAt(m, from)) * 8 / (to - from).Seconds()
}

func convergence(m *traffic.Measurements, capacity *emu.Capacity, exec, horizon time.Duration) (time.Duration, bool) {
	for end := exec + ConvergenceWindow; end <= horizon; end += traffic.GoodputPeriod {
		start := end - ConvergenceWindow
		target := ConvergenceShare * capacity.MeanBitsPerSecond(start, end)
		if meanGoodput(m, start, end) >= target {
			return end - exec, true
		}
	}
	return max(horizon-exec, 0), false
}

// retransBetween sums, over flows, the growth of total_retrans in [from, to].
func retransBetween(m *traffic.Measurements, from, to time.Duration) uint32 {
	first := map[int]uint32{}
	last := map[int]uint32{}
	for _, s := range m.TCPInfo {
		if s.At <= from {
			first[s.Flow] = s.Retrans
		}
		if s.At <= to {
			last[s.Flow] = s.Retrans
		}
	}
	var total uint32
	for flow, v := range last {
		total += v - first[flow]
	}
	return total
}

// cwndAround returns flow 0's last cwnd before from and its minimum in
// [from, until].
func cwndAround(m *traffic.Measurements, from, until time.Duration) (before, least uint32) {
	least = math.MaxUint32
	for _, s := range m.TCPInfo {
		if s.Flow != 0 {
			continue
		}
		if s.At < from {
			before = s.Cwnd
		} else if s.At <= until {
			least = min(least, s.Cwnd)
		}
	}
	if least == math.MaxUint32 {
		least = before
	}
	return before, least
}
