package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
)

// String renders "93.8 (45/48)", percent first, or "- (0/0)".
func (r Ratio) String() string {
	v, ok := r.Value()
	if !ok {
		return fmt.Sprintf("- (%d/%d)", r.Num, r.Den)
	}
	return fmt.Sprintf("%.1f (%d/%d)", 100*v, r.Num, r.Den)
}

// MarshalJSON adds the value to the counts.
func (r Ratio) MarshalJSON() ([]byte, error) {
	type counts Ratio
	out := struct {
		counts
		Value *float64 `json:"value"`
	}{counts: counts(r)}
	if v, ok := r.Value(); ok {
		out.Value = &v
	}
	return json.Marshal(out)
}

// WriteJSON writes the results as one JSON document.
func WriteJSON(w io.Writer, results []*Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}

// WriteTable writes each result as a table: one row per predictor and
// handover class, by the classes' labels (diag.ClassLabel), then the
// misses and the policy of each predictor.
func WriteTable(w io.Writer, results []*Result) error {
	var b strings.Builder
	for i, res := range results {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s: %d events, %d measurement reports in %v of signalling", res.Input, res.Events, res.Reports, res.Span.Round(time.Millisecond))
		if len(res.Skipped) > 0 {
			fmt.Fprintf(&b, "; skipped %s", renderCounts(res.Skipped))
		}
		if len(res.Networks) > 0 {
			fmt.Fprintf(&b, "; network %s", strings.Join(res.Networks, ", "))
		}
		b.WriteString("\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "predictor\tclass\thandovers\tfailures\tprecision\trecall\trecall (reported)\tearliness mean/median\tlead mean/median")
		for _, p := range res.Predictors {
			for _, c := range p.Classes {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Predictor, diag.ClassLabel(c.Class), c.Handovers, c.Failures,
					c.Precision, c.Recall, c.RecallReported, meanMedianMillis(c.EarlinessMean, c.EarlinessMedian, c.Predicted), meanMedianMillis(c.LeadMean, c.LeadMedian, c.Predicted))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, p := range res.Predictors {
			all, _ := p.Class(diag.AllClasses)
			fmt.Fprintf(&b, "%s: misses %s; outcomes %s\n", p.Predictor, orNone(renderCounts(all.Misses)), orNone(renderCounts(p.Outcomes)))
			pol := p.Policy
			fmt.Fprintf(&b, "%s: policy: %d clamps (median %d bytes, %v in force), %d freezes, %d suppression windows (%v in all, mean %v)\n",
				p.Predictor, pol.Clamps, pol.ClampBytesMedian, pol.ClampedFor.Round(time.Millisecond), pol.Freezes,
				pol.Suppressions, pol.SuppressedFor.Round(time.Millisecond), pol.SuppressionMean.Round(time.Millisecond))
		}
	}
	b.WriteString("\nprecision and recall in percent (counts); recall: handovers predicted / handovers and failures; recall (reported): among handovers with a measurement report within 1s before the command; earliness: prediction to execution, lead: prediction to command (ms).\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func meanMedianMillis(mean, median time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f / %.1f", float64(mean)/float64(time.Millisecond), float64(median)/float64(time.Millisecond))
}

// renderCounts prints a count map sorted by key: "a=3 b=10".
func renderCounts[V int | uint64](m map[string]V) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
		}
	}
	return strings.Join(parts, " ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
