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
	// Startup is left out of the window cuts and of the whole-run
	// goodput: the sender's exit from its first slow start, which every
	// variant of a scenario shares and no handover causes.
	Startup = 5 * time.Second
	// CutEpisodeGap separates loss episodes: retransmissions less than
	// this apart belong to one recovery, in which the sender cuts its
	// window once.
	CutEpisodeGap = 500 * time.Millisecond
	// CutShare: an episode is a cut when the cwnd fell below this share
	// of its value before the episode. A tail loss probe retransmits
	// without a cut; a congestion response of CUBIC (beta 0.7) or a
	// timeout goes far below it.
	CutShare = 0.9
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
// its first Startup: loss episodes (retransmissions, those less than
// CutEpisodeGap apart taken as one) in which the cwnd fell below CutShare
// of its value before the episode, placed where the episode began. The
// slow-start threshold does not tell them: a cut at the same window as the
// previous one leaves it where it was.
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
	for _, e := range lossEpisodes(m) {
		if e.at < Startup || float64(e.least) >= CutShare*float64(e.before) {
			continue
		}
		if e.least <= 1 {
			c.Timeouts++
		}
		serving, during := sc.InitialCell, false
		for _, h := range truth.Handovers {
			if e.at >= begins(h) && e.at <= h.CompleteAt+LossFreeAfter {
				during = true
			}
			if h.CompleteAt <= e.at {
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

// lossEpisode is a run of flow 0's retransmissions: when it began, the
// cwnd before it, and the smallest cwnd until CutEpisodeGap after its
// last retransmission.
type lossEpisode struct {
	at            time.Duration
	before, least uint32
}

func lossEpisodes(m *traffic.Measurements) []lossEpisode {
	var episodes []lossEpisode
	var prev *traffic.TCPInfoSample
	var lastRetrans time.Duration
	for i := range m.TCPInfo {
		s := &m.TCPInfo[i]
		if s.Flow != 0 {
			continue
		}
		if prev != nil && s.Retrans > prev.Retrans {
			if len(episodes) == 0 || s.At-lastRetrans > CutEpisodeGap {
				episodes = append(episodes, lossEpisode{at: s.At, before: prev.Cwnd, least: s.Cwnd})
			}
			lastRetrans = s.At
		}
		if n := len(episodes); n > 0 && s.At <= lastRetrans+CutEpisodeGap {
			episodes[n-1].least = min(episodes[n-1].least, s.Cwnd)
		}
		prev = s
	}
	return episodes
}
