package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/statemachine"
	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/scenario"
)

// Cells of the hand-built runs: two NR sub-6 cells and two mmWave cells.
var (
	predSub6A = diag.Cell{RAT: diag.RATNR, Band: diag.BandSub6, PCI: 100, ARFCN: 627264}
	predSub6B = diag.Cell{RAT: diag.RATNR, Band: diag.BandSub6, PCI: 101, ARFCN: 627264}
	predMmA   = diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 200, ARFCN: 2079167}
	predMmB   = diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 201, ARFCN: 2079167}
)

var predStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func msAt(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }

// predRun builds a ground truth from signalling events (times in ms from
// the run's start) and the records they stand for.
type predRun struct {
	events    []diag.Event
	handovers []emu.HandoverRecord
}

func (r *predRun) report(ms int, ev diag.MeasEvent, serving, neighbor diag.Cell) *predRun {
	r.events = append(r.events, diag.Event{Type: diag.TypeMeasReport, Time: predStart.Add(msAt(ms)), Meas: ev, Serving: serving, Neighbor: neighbor})
	return r
}

// handover adds a reported handover as the emulator runs one: report at
// measMs, command at cmdMs, execution at execMs, completion 27 ms later.
func (r *predRun) handover(ev diag.MeasEvent, kind diag.HOKind, source, target diag.Cell, measMs, cmdMs, execMs int) *predRun {
	r.report(measMs, ev, source, target)
	r.events = append(r.events,
		diag.Event{Type: diag.TypeHOCommand, Time: predStart.Add(msAt(cmdMs)), Kind: kind, Source: source, Target: target},
		diag.Event{Type: diag.TypeHOComplete, Time: predStart.Add(msAt(execMs + 27)), Cell: target})
	r.handovers = append(r.handovers, emu.HandoverRecord{
		Index: len(r.handovers), Procedure: emu.ProcedureHandover, Kind: kind,
		Class: diag.HandoverClass(source.Band, target.Band), MeasEvent: ev,
		MeasAt: msAt(measMs), CommandAt: msAt(cmdMs), ExecAt: msAt(execMs), CompleteAt: msAt(execMs + 27),
	})
	return r
}

// rlf adds a radio link failure at ms, re-established on target 138 ms
// later.
func (r *predRun) rlf(source, target diag.Cell, ms int) *predRun {
	r.events = append(r.events,
		diag.Event{Type: diag.TypeHOFailure, Time: predStart.Add(msAt(ms)), Cause: diag.CauseRLF},
		diag.Event{Type: diag.TypeHOComplete, Time: predStart.Add(msAt(ms + 138)), Cell: target})
	r.handovers = append(r.handovers, emu.HandoverRecord{
		Index: len(r.handovers), Procedure: emu.ProcedureRLF,
		Class: diag.HandoverClass(source.Band, target.Band), ExecAt: msAt(ms), CompleteAt: msAt(ms + 138),
	})
	return r
}

// withoutCommands drops the handover commands from the signalling, as a
// modem log that missed them.
func (r *predRun) withoutCommands() *predRun {
	r.events = slices.DeleteFunc(r.events, func(ev diag.Event) bool { return ev.Type == diag.TypeHOCommand })
	return r
}

func (r *predRun) truth(t *testing.T) *emu.GroundTruth {
	t.Helper()
	g := &emu.GroundTruth{Scenario: "hand-built", Scale: 1, Start: predStart, Handovers: r.handovers}
	for _, ev := range r.events {
		raw, err := diag.MarshalJSON(ev)
		require.NoError(t, err)
		g.Signalling = append(g.Signalling, raw)
	}
	return g
}

// wantPredictor is what one predictor must score over all classes.
type wantPredictor struct {
	precision, recall, recallHandovers Ratio
	earlinessMean                      time.Duration
}

