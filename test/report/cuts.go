package report

import (
	"fmt"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/traffic"
)

const (
	// CutsStartup is left out of the window cuts: the sender's exit from
	// its first slow start, which every variant of a scenario shares and
	// no handover causes.
	CutsStartup = 5 * time.Second
	// cutRetransWithin: a fall of the slow-start threshold is a window
	// cut when the sender retransmits within this time of it. HyStart
	// lowers the threshold without a loss, and that is no cut.
	cutRetransWithin = 500 * time.Millisecond
)

// Cuts counts the congestion-window cuts of a run's first flow by where
// they fell, to tell what a policy saves during handovers from what it
// costs between them: a window the clamps keep through a handover is only
// worth its throughput if no cut between handovers takes it.
type Cuts struct {
	// Handover: from a handover's measurement report (its failure, for
	// a radio link failure) until LossFreeAfter after its completion.
	Handover int `json:"handover"`
	// Sub6 and MmWave: between handovers, by the serving cell's band.
	Sub6   int `json:"sub6"`
	MmWave int `json:"mmwave"`
	// Timeouts are the cuts to a window of one segment (a retransmission
	// timeout), wherever they fell; they are counted above too.
	Timeouts int `json:"timeouts"`
}

// Total is every cut counted.
func (c Cuts) Total() int { return c.Handover + c.Sub6 + c.MmWave }

// Add sums two counts.
func (c Cuts) Add(o Cuts) Cuts {
	return Cuts{Handover: c.Handover + o.Handover, Sub6: c.Sub6 + o.Sub6, MmWave: c.MmWave + o.MmWave, Timeouts: c.Timeouts + o.Timeouts}
}

// WindowCuts finds the cuts of flow 0's congestion window in a run after
// its first cutsStartup: samples where the slow-start threshold fell (the
// sender took a loss, by fast recovery or by timeout) and the sender
// retransmitted within cutRetransWithin.
func WindowCuts(sc *scenario.Scenario, truth *emu.GroundTruth, m *traffic.Measurements) (Cuts, error) {
	var c Cuts
	bands := map[string]diag.Band{}
	for _, cell := range sc.Cells {
		bands[cell.Name] = cell.Band
	}
	for _, h := range truth.Handovers {
		if _, ok := bands[h.Target]; !ok {
			return c, fmt.Errorf("handover %d: target %q is not a cell of the scenario", h.Index, h.Target)
		}
	}
	if _, ok := bands[sc.InitialCell]; !ok {
		return c, fmt.Errorf("initial cell %q is not a cell of the scenario", sc.InitialCell)
	}
	var flow []traffic.TCPInfoSample
	for _, s := range m.TCPInfo {
		if s.Flow == 0 {
			flow = append(flow, s)
		}
	}
	for i := 1; i < len(flow); i++ {
		prev, s := flow[i-1], flow[i]
		if s.At < CutsStartup || s.Ssthresh >= prev.Ssthresh || !retransmitsWithin(flow[i:], prev.Retrans, s.At+cutRetransWithin) {
			continue
		}
		if s.Cwnd <= 1 {
			c.Timeouts++
		}
		serving, during := sc.InitialCell, false
		for _, h := range truth.Handovers {
			start := h.MeasAt
			if h.Procedure == emu.ProcedureRLF || start == 0 {
				start = h.ExecAt
			}
			if s.At >= start && s.At <= h.CompleteAt+LossFreeAfter {
				during = true
			}
			if h.CompleteAt <= s.At {
				serving = h.Target
			}
		}
		switch {
		case during:
			c.Handover++
		case bands[serving] == diag.BandMmWave:
			c.MmWave++
		default:
			c.Sub6++
		}
	}
	return c, nil
}

// retransmitsWithin reports whether the samples show more retransmissions
// than base by until.
func retransmitsWithin(samples []traffic.TCPInfoSample, base uint32, until time.Duration) bool {
	for _, s := range samples {
		if s.At > until {
			return false
		}
		if s.Retrans > base {
			return true
		}
	}
	return false
}
