package rrc

import (
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/m2ho/m2ho/pkg/diag"
)

// captureCounts is what one capture yields through the decoder.
type captureCounts struct {
	messages int
	// measurementReports counts every MeasurementReport, including
	// periodical ones and those whose measId does not resolve.
	measurementReports int
	reports            map[diag.MeasEvent]int
	commands           map[diag.HOKind]int
	completes          int
	failures           map[diag.FailureCause]int
	errorReasons       map[string]int
}

func newCaptureCounts() *captureCounts {
	return &captureCounts{
		reports:      map[diag.MeasEvent]int{},
		commands:     map[diag.HOKind]int{},
		failures:     map[diag.FailureCause]int{},
		errorReasons: map[string]int{},
	}
}

func (c *captureCounts) add(ev diag.Event) {
	switch ev.Type {
	case diag.TypeMeasReport:
		c.reports[ev.Meas]++
	case diag.TypeHOCommand:
		c.commands[ev.Kind]++
	case diag.TypeHOComplete:
		c.completes++
	case diag.TypeHOFailure:
		c.failures[ev.Cause]++
	}
}

func total[K comparable](m map[K]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// render prints a count map sorted by key: "A2=3 A3=10".
func render[K ~string](m map[K]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[K(k)])
	}
	return strings.Join(parts, " ")
}

// replay decodes a capture's messages in order with a fresh decoder.
func replay(c capture) ([]diag.Event, *captureCounts) {
	d := NewDecoder(slog.New(slog.DiscardHandler))
	counts := newCaptureCounts()
	var events []diag.Event
	for _, m := range c.messages {
		counts.messages++
		if s, err := Summarize(m.RAT, m.Channel, m.PDU); err == nil && (s.Report != nil || s.NestedNR != nil && s.NestedNR.Report != nil) {
			counts.measurementReports++
		}
		evs, err := d.Decode(m)
		if err != nil {
			counts.errorReasons[diag.ErrorReason(err, "")]++
			continue
		}
		for _, ev := range evs {
			counts.add(ev)
		}
		events = append(events, evs...)
	}
	return events, counts
}

// TestRealCaptureEvents replays every shared capture through the decoder
// and reports what it yields per file. No PDU of the captures may be
// malformed to the decoder, and the events must be well formed.
func TestRealCaptureEvents(t *testing.T) {
	for _, c := range realCaptures(t) {
		events, counts := replay(c)
		t.Logf("%-42s msgs %4d | MRs %4d, meas_report %4d (%s) | ho_command %3d (%s) | ho_complete %3d | ho_failure %2d (%s) | not resolved: %s",
			c.name, counts.messages, counts.measurementReports, total(counts.reports), render(counts.reports),
			total(counts.commands), render(counts.commands), counts.completes,
			total(counts.failures), render(counts.failures), render(counts.errorReasons))
		assert.Zero(t, counts.errorReasons[ReasonMalformed], "%s: malformed PDUs", c.name)
		for _, ev := range events {
			switch ev.Type {
			case diag.TypeMeasReport:
				assert.NotEmpty(t, ev.Meas, "%s: report without event", c.name)
				assert.Equal(t, ev.Serving.RAT != "", ev.Serving.Band != "", "%s: serving band follows RAT", c.name)
			case diag.TypeHOCommand:
				assert.NotEmpty(t, ev.Kind, "%s: command without kind", c.name)
				assert.False(t, ev.Target.IsZero(), "%s: %s command without target", c.name, ev.Kind)
			}
			assert.False(t, ev.Time.IsZero(), "%s: event without modem time", c.name)
		}
	}
}
