package report

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/traffic"
)

// These tests pin the edges of the metric windows of DESIGN.md
// "Evaluation metrics": each boundary gets a case just inside and one just
// outside it, so moving the boundary flips at least one expectation. The
// cases use the scenario of fixture (cell a 10 Mbit/s, cell b 100 Mbit/s,
// both constant, so the target's capacity is known at every instant) with
// their own ground truth.

// handoverAt is a handover to target executed at exec and reported at meas.
func handoverAt(index int, target string, meas, exec time.Duration) emu.HandoverRecord {
	return emu.HandoverRecord{
		Index: index, Procedure: emu.ProcedureHandover, Class: "sub6_mmwave", Source: "a", Target: target,
		MeasAt: meas, CommandAt: exec - 33*time.Millisecond, ExecAt: exec, CompleteAt: exec + 27*time.Millisecond,
	}
}

// rlfAt is a radio link failure to target at exec: as emu records it, it
// has no report, so MeasAt and CommandAt stay zero.
func rlfAt(index int, target string, exec time.Duration) emu.HandoverRecord {
	return emu.HandoverRecord{
		Index: index, Procedure: emu.ProcedureRLF, Class: "sub6_mmwave", Source: "a", Target: target,
		ExecAt: exec, CompleteAt: exec + 50*time.Millisecond,
	}
}

// stepGoodput replaces m's goodput with one that runs at before (bit/s) up
// to step and at after from then on. Samples are every GoodputPeriod like
// the receiver's, and step must lie on a sample so the change is sharp:
// the bytes of the period ending at a sample are credited at that sample's
// rate.
func stepGoodput(m *traffic.Measurements, step time.Duration, before, after float64) {
	m.Goodput = m.Goodput[:0]
	var bytes float64
	for at := time.Duration(0); at <= 20*time.Second; at += traffic.GoodputPeriod {
		rate := before
		if at > step {
			rate = after
		}
		if at > 0 {
			bytes += rate / 8 * traffic.GoodputPeriod.Seconds()
		}
		m.Goodput = append(m.Goodput, traffic.GoodputSample{At: at, Bytes: uint64(bytes)})
	}
	m.ReceivedBytes = m.Goodput[len(m.Goodput)-1].Bytes
}

// TestAnalyzeLossFreeWindow pins both ends of the loss-free window: it opens
// at the measurement report (at execution for a radio link failure, which
// has no report; never at the start of the run) and closes 2 s after
// execution. measurements records the retransmission at the first 10-ms
// tcp_info sample at or after retransAt, as the sampler would see it.
func TestAnalyzeLossFreeWindow(t *testing.T) {
	const (
		meas = 9820 * time.Millisecond
		exec = 10 * time.Second
	)
	tests := []struct {
		name         string
		record       emu.HandoverRecord
		retransAt    time.Duration
		wantLossFree bool
	}{
		// Prediction is the report, so a loss between report and
		// execution is the handover's: a window from execution would miss
		// it.
		{name: "1 ms after the report, before execution", record: handoverAt(0, "b", meas, exec), retransAt: meas + time.Millisecond, wantLossFree: false},
		{name: "1 ms before the report", record: handoverAt(0, "b", meas, exec), retransAt: meas - time.Millisecond, wantLossFree: true},
		// The window closes 2 s after execution, not 1 s.
		{name: "execution + 1.9 s", record: handoverAt(0, "b", meas, exec), retransAt: exec + 1900*time.Millisecond, wantLossFree: false},
		{name: "execution + 2.1 s", record: handoverAt(0, "b", meas, exec), retransAt: exec + 2100*time.Millisecond, wantLossFree: true},
		// An RLF's MeasAt is zero: taken as the prediction, it would charge
		// the failure with every retransmission since the run started.
		{name: "RLF: 1 ms after the failure", record: rlfAt(0, "b", exec), retransAt: exec + time.Millisecond, wantLossFree: false},
		{name: "RLF: 1 ms before the failure", record: rlfAt(0, "b", exec), retransAt: exec - time.Millisecond, wantLossFree: true},
		{name: "RLF: early in the run", record: rlfAt(0, "b", exec), retransAt: 500 * time.Millisecond, wantLossFree: true},
		{name: "RLF: execution + 1.9 s", record: rlfAt(0, "b", exec), retransAt: exec + 1900*time.Millisecond, wantLossFree: false},
		{name: "RLF: execution + 2.1 s", record: rlfAt(0, "b", exec), retransAt: exec + 2100*time.Millisecond, wantLossFree: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, _ := fixture(t)
			truth := &emu.GroundTruth{Handovers: []emu.HandoverRecord{tt.record}}
			hs, err := Analyze(sc, truth, measurements(tt.retransAt))
			require.NoError(t, err)
			require.Len(t, hs, 1)
			assert.Equal(t, tt.wantLossFree, hs[0].LossFree)
			want := uint32(1)
			if tt.wantLossFree {
				want = 0
			}
			assert.Equal(t, want, hs[0].Retransmissions)
		})
	}
}

