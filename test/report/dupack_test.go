package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/emu"
)

// dupAckHandovers: a sub6 handover at 1.2 s, a mmWave to sub6 one at
// 10.2 s and a radio link failure to mmWave at 11 s, whose windows
// overlap the second's.
func dupAckHandovers() []emu.HandoverRecord {
	return []emu.HandoverRecord{
		{Index: 0, Procedure: emu.ProcedureHandover, Class: "sub6_sub6", MeasAt: 1 * time.Second, CommandAt: 1150 * time.Millisecond, ExecAt: 1200 * time.Millisecond, CompleteAt: 1230 * time.Millisecond},
		{Index: 1, Procedure: emu.ProcedureHandover, Class: "mmwave_sub6", MeasAt: 10 * time.Second, CommandAt: 10150 * time.Millisecond, ExecAt: 10200 * time.Millisecond, CompleteAt: 10230 * time.Millisecond},
		{Index: 2, Procedure: emu.ProcedureRLF, Class: "sub6_mmwave", ExecAt: 11 * time.Second, CompleteAt: 11138 * time.Millisecond},
	}
}

// dupAcksAt is n duplicate ACKs 1 ms apart from at.
func dupAcksAt(n int, ack uint32, cause string, handover int, at time.Duration) []emu.DupAck {
	out := make([]emu.DupAck, n)
	for i := range out {
		out[i] = emu.DupAck{At: at + time.Duration(i)*time.Millisecond, Ack: ack, Cause: cause, Handover: handover}
	}
	return out
}

// seenOnUplink is ds as the uplink lists them, 35 ms later, so that the
// tests show which of the two times decides.
func seenOnUplink(ds []emu.DupAck) []emu.DupAck {
	out := make([]emu.DupAck, len(ds))
	for i, d := range ds {
		d.At += 35 * time.Millisecond
		out[i] = d
	}
	return out
}