func TestPredictionHandBuiltRuns(t *testing.T) {
	tests := []struct {
		name         string
		run          *predRun
		want         map[string]wantPredictor
		wantOutcomes map[string]int
	}{
		{
			name: "reported handover predicted 180 ms ahead",
			run:  new(predRun).handover(diag.EventA3, diag.HOPCell, predSub6A, predSub6B, 9820, 9967, 10000),
			want: map[string]wantPredictor{
				PredictorM2HO:      {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorNaive:     {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorAtCommand: {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(33)},
			},
			wantOutcomes: map[string]int{statemachine.OutcomeConfirmed: 1},
		},
		{
			name: "false A3 times out",
			run: new(predRun).
				report(5000, diag.EventA3, predSub6A, predSub6B).
				handover(diag.EventA3, diag.HOPCell, predSub6A, predSub6B, 9820, 9967, 10000),
			want: map[string]wantPredictor{
				PredictorM2HO:      {Ratio{Num: 1, Den: 2}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorNaive:     {Ratio{Num: 1, Den: 2}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorAtCommand: {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(33)},
			},
			wantOutcomes: map[string]int{statemachine.OutcomeConfirmed: 1, statemachine.OutcomeTimedOut: 1},
		},
		{
			name: "A2 of the mmWave cell then A1 cancels",
			run: new(predRun).
				report(5000, diag.EventA2, predMmA, diag.Cell{}).
				report(5200, diag.EventA1, predMmA, diag.Cell{}).
				handover(diag.EventA3, diag.HOSCGChange, predMmA, predMmB, 9820, 9967, 10000),
			want: map[string]wantPredictor{
				PredictorM2HO:      {Ratio{Num: 1, Den: 2}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorNaive:     {Ratio{Num: 1, Den: 3}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorAtCommand: {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(33)},
			},
			wantOutcomes: map[string]int{statemachine.OutcomeConfirmed: 1, statemachine.OutcomeCancelledA1: 1},
		},
		{
			name: "radio link failure is missed",
			run: new(predRun).
				handover(diag.EventB1, diag.HOSCGAdd, predSub6A, predMmA, 9820, 9967, 10000).
				rlf(predMmA, predSub6A, 20000),
			want: map[string]wantPredictor{
				PredictorM2HO:      {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 2}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorNaive:     {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 2}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorAtCommand: {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 2}, Ratio{Num: 1, Den: 1}, msAt(33)},
			},
			wantOutcomes: map[string]int{statemachine.OutcomeConfirmed: 1},
		},
		{
			name: "failure drops a pending prediction",
			run: new(predRun).
				handover(diag.EventB1, diag.HOSCGAdd, predSub6A, predMmA, 9820, 9967, 10000).
				report(19900, diag.EventA2, predMmA, diag.Cell{}).
				rlf(predMmA, predSub6A, 20000),
			want: map[string]wantPredictor{
				PredictorM2HO:      {Ratio{Num: 1, Den: 2}, Ratio{Num: 1, Den: 2}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorNaive:     {Ratio{Num: 1, Den: 2}, Ratio{Num: 1, Den: 2}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorAtCommand: {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 2}, Ratio{Num: 1, Den: 1}, msAt(33)},
			},
			wantOutcomes: map[string]int{statemachine.OutcomeConfirmed: 1, OutcomeDropped: 1},
		},
		{
			name: "a report for another target supersedes the prediction",
			run: new(predRun).
				report(9700, diag.EventA3, predMmA, predMmB).
				handover(diag.EventA2, diag.HOSCGRelease, predMmA, predSub6A, 9820, 9967, 10000),
			want: map[string]wantPredictor{
				PredictorM2HO:      {Ratio{Num: 1, Den: 2}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorNaive:     {Ratio{Num: 2, Den: 2}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(300)},
				PredictorAtCommand: {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(33)},
			},
			wantOutcomes: map[string]int{statemachine.OutcomeConfirmed: 1, OutcomeSuperseded: 1},
		},
		{
			name: "periodic repeat of a report is one prediction",
			run: new(predRun).
				report(9700, diag.EventA3, predSub6A, predSub6B).
				handover(diag.EventA3, diag.HOPCell, predSub6A, predSub6B, 9820, 9967, 10000),
			want: map[string]wantPredictor{
				PredictorM2HO:      {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(300)},
				PredictorNaive:     {Ratio{Num: 2, Den: 2}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(300)},
				PredictorAtCommand: {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(33)},
			},
			wantOutcomes: map[string]int{statemachine.OutcomeConfirmed: 1},
		},
		{
			name: "completion confirms when the command was not logged",
			run: new(predRun).
				handover(diag.EventA3, diag.HOPCell, predSub6A, predSub6B, 9820, 9967, 10000).
				withoutCommands(),
			want: map[string]wantPredictor{
				PredictorM2HO:      {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorNaive:     {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorAtCommand: {Ratio{Num: 0, Den: 0}, Ratio{Num: 0, Den: 1}, Ratio{Num: 0, Den: 1}, 0},
			},
			wantOutcomes: map[string]int{statemachine.OutcomeConfirmed: 1},
		},
		{
			name: "HO-Naive counts every report",
			run: new(predRun).
				report(9000, diag.EventA1, predSub6A, diag.Cell{}). // 1 s before execution: too early
				report(9600, diag.EventA4, predSub6A, predSub6B).   // 400 ms before: too early
				handover(diag.EventA3, diag.HOPCell, predSub6A, predSub6B, 9820, 9967, 10000).
				report(9900, diag.EventA5, predSub6A, predSub6B). // before the command: correct
				report(9980, diag.EventB2, predSub6A, predSub6B), // after the command
			want: map[string]wantPredictor{
				PredictorM2HO:      {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorNaive:     {Ratio{Num: 2, Den: 5}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(180)},
				PredictorAtCommand: {Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, Ratio{Num: 1, Den: 1}, msAt(33)},
			},
			wantOutcomes: map[string]int{statemachine.OutcomeConfirmed: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := EvaluatePrediction([]*emu.GroundTruth{tt.run.truth(t)})
			require.NoError(t, err)
			assert.Empty(t, res.Skipped)
			for name, want := range tt.want {
				p, ok := res.Predictor(name)
				require.True(t, ok, name)
				overall, ok := p.Class(diag.AllClasses)
				require.True(t, ok, name)
				assert.Equal(t, want.precision, overall.Precision, "%s precision", name)
				assert.Equal(t, want.recall, overall.Recall, "%s recall", name)
				assert.Equal(t, want.recallHandovers, overall.RecallHandovers, "%s recall over handovers", name)
				assert.Equal(t, want.earlinessMean, overall.EarlinessMean, "%s earliness", name)
			}
			m2ho, _ := res.Predictor(PredictorM2HO)
			assert.Equal(t, tt.wantOutcomes, m2ho.Outcomes)
		})
	}
}

func TestPredictionClassesFollowTheHandover(t *testing.T) {
	run := new(predRun).
		report(2000, diag.EventA2, predMmA, diag.Cell{}). // no handover follows: a wrong mmW-sub6 prediction
		handover(diag.EventB1, diag.HOSCGAdd, predSub6A, predMmA, 4820, 4967, 5000).
		handover(diag.EventA3, diag.HOSCGChange, predMmA, predMmB, 9800, 9960, 10000).
		handover(diag.EventA2, diag.HOSCGRelease, predMmB, predSub6A, 14700, 14950, 15000)
	res, err := EvaluatePrediction([]*emu.GroundTruth{run.truth(t)})
	require.NoError(t, err)
	m2ho, _ := res.Predictor(PredictorM2HO)
	tests := []struct {
		class                string
		precision, recall    Ratio
		earlinessMean, earlM time.Duration
	}{
		{class: "sub6_mmwave", precision: Ratio{Num: 1, Den: 1}, recall: Ratio{Num: 1, Den: 1}, earlinessMean: msAt(180), earlM: msAt(180)},
		{class: "mmwave_mmwave", precision: Ratio{Num: 1, Den: 1}, recall: Ratio{Num: 1, Den: 1}, earlinessMean: msAt(200), earlM: msAt(200)},
		{class: "mmwave_sub6", precision: Ratio{Num: 1, Den: 2}, recall: Ratio{Num: 1, Den: 1}, earlinessMean: msAt(300), earlM: msAt(300)},
		{class: diag.AllClasses, precision: Ratio{Num: 3, Den: 4}, recall: Ratio{Num: 3, Den: 3}, earlinessMean: msAt(680) / 3, earlM: msAt(200)},
	}
	for _, tt := range tests {
		t.Run(tt.class, func(t *testing.T) {
			row, ok := m2ho.Class(tt.class)
			require.True(t, ok)
			assert.Equal(t, tt.precision, row.Precision)
			assert.Equal(t, tt.recall, row.Recall)
			assert.InDelta(t, float64(tt.earlinessMean), float64(row.EarlinessMean), 1)
			assert.Equal(t, tt.earlM, row.EarlinessMedian)
		})
	}
	_, ok := m2ho.Class("sub6_sub6")
	assert.False(t, ok, "a class without handovers or predictions has no row")

	require.Len(t, res.Handovers, 3)
	assert.Equal(t, map[string]time.Duration{PredictorM2HO: msAt(300), PredictorNaive: msAt(300), PredictorAtCommand: msAt(50)}, res.Handovers[2].Earliness)
}

func TestPredictionSkipsMalformedSignalling(t *testing.T) {
	truth := new(predRun).handover(diag.EventA3, diag.HOPCell, predSub6A, predSub6B, 9820, 9967, 10000).truth(t)
	truth.Signalling = append(truth.Signalling,
		json.RawMessage(`{"v":1,"type":"meas_report"`),
		json.RawMessage(`{"v":2,"type":"ho_failure","cause":"rlf"}`),
		json.RawMessage(`{"v":1,"type":"ho_failure","cause":"rlf"}`),
		json.RawMessage(`{"v":1,"type":"meas_report","t":"yesterday","event":"A3"}`))
	res, err := EvaluatePrediction([]*emu.GroundTruth{truth})
	require.NoError(t, err)
	assert.Equal(t, map[string]int{
		diag.ReasonJSONSyntax: 1, diag.ReasonJSONVersion: 1, diag.ReasonJSONTime: 1, skipNoTime: 1,
	}, res.Skipped)
	m2ho, _ := res.Predictor(PredictorM2HO)
	overall, _ := m2ho.Class(diag.AllClasses)
	assert.Equal(t, Ratio{Num: 1, Den: 1}, overall.Recall)
}

func TestPredictionUnusableRuns(t *testing.T) {
	withoutSignalling := new(predRun).handover(diag.EventA3, diag.HOPCell, predSub6A, predSub6B, 9820, 9967, 10000).truth(t)
	withoutSignalling.Signalling = nil
	tests := []struct {
		name    string
		truth   *emu.GroundTruth
		wantErr string
	}{
		{name: "no ground truth", truth: nil, wantErr: "run 0: no ground truth"},
		{name: "handovers without signalling", truth: withoutSignalling, wantErr: "1 handovers but no signalling"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := EvaluatePrediction([]*emu.GroundTruth{tt.truth})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestPredictionSumsRuns(t *testing.T) {
	first := new(predRun).
		report(5000, diag.EventA3, predSub6A, predSub6B).
		handover(diag.EventA3, diag.HOPCell, predSub6A, predSub6B, 9820, 9967, 10000).truth(t)
	second := new(predRun).
		handover(diag.EventB1, diag.HOSCGAdd, predSub6A, predMmA, 4800, 4960, 5000).
		rlf(predMmA, predSub6A, 8000).truth(t)
	second.Scenario = "second"
	res, err := EvaluatePrediction([]*emu.GroundTruth{first, second})
	require.NoError(t, err)
	assert.Equal(t, 2, res.Runs)
	m2ho, _ := res.Predictor(PredictorM2HO)
	overall, _ := m2ho.Class(diag.AllClasses)
	assert.Equal(t, Ratio{Num: 2, Den: 3}, overall.Precision)
	assert.Equal(t, Ratio{Num: 2, Den: 3}, overall.Recall)
	assert.Equal(t, Ratio{Num: 2, Den: 2}, overall.RecallHandovers)
	assert.Equal(t, msAt(190), overall.EarlinessMean)
	assert.Equal(t, map[string]int{statemachine.OutcomeConfirmed: 2, statemachine.OutcomeTimedOut: 1}, m2ho.Outcomes)

	require.Len(t, res.Handovers, 3)
	assert.Equal(t, HandoverPrediction{
		Run: 1, Scenario: "second", Index: 1, Procedure: emu.ProcedureRLF, Class: "mmwave_sub6", ExecAt: msAt(8000),
	}, res.Handovers[2], "a radio link failure has no earliness")
	assert.Equal(t, 0, res.Handovers[0].Run)
	assert.Equal(t, msAt(200), res.Handovers[1].Earliness[PredictorM2HO])
}

func TestPredictionReplayCrossesLongGaps(t *testing.T) {
	run := new(predRun).handover(diag.EventA3, diag.HOPCell, predSub6A, predSub6B, 9820, 9967, 10000)
	// A report stamped decades before the run: the replay must not tick
	// through the gap.
	run.events = append(run.events, diag.Event{Type: diag.TypeMeasReport, Time: predStart.AddDate(-30, 0, 0), Meas: diag.EventA3, Serving: predSub6A, Neighbor: predSub6B})
	res, err := EvaluatePrediction([]*emu.GroundTruth{run.truth(t)})
	require.NoError(t, err)
	m2ho, _ := res.Predictor(PredictorM2HO)
	assert.Equal(t, map[string]int{statemachine.OutcomeTimedOut: 1, statemachine.OutcomeConfirmed: 1}, m2ho.Outcomes)
	overall, _ := m2ho.Class(diag.AllClasses)
	assert.Equal(t, Ratio{Num: 1, Den: 2}, overall.Precision)
	assert.Equal(t, msAt(180), overall.EarlinessMean)
}

func TestPredictionEmptyRun(t *testing.T) {
	res, err := EvaluatePrediction([]*emu.GroundTruth{{Scenario: "idle", Start: predStart}})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Runs)
	require.Len(t, res.Predictors, 3)
	for _, p := range res.Predictors {
		assert.Empty(t, p.Classes, p.Predictor)
	}
	var table bytes.Buffer
	require.NoError(t, WriteEarlinessTable(&table, res))
	assert.Contains(t, table.String(), "| Overall | - (n=0) | - (n=0) | - (n=0) |")
}

func TestPredictionRatio(t *testing.T) {
	tests := []struct {
		name     string
		ratio    Ratio
		wantText string
		wantJSON string
	}{
		{name: "counts", ratio: Ratio{Num: 45, Den: 48}, wantText: "93.8 (45/48)", wantJSON: `{"num":45,"den":48,"value":0.9375}`},
		{name: "empty", ratio: Ratio{Num: 0, Den: 0}, wantText: "- (0/0)", wantJSON: `{"num":0,"den":0,"value":null}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.wantText, tt.ratio.String())
			raw, err := json.Marshal(tt.ratio)
			require.NoError(t, err)
			assert.JSONEq(t, tt.wantJSON, string(raw))
			var back Ratio
			require.NoError(t, json.Unmarshal(raw, &back))
			assert.Equal(t, tt.ratio, back)
		})
	}
}

func TestPredictionTables(t *testing.T) {
	run := new(predRun).
		report(5000, diag.EventA3, predSub6A, predSub6B).
		handover(diag.EventA3, diag.HOPCell, predSub6A, predSub6B, 9820, 9967, 10000).
		rlf(predSub6B, predSub6A, 20000)
	res, err := EvaluatePrediction([]*emu.GroundTruth{run.truth(t)})
	require.NoError(t, err)
	res.Live = &LivePrediction{Runs: 1, Confirmed: 1, TimedOut: 1, Handovers: 2}

	var table4 bytes.Buffer
	require.NoError(t, WritePredictionTable(&table4, res))
	lines := strings.Split(table4.String(), "\n")
	require.GreaterOrEqual(t, len(lines), 6)
	assert.Equal(t, "| Predictor | sub6-sub6 p | sub6-sub6 r | sub6-mmW p | sub6-mmW r | mmW-mmW p | mmW-mmW r | mmW-sub6 p | mmW-sub6 r | Overall p | Overall r | Overall r, handovers only |", lines[0])
	assert.Equal(t, "| HO-Naive | 50.0 (1/2) | 50.0 (1/2) | - (0/0) | - (0/0) | - (0/0) | - (0/0) | - (0/0) | - (0/0) | 50.0 (1/2) | 50.0 (1/2) | 100.0 (1/1) |", lines[2])
	assert.Equal(t, "| No Pred. | 100.0 (1/1) | 50.0 (1/2) | - (0/0) | - (0/0) | - (0/0) | - (0/0) | - (0/0) | - (0/0) | 100.0 (1/1) | 50.0 (1/2) | 100.0 (1/1) |", lines[3])
	assert.Equal(t, "| M2HO | 50.0 (1/2) | 50.0 (1/2) | - (0/0) | - (0/0) | - (0/0) | - (0/0) | - (0/0) | - (0/0) | 50.0 (1/2) | 50.0 (1/2) | 100.0 (1/1) |", lines[4])
	assert.Equal(t, "| M2HO live (m2hod) | - | - | - | - | - | - | - | - | 50.0 (1/2) | 50.0 (1/2) | - |", lines[5])
	for _, line := range lines[:6] {
		assert.Equal(t, 13, strings.Count(line, "|"), "every row has 12 columns: %q", line)
	}

	var table5 bytes.Buffer
	require.NoError(t, WriteEarlinessTable(&table5, res))
	lines = strings.Split(table5.String(), "\n")
	require.GreaterOrEqual(t, len(lines), 7)
	assert.Equal(t, "| Handover | M2HO | No Pred. | HO-Naive |", lines[0])
	assert.Equal(t, "| sub6-sub6 | 180.0 / 180.0 (n=1) | 33.0 / 33.0 (n=1) | 180.0 / 180.0 (n=1) |", lines[2])
	assert.Equal(t, "| sub6-mmW | - (n=0) | - (n=0) | - (n=0) |", lines[3])
	assert.Equal(t, "| Overall | 180.0 / 180.0 (n=1) | 33.0 / 33.0 (n=1) | 180.0 / 180.0 (n=1) |", lines[6])

	raw, err := json.Marshal(res)
	require.NoError(t, err)
	var back PredictionResult
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, res.Predictors, back.Predictors)
	assert.Equal(t, res.Live, back.Live)
}

// liveMetrics is the part of an m2hod scrape the cross-check reads, with
// neighbours it must ignore.
const liveMetrics = `# HELP m2hod_handovers_total Executed handovers, by source and target band.
# TYPE m2hod_handovers_total counter
m2hod_handovers_total{kind="mmwave_mmwave"} 1
m2hod_handovers_total{kind="mmwave_sub6"} 1
m2hod_handovers_total{kind="sub6_mmwave"} 1
m2hod_handovers_total{kind="sub6_sub6"} 2
# HELP m2hod_predictions_total Handover predictions, by outcome.
# TYPE m2hod_predictions_total counter
m2hod_predictions_total{outcome="cancelled_a1"} 1
m2hod_predictions_total{outcome="confirmed"} 4
m2hod_predictions_total{outcome="timed_out"} 2
# HELP m2hod_state_transitions_total State machine transitions, by source and destination state.
# TYPE m2hod_state_transitions_total counter
m2hod_state_transitions_total{from="stable",to="preparation"} 7
`

func TestPredictionReadLive(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    LivePrediction
		wantErr bool
	}{
		{name: "daemon scrape", text: liveMetrics, want: LivePrediction{Runs: 1, Confirmed: 4, CancelledA1: 1, TimedOut: 2, Handovers: 5}},
		{name: "no predictions metric", text: "m2hod_flows 1\n", wantErr: true},
		{name: "not the text format", text: "m2hod_predictions_total{outcome=\"confirmed\" 4\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadLivePrediction(strings.NewReader(tt.text))
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, 7, got.Made())
			assert.Equal(t, 1, got.Unpredicted())
			assert.Equal(t, Ratio{Num: 4, Den: 7}, got.Precision())
			assert.Equal(t, Ratio{Num: 4, Den: 5}, got.Recall())
			raw, err := json.Marshal(got)
			require.NoError(t, err)
			assert.JSONEq(t, `{"runs":1,"confirmed":4,"cancelled_a1":1,"timed_out":2,"handovers":5,"made":7,"unpredicted":1,`+
				`"precision":{"num":4,"den":7,"value":0.5714285714285714},"recall":{"num":4,"den":5,"value":0.8}}`, string(raw))
		})
	}
}

func TestPredictionReadLiveFiles(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, run := range []string{"run1", "run2"} {
		path := filepath.Join(dir, run+"-m2hod-metrics.txt")
		require.NoError(t, os.WriteFile(path, []byte(liveMetrics), 0o644))
		paths = append(paths, path)
	}
	total, err := ReadLivePredictionFiles(paths)
	require.NoError(t, err)
	assert.Equal(t, LivePrediction{Runs: 2, Confirmed: 8, CancelledA1: 2, TimedOut: 4, Handovers: 10}, total)

	_, err = ReadLivePredictionFiles(append(paths, filepath.Join(dir, "absent.txt")))
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// generatedTruth is a generated scenario and the ground truth of its
// signalling (emu.SignallingTruth).
func generatedTruth(tb testing.TB, seed uint64) (*scenario.Scenario, *emu.GroundTruth) {
	tb.Helper()
	sc, err := scenario.Generate(scenario.GenerateOptions{Seed: seed, Duration: 10 * time.Minute, Mobility: scenario.MobilityDriving})
	require.NoError(tb, err)
	truth, err := emu.SignallingTruth(sc, predStart)
	require.NoError(tb, err)
	return sc, truth
}

func TestPredictionGeneratedScenarios(t *testing.T) {
	var truths []*emu.GroundTruth
	commandLeads := map[string][]time.Duration{}
	handovers, failures, unreported := 0, 0, 0
	for _, seed := range []uint64{1, 2, 3} {
		sc, truth := generatedTruth(t, seed)
		truths = append(truths, truth)
		require.Len(t, truth.Handovers, countProcedures(sc))
		for _, e := range sc.Timeline {
			if e.Type != scenario.TypeHandover {
				continue
			}
			if e.Unreported {
				unreported++
			}
			source, _ := sc.Cell(e.Source)
			target, _ := sc.Cell(e.Target)
			class := diag.HandoverClass(source.Band, target.Band)
			commandLeads[class] = append(commandLeads[class], e.CommandLead)
			commandLeads[diag.AllClasses] = append(commandLeads[diag.AllClasses], e.CommandLead)
		}
		for _, h := range truth.Handovers {
			if h.Procedure == emu.ProcedureRLF {
				failures++
			} else {
				handovers++
			}
		}
	}
	require.NotZero(t, handovers)
	res, err := EvaluatePrediction(truths)
	require.NoError(t, err)
	// The only records m2hod rejects are the generator's A3 reports that
	// name no neighbour (diag requires one).
	unparsable := 0
	for _, truth := range truths {
		for _, r := range truth.Reports {
			if r.Event == diag.EventA3 && r.Neighbor == "" {
				unparsable++
			}
		}
	}
	assert.Equal(t, unparsable, res.Skipped[diag.ReasonJSONCell])
	assert.Equal(t, unparsable, sumCounts(res.Skipped))

	m2ho, _ := res.Predictor(PredictorM2HO)
	overall, ok := m2ho.Class(diag.AllClasses)
	require.True(t, ok)
	precision, _ := overall.Precision.Value()
	recall, _ := overall.Recall.Value()
	recallHandovers, _ := overall.RecallHandovers.Value()
	t.Logf("m2ho over %d handovers and %d failures: precision %v, recall %v, recall over handovers %v, earliness %v (median %v), outcomes %v",
		handovers, failures, overall.Precision, overall.Recall, overall.RecallHandovers, overall.EarlinessMean, overall.EarlinessMedian, m2ho.Outcomes)
	assert.GreaterOrEqual(t, precision, 0.6, "false reports of the generator are a minority")
	require.Positive(t, unreported, "the generator leaves some handovers unreported, as Algorithm 1 missed some on the paper's networks")
	assert.GreaterOrEqual(t, float64(overall.RecallHandovers.Num), 0.95*float64(handovers-unreported), "every reported handover predicted")
	assert.Equal(t, handovers+failures, overall.Recall.Den)
	assert.LessOrEqual(t, overall.Recall.Num, handovers, "radio link failures are never predicted")
	assert.Less(t, recall, recallHandovers)
	assert.Equal(t, m2ho.Outcomes[statemachine.OutcomeConfirmed], overall.Precision.Num, "every confirmation is a handover of the ground truth")
	assert.Zero(t, m2ho.Outcomes[OutcomeUnresolved])
	// Earliness lies between the command lead and the longest report lead.
	assert.Greater(t, overall.EarlinessMean, 32*time.Millisecond)
	assert.LessOrEqual(t, overall.EarlinessMean, NaiveWindow)

	naive, _ := res.Predictor(PredictorNaive)
	naiveOverall, _ := naive.Class(diag.AllClasses)
	assert.Equal(t, Ratio{Num: handovers - unreported, Den: handovers}, naiveOverall.RecallHandovers, "HO-Naive sees every reported handover's report")
	assert.LessOrEqual(t, naiveOverall.Precision.Num*overall.Precision.Den, overall.Precision.Num*naiveOverall.Precision.Den,
		"HO-Naive is no more precise than Algorithm 1")

	atCommand, _ := res.Predictor(PredictorAtCommand)
	for class, leads := range commandLeads {
		row, ok := atCommand.Class(class)
		require.True(t, ok, class)
		var sum time.Duration
		for _, lead := range leads {
			sum += lead
		}
		mean := time.Duration(math.Round(float64(sum) / float64(len(leads))))
		assert.Equal(t, Ratio{Num: len(leads), Den: len(leads)}, row.Precision, class)
		assert.Equal(t, mean, row.EarlinessMean, "react-at-command earliness of %s is the mean command lead", class)
	}
}

func countProcedures(sc *scenario.Scenario) int {
	n := 0
	for _, e := range sc.Timeline {
		if e.Type == scenario.TypeHandover || e.Type == scenario.TypeRLF {
			n++
		}
	}
	return n
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// BenchmarkPredictionEvaluate scores one generated 10-minute drive (about
// 120 handovers) with the three predictors.
func BenchmarkPredictionEvaluate(b *testing.B) {
	_, truth := generatedTruth(b, 1)
	truths := []*emu.GroundTruth{truth}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EvaluatePrediction(truths); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(truths[0].Handovers)), "handovers/op")
}

// TestPredictionRandomSignallingInvariants feeds arbitrary event sequences
// (any order of reports, commands, completions and failures between four
// cells) and checks what must hold whatever the machine decides.
func TestPredictionRandomSignallingInvariants(t *testing.T) {
	cells := []diag.Cell{predSub6A, predSub6B, predMmA, predMmB}
	events := []diag.MeasEvent{diag.EventA1, diag.EventA2, diag.EventA3, diag.EventA5, diag.EventB1}
	kinds := []diag.HOKind{diag.HOPCell, diag.HOSCGAdd, diag.HOSCGChange, diag.HOSCGRelease}
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6, 7, 8} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			run := new(predRun)
			ms := 1000
			for range 200 {
				ms += 1 + rng.IntN(400)
				source, target := cells[rng.IntN(len(cells))], cells[rng.IntN(len(cells))]
				switch rng.IntN(5) {
				case 0:
					run.handover(events[rng.IntN(len(events))], kinds[rng.IntN(len(kinds))], source, target, ms, ms+100+rng.IntN(200), ms+320)
					ms += 400
				case 1:
					run.rlf(source, target, ms)
					ms += 200
				default:
					run.report(ms, events[rng.IntN(len(events))], source, target)
				}
			}
			res, err := EvaluatePrediction([]*emu.GroundTruth{run.truth(t)})
			require.NoError(t, err)
			assert.Empty(t, res.Skipped)
			for _, p := range res.Predictors {
				for _, row := range p.Classes {
					assert.LessOrEqual(t, row.Precision.Num, row.Precision.Den, "%s %s", p.Predictor, row.Class)
					assert.LessOrEqual(t, row.Recall.Num, row.RecallHandovers.Den, "%s %s: failures are never predicted", p.Predictor, row.Class)
					assert.LessOrEqual(t, row.RecallHandovers.Den, row.Recall.Den, "%s %s", p.Predictor, row.Class)
					if row.Recall.Num > 0 {
						assert.Positive(t, row.EarlinessMedian, "%s %s", p.Predictor, row.Class)
					}
				}
			}
			m2ho, _ := res.Predictor(PredictorM2HO)
			overall, ok := m2ho.Class(diag.AllClasses)
			require.True(t, ok)
			assert.Equal(t, overall.Precision.Den, sumCounts(m2ho.Outcomes), "every prediction has one outcome")
			assert.LessOrEqual(t, overall.Precision.Num, m2ho.Outcomes[statemachine.OutcomeConfirmed])
			assert.Zero(t, m2ho.Outcomes[OutcomeUnresolved])
		})
	}
}