// TestAnalyzeConvergenceStartsAtExecution pins that only 1-s windows lying
// wholly after execution count: goodput that met the target before the
// handover says nothing about how fast the flow converged on the target.
func TestAnalyzeConvergenceStartsAtExecution(t *testing.T) {
	const exec = 10 * time.Second
	tests := []struct {
		name          string
		before, after float64 // goodput in bit/s either side of execution
		wantConverged bool
		wantTime      time.Duration
	}{
		// 80 Mbit/s from execution on: [exec, exec+1 s] is the first
		// window that counts and it reaches 75 of the target's 100.
		{name: "target reached right after execution", before: 10e6, after: 80e6, wantConverged: true, wantTime: time.Second},
		// 80 Mbit/s only before execution: [exec-1 s, exec] would reach
		// it, and so would no window after; the run's end censors it.
		{name: "target reached only before execution", before: 80e6, after: 10e6, wantConverged: false, wantTime: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, _ := fixture(t)
			truth := &emu.GroundTruth{Handovers: []emu.HandoverRecord{handoverAt(0, "b", 9820*time.Millisecond, exec)}}
			m := measurements(time.Hour)
			stepGoodput(m, exec, tt.before, tt.after)
			hs, err := Analyze(sc, truth, m)
			require.NoError(t, err)
			require.Len(t, hs, 1)
			assert.Equal(t, tt.wantConverged, hs[0].Converged)
			assert.Equal(t, tt.wantTime, hs[0].ConvergenceTime)
		})
	}
}

// TestAnalyzeConvergenceCappedAtNextHandover pins the cap: a flow that
// only reaches the target after the next handover has executed converged
// on some other cell, so the first handover is reported as not converged
// with the time observed up to the next execution.
func TestAnalyzeConvergenceCappedAtNextHandover(t *testing.T) {
	const exec = 10 * time.Second
	// 8 Mbit/s until 14 s, then 80: the window [13.9 s, 14.9 s] has 72.8
	// Mbit/s, [14 s, 15 s] has 80, so uncapped the first handover
	// converges at 15 s, 5 s after its execution.
	tests := []struct {
		name          string
		nextExec      time.Duration
		nextRLF       bool
		wantConverged bool
		wantTime      time.Duration
	}{
		// A window ending exactly at the next execution lies wholly
		// before it.
		{name: "next handover at the converging window's end", nextExec: 15 * time.Second, wantConverged: true, wantTime: 5 * time.Second},
		{name: "next handover 100 ms earlier", nextExec: 14900 * time.Millisecond, wantConverged: false, wantTime: 4900 * time.Millisecond},
		// The cap also applies when the next procedure is a failure.
		{name: "next procedure an RLF 100 ms earlier", nextExec: 14900 * time.Millisecond, nextRLF: true, wantConverged: false, wantTime: 4900 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, _ := fixture(t)
			next := handoverAt(1, "a", tt.nextExec-180*time.Millisecond, tt.nextExec)
			if tt.nextRLF {
				next = rlfAt(1, "a", tt.nextExec)
			}
			truth := &emu.GroundTruth{Handovers: []emu.HandoverRecord{handoverAt(0, "b", 9820*time.Millisecond, exec), next}}
			m := measurements(time.Hour)
			stepGoodput(m, 14*time.Second, 8e6, 80e6)
			hs, err := Analyze(sc, truth, m)
			require.NoError(t, err)
			require.Len(t, hs, 2)
			assert.Equal(t, tt.wantConverged, hs[0].Converged)
			assert.Equal(t, tt.wantTime, hs[0].ConvergenceTime)
		})
	}
}

// TestAnalyzeCwndCutFromTheReport: the cwnd before a handover is the
// one before its report, so a cut between the report and the execution
// (the source's context release at the command) counts; the minimum
// runs until CwndWindow after the execution.
func TestAnalyzeCwndCutFromTheReport(t *testing.T) {
	sc, _ := fixture(t)
	cases := []struct {
		name      string
		cut       time.Duration // cwnd 40 from cut until execution
		handover  emu.HandoverRecord
		wantDrop  float64
		wantFirst uint32
	}{
		{"a cut before the report is not the handover's", 9800 * time.Millisecond, handoverAt(0, "b", 9820*time.Millisecond, 10*time.Second), 0, 40},
		{"a cut between report and execution is", 9900 * time.Millisecond, handoverAt(0, "b", 9820*time.Millisecond, 10*time.Second), 0.6, 100},
		{"a failure counts from the failure", 9900 * time.Millisecond, rlfAt(0, "b", 10*time.Second), 0, 40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := measurements(time.Hour)
			for i := range m.TCPInfo {
				if s := &m.TCPInfo[i]; s.At >= tc.cut && s.At < 10*time.Second {
					s.Cwnd = 40
				}
			}
			hs, err := Analyze(sc, &emu.GroundTruth{Handovers: []emu.HandoverRecord{tc.handover}}, m)
			require.NoError(t, err)
			require.Len(t, hs, 1)
			assert.Equal(t, tc.wantFirst, hs[0].CwndBefore)
			assert.InDelta(t, tc.wantDrop, hs[0].CwndDrop, 1e-9)
		})
	}
}
