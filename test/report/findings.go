package report

import (
	"fmt"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
)

// Figures of the paper's section 3.3 the testbed is compared with.
const (
	PaperCwndDropReorder  = 0.633 // finding 2
	PaperCwndDropOverflow = 0.704 // finding 3
	PaperConvergeSub6MmW  = 17.2  // finding 4, seconds
	PaperConvergeAll      = 6.7   // seconds
	PaperCwndDropAll      = 0.483
)

// Findings states, for a run without m2ho, what the paper's findings 2 to
// 4 look like in the testbed, next to the paper's figures.
func Findings(hs []Handover) []string {
	var reorder, discard, overflow, vertical, all group
	for _, h := range hs {
		all.add(h)
		switch {
		case h.Reordered && h.SourceDiscards > 0:
			discard.add(h)
		case h.Reordered:
			reorder.add(h)
		}
		if h.OverflowDrops+h.DropsAfter > 0 {
			overflow.add(h)
		}
		if h.Class == diag.ClassSub6MmWave {
			vertical.add(h)
		}
	}
	lines := []string{
		fmt.Sprintf("all handovers (%d): cwnd drop %.0f%% (paper %.1f%%), convergence %s (paper %.1f s)",
			all.n, 100*all.meanDrop(), 100*PaperCwndDropAll, all.meanConvergence(), PaperConvergeAll),
	}
	if reorder.n > 0 {
		lines = append(lines, reorder.reorderFinding())
	}
	if discard.n > 0 {
		lines = append(lines, discard.discardFinding())
	}
	if reorder.n+discard.n == 0 {
		lines = append(lines, "finding 2: no context release in this run")
	}
	if overflow.n > 0 {
		lines = append(lines, fmt.Sprintf("finding 3, target buffer overflow (%d handovers): %d packets dropped, %d retransmissions, cwnd drop %.0f%% (paper %.1f%%)",
			overflow.n, overflow.drops, overflow.retrans, 100*overflow.meanDrop(), 100*PaperCwndDropOverflow))
	} else {
		lines = append(lines, "finding 3: no handover overflowed its target buffer in this run")
	}
	if vertical.n > 0 {
		lines = append(lines, fmt.Sprintf("finding 4, sub6 to mmWave (%d handovers): convergence %s (paper %.1f s)",
			vertical.n, vertical.meanConvergence(), PaperConvergeSub6MmW))
	} else {
		lines = append(lines, "finding 4: no sub6 to mmWave handover in this run")
	}
	return lines
}

type group struct {
	n, converged, unconverged int
	drop                      float64
	conv                      time.Duration
	dupacks, drops, discarded int
	retrans                   uint32
}

// reorderFinding is finding 2 where the source forwarded what its context
// release held back: the duplicate ACKs come from reordering alone.
func (g *group) reorderFinding() string {
	return fmt.Sprintf("finding 2, context release reordering (%d handovers): %d reorder dupACKs, %d retransmissions, cwnd drop %.0f%% (paper %.1f%%)",
		g.n, g.dupacks, g.retrans, 100*g.meanDrop(), 100*PaperCwndDropReorder)
}

// discardFinding is finding 2 where the source discarded what its context
// release held back, as the paper saw: real losses the sender repairs.
func (g *group) discardFinding() string {
	return fmt.Sprintf("finding 2, context release discarded at the source (%d handovers): %d packets lost, %d retransmissions, cwnd drop %.0f%% (paper %.1f%%)",
		g.n, g.discarded, g.retrans, 100*g.meanDrop(), 100*PaperCwndDropReorder)
}

func (g *group) add(h Handover) {
	g.n++
	g.drop += h.CwndDrop
	g.conv += h.ConvergenceTime
	if h.Converged {
		g.converged++
	} else {
		g.unconverged++
	}
	g.dupacks += h.ReorderDupAck
	g.drops += h.OverflowDrops + h.DropsAfter
	g.discarded += h.SourceDiscards
	g.retrans += h.Retransmissions
}

func (g *group) meanDrop() float64 {
	if g.n == 0 {
		return 0
	}
	return g.drop / float64(g.n)
}

// meanConvergence renders the mean, marking it a lower bound when some
// handovers never converged before the next one.
func (g *group) meanConvergence() string {
	if g.n == 0 {
		return "n/a"
	}
	mean := time.Duration(int64(g.conv) / int64(g.n))
	if g.unconverged > 0 {
		return fmt.Sprintf(">= %.1f s (%d of %d never converged)", mean.Seconds(), g.unconverged, g.n)
	}
	return fmt.Sprintf("%.1f s", mean.Seconds())
}
