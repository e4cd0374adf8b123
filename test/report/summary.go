package report

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/scaledcc"
)

// Summary aggregates the handovers of one class in one variant.
type Summary struct {
	Variant   string `json:"variant"`
	Class     string `json:"class"`
	Handovers int    `json:"handovers"`
	// Means over the handovers of the class.
	ThroughputBps   float64       `json:"throughput_bps"`
	ConvergenceTime time.Duration `json:"convergence_ns"`
	// Converged counts handovers that converged before the next one.
	Converged       int     `json:"converged"`
	LossFree        int     `json:"loss_free"`
	Retransmissions float64 `json:"retransmissions"`
	CwndDrop        float64 `json:"cwnd_drop"`
	OverflowDrops   int     `json:"overflow_drops"`
	Reordered       int     `json:"reordered"`
	// LossCauses counts the handovers that were not loss-free by
	// Handover.LossCause.
	LossCauses map[string]int `json:"loss_causes,omitempty"`
}

// Summarize groups a variant's handovers by class, with an overall row.
func Summarize(variant string, hs []Handover) []Summary {
	groups := map[string][]Handover{}
	for _, h := range hs {
		groups[h.Class] = append(groups[h.Class], h)
		groups[diag.AllClasses] = append(groups[diag.AllClasses], h)
	}
	var out []Summary
	for _, class := range diag.ClassesWithAll() {
		g := groups[class]
		if len(g) == 0 {
			continue
		}
		s := Summary{Variant: variant, Class: class, Handovers: len(g)}
		for _, h := range g {
			s.ThroughputBps += h.ThroughputBps
			s.ConvergenceTime += h.ConvergenceTime
			s.Retransmissions += float64(h.Retransmissions)
			s.CwndDrop += h.CwndDrop
			s.OverflowDrops += h.OverflowDrops + h.DropsAfter
			if h.Converged {
				s.Converged++
			}
			if h.LossFree {
				s.LossFree++
			} else {
				if s.LossCauses == nil {
					s.LossCauses = map[string]int{}
				}
				s.LossCauses[h.LossCause()]++
			}
			if h.Reordered {
				s.Reordered++
			}
		}
		n := float64(len(g))
		s.ThroughputBps /= n
		s.ConvergenceTime = time.Duration(float64(s.ConvergenceTime) / n)
		s.Retransmissions /= n
		s.CwndDrop /= n
		out = append(out, s)
	}
	return out
}

// WriteHandoverTable prints one line per handover.
func WriteHandoverTable(w io.Writer, variant string, hs []Handover) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\thandover\tat (s)\tclass\ttput (Mbit/s)\tconverge (s)\tretrans\tloss-free\tcwnd drop\tdrops\treordered\treorder dupACKs\n", variant)
	for _, h := range hs {
		conv := fmt.Sprintf("%.1f", h.ConvergenceTime.Seconds())
		if !h.Converged {
			conv = ">" + conv
		}
		fmt.Fprintf(tw, "\t%d %s\t%.2f\t%s\t%.1f\t%s\t%d\t%s\t%.0f%%\t%d\t%s\t%d\n",
			h.Index, h.Procedure, h.ExecAt.Seconds(), h.Class, h.ThroughputBps/1e6, conv,
			h.Retransmissions, yesNo(h.LossFree), 100*h.CwndDrop, h.OverflowDrops+h.DropsAfter, yesNo(h.Reordered), h.ReorderDupAck)
	}
	return tw.Flush()
}

// WriteComparison prints the summaries of several variants side by side,
// one row per class and variant.
func WriteComparison(w io.Writer, summaries [][]Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "class\tvariant\thandovers\ttput (Mbit/s)\tconverge (s)\tconverged\tloss-free\tretrans/HO\tcwnd drop\tbuffer drops")
	for _, class := range diag.ClassesWithAll() {
		for _, variant := range summaries {
			i := slices.IndexFunc(variant, func(s Summary) bool { return s.Class == class })
			if i < 0 {
				continue
			}
			s := variant[i]
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.1f\t%d/%d\t%d/%d\t%.1f\t%.0f%%\t%d\n",
				s.Class, s.Variant, s.Handovers, s.ThroughputBps/1e6, s.ConvergenceTime.Seconds(),
				s.Converged, s.Handovers, s.LossFree, s.Handovers, s.Retransmissions, 100*s.CwndDrop, s.OverflowDrops)
		}
	}
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// Title makes a variant name readable in legends ("cubic+m2ho" -> "CUBIC + m2ho").
func Title(variant string) string {
	parts := strings.Split(variant, "+")
	if parts[0] == scaledcc.Family {
		parts[0] = "CUBIC (scaled)"
	} else {
		parts[0] = strings.ToUpper(parts[0])
	}
	return strings.Join(parts, " + ")
}