func joinDupAcks(lists ...[]emu.DupAck) []emu.DupAck {
	var out []emu.DupAck
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// dupCounts is DupAckCounts in field order.
func dupCounts(generated, seen, suppressed, unnecessary, suppressedUnnecessary, modelError int) DupAckCounts {
	return DupAckCounts{Generated: generated, Seen: seen, Suppressed: suppressed, Unnecessary: unnecessary,
		SuppressedUnnecessary: suppressedUnnecessary, ModelError: modelError}
}

func TestAnalyzeDupAcks(t *testing.T) {
	const reorder, loss = emu.DupAckReorder, emu.DupAckLoss
	reorderSix := dupAcksAt(6, 1000, reorder, 0, 1160*time.Millisecond)
	lossInHandover := dupAcksAt(3, 9000, loss, -1, 1250*time.Millisecond)
	tests := []struct {
		name          string
		generated     []emu.DupAck
		seen          []emu.DupAck
		wantHandovers map[int]DupAckTally
		wantOutside   DupAckTally
		wantSkipped   map[string]int
	}{
		{
			name:      "all reorder suppressed",
			generated: reorderSix,
			wantHandovers: map[int]DupAckTally{0: {
				Events: dupCounts(2, 0, 2, 2, 2, 0), Acks: dupCounts(6, 0, 6, 6, 6, 0),
			}},
		},
		{
			name:      "loss suppressed is a false positive",
			generated: joinDupAcks(reorderSix, lossInHandover),
			wantHandovers: map[int]DupAckTally{0: {
				Events: dupCounts(3, 0, 3, 2, 2, 0), Acks: dupCounts(9, 0, 9, 6, 6, 0),
			}},
		},
		{
			name:      "reorder let through is a miss",
			generated: joinDupAcks(reorderSix, dupAcksAt(3, 2000, reorder, 0, 1170*time.Millisecond)),
			seen:      seenOnUplink(reorderSix),
			wantHandovers: map[int]DupAckTally{0: {
				Events: dupCounts(3, 2, 1, 3, 1, 0), Acks: dupCounts(9, 6, 3, 9, 3, 0),
			}},
		},
		{
			// Five generated, two seen: the sender misses one event.
			// Four generated, three seen: it still gets its event.
			name:      "events across the three-ACK boundary",
			generated: joinDupAcks(dupAcksAt(5, 1000, reorder, 0, 1160*time.Millisecond), dupAcksAt(4, 2000, reorder, 0, 1170*time.Millisecond)),
			seen:      seenOnUplink(joinDupAcks(dupAcksAt(2, 1000, reorder, 0, 1160*time.Millisecond), dupAcksAt(3, 2000, reorder, 0, 1170*time.Millisecond))),
			wantHandovers: map[int]DupAckTally{0: {
				Events: dupCounts(2, 1, 1, 2, 1, 0), Acks: dupCounts(9, 5, 4, 9, 4, 0),
			}},
		},
		{
			name:      "seen beyond generated is model error",
			generated: dupAcksAt(2, 9000, loss, -1, 1500*time.Millisecond),
			seen:      seenOnUplink(dupAcksAt(5, 9000, loss, -1, 1500*time.Millisecond)),
			wantHandovers: map[int]DupAckTally{0: {
				Events: dupCounts(0, 1, 0, 0, 0, 1), Acks: dupCounts(2, 5, 0, 0, 0, 3),
			}},
		},
		{
			name: "attribution to handover windows",
			generated: joinDupAcks(
				dupAcksAt(3, 100, loss, -1, 500*time.Millisecond),    // before the first report
				dupAcksAt(3, 200, loss, -1, 3*time.Second),           // up to 2 s after completion
				dupAcksAt(3, 250, loss, -1, 3200*time.Millisecond),   // starts in the window
				dupAcksAt(3, 300, loss, -1, 3500*time.Millisecond),   // after it
				dupAcksAt(3, 400, loss, -1, 10500*time.Millisecond),  // before the failure's window
				dupAcksAt(3, 500, loss, -1, 11500*time.Millisecond),  // both windows: the latest
				dupAcksAt(3, 600, loss, -1, 12500*time.Millisecond),  // the failure's only
				dupAcksAt(3, 700, reorder, 1, 50*time.Second),        // reorder: by its index
				dupAcksAt(3, 800, loss, -1, 20*time.Second),          // after everything
				dupAcksAt(2, 900, loss, -1, 1210*time.Millisecond),   // one dupACK short of an event
				dupAcksAt(1, 950, reorder, 0, 1220*time.Millisecond), // a lone reorder dupACK
			),
			seen: seenOnUplink(joinDupAcks(
				dupAcksAt(3, 250, loss, -1, 3200*time.Millisecond), // listed after the window
				dupAcksAt(3, 700, reorder, 1, 50*time.Second),
				dupAcksAt(3, 850, loss, -1, 1300*time.Millisecond), // seen only: by its own time
			)),
			wantHandovers: map[int]DupAckTally{
				0: {Events: dupCounts(2, 2, 1, 0, 0, 1), Acks: dupCounts(9, 6, 6, 1, 1, 3)},
				1: {Events: dupCounts(2, 1, 1, 1, 0, 0), Acks: dupCounts(6, 3, 3, 3, 0, 0)},
				2: {Events: dupCounts(2, 0, 2, 0, 0, 0), Acks: dupCounts(6, 0, 6, 0, 0, 0)},
			},
			wantOutside: DupAckTally{Events: dupCounts(3, 0, 3, 0, 0, 0), Acks: dupCounts(9, 0, 9, 0, 0, 0)},
		},
		{
			name: "unusable entries are skipped and counted",
			generated: joinDupAcks(
				dupAcksAt(2, 100, "corrupt", -1, time.Second),
				dupAcksAt(3, 200, reorder, 7, time.Second),
				dupAcksAt(1, 300, reorder, -1, time.Second),
			),
			wantSkipped: map[string]int{skipUnknownCause: 2, skipReorderNoHandover: 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			truth := &emu.GroundTruth{
				Handovers: dupAckHandovers(), GeneratedDupAcks: tt.generated, DupAcks: tt.seen,
				GeneratedDupAcksNotRecorded: 4, DupAcksNotRecorded: 1,
			}
			got := AnalyzeDupAcks(3, truth)
			require.Len(t, got.Handovers, 3)
			for i, h := range got.Handovers {
				assert.Equal(t, 3, h.Run)
				assert.Equal(t, i, h.Index)
				assert.Equal(t, truth.Handovers[i].Class, h.Class)
				assert.Equal(t, truth.Handovers[i].Procedure, h.Procedure)
				assert.Equal(t, tt.wantHandovers[i], h.DupAckTally, "handover %d", i)
			}
			assert.Equal(t, tt.wantOutside, got.Outside, "outside")
			assert.Equal(t, tt.wantSkipped, got.Skipped)
			assert.Equal(t, 4, got.GeneratedNotRecorded)
			assert.Equal(t, 1, got.SeenNotRecorded)
		})
	}
}

func TestDupAckCountsRates(t *testing.T) {
	tests := []struct {
		name          string
		counts        DupAckCounts
		wantPrecision Ratio
		wantRecall    Ratio
		wantJSON      string
	}{
		{
			name: "some of each", counts: dupCounts(10, 3, 7, 8, 6, 0),
			wantPrecision: Ratio{Num: 6, Den: 7}, wantRecall: Ratio{Num: 6, Den: 8},
			wantJSON: `{"generated":10,"seen":3,"suppressed":7,"unnecessary":8,"suppressed_unnecessary":6,"model_error":0,
				"precision":{"num":6,"den":7,"value":0.8571428571428571},"recall":{"num":6,"den":8,"value":0.75}}`,
		},
		{
			name: "nothing suppressed or unnecessary", counts: dupCounts(3, 3, 0, 0, 0, 0),
			wantPrecision: Ratio{}, wantRecall: Ratio{},
			wantJSON: `{"generated":3,"seen":3,"suppressed":0,"unnecessary":0,"suppressed_unnecessary":0,"model_error":0,
				"precision":{"num":0,"den":0,"value":null},"recall":{"num":0,"den":0,"value":null}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.wantPrecision, tt.counts.Precision())
			assert.Equal(t, tt.wantRecall, tt.counts.Recall())
			raw, err := json.Marshal(tt.counts)
			require.NoError(t, err)
			assert.JSONEq(t, tt.wantJSON, string(raw))
		})
	}
}

// twoDupAckRuns: the first run suppresses one loss event with two reorder
// events around the sub6 handover and lets a reorder event through at the
// mmWave to sub6 one; the second suppresses everything, including an
// event outside every handover.
func twoDupAckRuns() []DupAckRun {
	const reorder, loss = emu.DupAckReorder, emu.DupAckLoss
	first := &emu.GroundTruth{
		Handovers: dupAckHandovers(),
		GeneratedDupAcks: joinDupAcks(
			dupAcksAt(6, 1000, reorder, 0, 1160*time.Millisecond),
			dupAcksAt(3, 2000, loss, -1, 1300*time.Millisecond),
			dupAcksAt(3, 3000, reorder, 1, 10160*time.Millisecond),
		),
		DupAcks: seenOnUplink(dupAcksAt(3, 3000, reorder, 1, 10160*time.Millisecond)),
	}
	second := &emu.GroundTruth{
		Handovers: dupAckHandovers()[:1],
		GeneratedDupAcks: joinDupAcks(
			dupAcksAt(3, 1000, reorder, 0, 1160*time.Millisecond),
			dupAcksAt(3, 5000, loss, -1, 30*time.Second),
		),
		GeneratedDupAcksNotRecorded: 2,
	}
	return []DupAckRun{AnalyzeDupAcks(0, first), AnalyzeDupAcks(1, second)}
}

func TestSummarizeDupAcks(t *testing.T) {
	s := SummarizeDupAcks("cubic+m2ho", twoDupAckRuns())
	assert.Equal(t, "cubic+m2ho", s.Variant)
	assert.Equal(t, 2, s.Runs)
	assert.Equal(t, 2, s.GeneratedNotRecorded)
	assert.Nil(t, s.Skipped)
	tests := []struct {
		class         string
		wantHandovers int
		wantEvents    DupAckCounts
		wantAcks      DupAckCounts
	}{
		{class: "sub6_sub6", wantHandovers: 2, wantEvents: dupCounts(4, 0, 4, 3, 3, 0), wantAcks: dupCounts(12, 0, 12, 9, 9, 0)},
		{class: "sub6_mmwave", wantHandovers: 1},
		{class: "mmwave_mmwave"},
		{class: "mmwave_sub6", wantHandovers: 1, wantEvents: dupCounts(1, 1, 0, 1, 0, 0), wantAcks: dupCounts(3, 3, 0, 3, 0, 0)},
		{class: ClassNoHandover, wantEvents: dupCounts(1, 0, 1, 0, 0, 0), wantAcks: dupCounts(3, 0, 3, 0, 0, 0)},
		{class: diag.AllClasses, wantHandovers: 4, wantEvents: dupCounts(6, 1, 5, 4, 3, 0), wantAcks: dupCounts(18, 3, 15, 12, 9, 0)},
	}
	require.Len(t, s.Classes, len(tests))
	for i, tt := range tests {
		t.Run(tt.class, func(t *testing.T) {
			c := s.Classes[i]
			assert.Equal(t, tt.class, c.Class, "paper order")
			assert.Equal(t, tt.wantHandovers, c.Handovers)
			assert.Equal(t, tt.wantEvents, c.Events)
			assert.Equal(t, tt.wantAcks, c.Acks)
			byName, ok := s.Class(tt.class)
			require.True(t, ok)
			assert.Equal(t, c, byName)
		})
	}
	_, ok := s.Class("lte_lte")
	assert.False(t, ok)
}

func TestWriteDupAckTable(t *testing.T) {
	runs := twoDupAckRuns()
	var buf bytes.Buffer
	require.NoError(t, WriteDupAckTable(&buf, []DupAckSummary{
		SummarizeDupAcks("cubic+m2ho", runs),
		SummarizeDupAcks("bbr+m2ho", nil),
	}))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		"| Variant | Level | | sub6-sub6 | sub6-mmW | mmW-mmW | mmW-sub6 | No HO | Overall |",
		"|---|---|---|---|---|---|---|---|---|",
		"| CUBIC + m2ho | events | Precis. | 75.0 (3/4) | - (0/0) | - (0/0) | - (0/0) | 0.0 (0/1) | 60.0 (3/5) |",
		"| CUBIC + m2ho | events | Recall | 100.0 (3/3) | - (0/0) | - (0/0) | 0.0 (0/1) | - (0/0) | 75.0 (3/4) |",
		"| CUBIC + m2ho | ACKs | Precis. | 75.0 (9/12) | - (0/0) | - (0/0) | - (0/0) | 0.0 (0/3) | 60.0 (9/15) |",
		"| CUBIC + m2ho | ACKs | Recall | 100.0 (9/9) | - (0/0) | - (0/0) | 0.0 (0/3) | - (0/0) | 75.0 (9/12) |",
		"| BBR + m2ho | events | Precis. | - (0/0) | - (0/0) | - (0/0) | - (0/0) | - (0/0) | - (0/0) |",
	}
	require.GreaterOrEqual(t, len(lines), len(want))
	assert.Equal(t, want, lines[:len(want)])
	assert.Len(t, lines, 2+2*4)
}

func TestDupAckModelCheck(t *testing.T) {
	const loss = emu.DupAckLoss
	tests := []struct {
		name         string
		generated    []emu.DupAck
		seen         []emu.DupAck
		wantRelative float64
		wantKnown    bool
		wantMismatch Ratio
		wantEvents   Ratio
		wantRow      string
	}{
		{
			name:         "exact",
			generated:    dupAcksAt(6, 100, loss, -1, 5*time.Second),
			seen:         seenOnUplink(dupAcksAt(6, 100, loss, -1, 5*time.Second)),
			wantKnown:    true,
			wantMismatch: Ratio{Num: 0, Den: 6}, wantEvents: Ratio{Num: 0, Den: 2},
			wantRow: "| CUBIC | 1 | 6 | 6 | +0.0% | 0.0 (0/6) | 2 | 2 | 0.0 (0/2) |",
		},
		{
			// Totals agree, episodes do not: +3 on one, -3 on the other.
			name:         "errors that cancel in the total",
			generated:    joinDupAcks(dupAcksAt(6, 100, loss, -1, 5*time.Second), dupAcksAt(3, 200, loss, -1, 6*time.Second)),
			seen:         seenOnUplink(joinDupAcks(dupAcksAt(3, 100, loss, -1, 5*time.Second), dupAcksAt(6, 200, loss, -1, 6*time.Second))),
			wantKnown:    true,
			wantMismatch: Ratio{Num: 6, Den: 9}, wantEvents: Ratio{Num: 2, Den: 3},
			wantRow: "| CUBIC | 1 | 9 | 9 | +0.0% | 66.7 (6/9) | 3 | 3 | 66.7 (2/3) |",
		},
		{
			name:         "model generates too many",
			generated:    dupAcksAt(10, 100, loss, -1, 5*time.Second),
			seen:         seenOnUplink(dupAcksAt(8, 100, loss, -1, 5*time.Second)),
			wantRelative: 0.25, wantKnown: true,
			wantMismatch: Ratio{Num: 2, Den: 8}, wantEvents: Ratio{Num: 1, Den: 2},
			wantRow: "| CUBIC | 1 | 10 | 8 | +25.0% | 25.0 (2/8) | 3 | 2 | 50.0 (1/2) |",
		},
		{
			name:         "nothing seen",
			generated:    dupAcksAt(3, 100, loss, -1, 5*time.Second),
			wantMismatch: Ratio{Num: 3, Den: 0}, wantEvents: Ratio{Num: 1, Den: 0},
			wantRow: "| CUBIC | 1 | 3 | 0 | - | - (3/0) | 1 | 0 | - (1/0) |",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := AnalyzeDupAcks(0, &emu.GroundTruth{GeneratedDupAcks: tt.generated, DupAcks: tt.seen})
			check := CheckDupAckModel(SummarizeDupAcks("cubic", []DupAckRun{run}))
			relative, known := check.RelativeError()
			assert.Equal(t, tt.wantKnown, known)
			assert.InDelta(t, tt.wantRelative, relative, 1e-9)
			assert.Equal(t, tt.wantMismatch, check.Mismatch())
			assert.Equal(t, tt.wantEvents, check.EventMismatch())

			var buf bytes.Buffer
			require.NoError(t, WriteDupAckModelCheck(&buf, []DupAckModelCheck{check}))
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			require.Len(t, lines, 3)
			assert.Equal(t, tt.wantRow, lines[2])

			raw, err := json.Marshal(check)
			require.NoError(t, err)
			var decoded struct {
				Generated     int      `json:"generated"`
				RelativeError *float64 `json:"relative_error"`
				Mismatch      Ratio    `json:"mismatch"`
			}
			require.NoError(t, json.Unmarshal(raw, &decoded))
			assert.Equal(t, check.Generated, decoded.Generated)
			assert.Equal(t, tt.wantMismatch, decoded.Mismatch)
			if tt.wantKnown {
				require.NotNil(t, decoded.RelativeError)
				assert.InDelta(t, tt.wantRelative, *decoded.RelativeError, 1e-9)
			} else {
				assert.Nil(t, decoded.RelativeError)
			}
		})
	}
}

// failingWriter fails every write.
type failingWriter struct{}

var errWriteFailed = errors.New("disk full")

func (failingWriter) Write([]byte) (int, error) { return 0, errWriteFailed }

func TestDupAckWritersReportWriteErrors(t *testing.T) {
	s := SummarizeDupAcks("cubic", twoDupAckRuns())
	tests := []struct {
		name  string
		write func() error
	}{
		{name: "table", write: func() error { return WriteDupAckTable(failingWriter{}, []DupAckSummary{s}) }},
		{name: "model check", write: func() error {
			return WriteDupAckModelCheck(failingWriter{}, []DupAckModelCheck{CheckDupAckModel(s)})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.ErrorIs(t, tt.write(), errWriteFailed)
		})
	}
}
