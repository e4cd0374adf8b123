package report

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/m2ho/m2ho/test/traffic"
)

func TestSplitPhases(t *testing.T) {
	// One byte a millisecond for 20 s.
	m := &traffic.Measurements{}
	for ms := 0; ms <= 20_000; ms += 100 {
		m.Goodput = append(m.Goodput, traffic.GoodputSample{At: time.Duration(ms) * time.Millisecond, Bytes: uint64(ms)})
	}
	s := time.Second
	tests := []struct {
		name                  string
		from, began, exec, to time.Duration
		want                  Phases
	}{
		{name: "report 200 ms before execution", from: 5 * s, began: 9800 * time.Millisecond, exec: 10 * s, to: 15 * s,
			want: Phases{BeforeReport: 4800, Preparation: 200, AfterExec: 1000, Later: 4000}},
		{name: "report before the window: all of it is Preparation", from: 5 * s, began: 3 * s, exec: 10 * s, to: 15 * s,
			want: Phases{Preparation: 5000, AfterExec: 1000, Later: 4000}},
		{name: "a radio link failure begins at execution", from: 5 * s, began: 10 * s, exec: 10 * s, to: 15 * s,
			want: Phases{BeforeReport: 5000, AfterExec: 1000, Later: 4000}},
		{name: "the run ends within the ramp's second", from: 5 * s, began: 9 * s, exec: 10 * s, to: 10500 * time.Millisecond,
			want: Phases{BeforeReport: 4000, Preparation: 1000, AfterExec: 500}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := splitPhases(m, tc.from, tc.began, tc.exec, tc.to)
			assert.InDelta(t, tc.want.BeforeReport, got.BeforeReport, 1e-6)
			assert.InDelta(t, tc.want.Preparation, got.Preparation, 1e-6)
			assert.InDelta(t, tc.want.AfterExec, got.AfterExec, 1e-6)
			assert.InDelta(t, tc.want.Later, got.Later, 1e-6)
			total := got.Add(Phases{})
			assert.InDelta(t, float64(tc.to-tc.from)/float64(time.Millisecond), total.BeforeReport+total.Preparation+total.AfterExec+total.Later, 1e-6, "the phases cover the window")
		})
	}
}
