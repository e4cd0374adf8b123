package report

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/traffic"
)

// fixture: 20 s, a 10 Mbit/s cell then (handover at 10 s) a 100 Mbit/s one.
func fixture(t *testing.T) (*scenario.Scenario, *emu.GroundTruth) {
	t.Helper()
	sc := &scenario.Scenario{
		Name: "fixture", Duration: 20 * time.Second, Scale: 1, InitialCell: "a",
		Cells: []scenario.Cell{
			{Name: "a", RAT: diag.RATNR, PCI: 1, ARFCN: 627264, Capacity: scenario.CapacitySpec{ConstantMbps: 10}, BufferBytes: 100000},
			{Name: "b", RAT: diag.RATNR, PCI: 2, ARFCN: 2079167, Capacity: scenario.CapacitySpec{ConstantMbps: 100}, BufferBytes: 100000},
		},
		Timeline: []scenario.Event{{At: 10 * time.Second, Type: scenario.TypeHandover, Source: "a", Target: "b"}},
	}
	raw, err := sc.Marshal()
	require.NoError(t, err)
	sc, err = scenario.Parse(raw)
	require.NoError(t, err)
	truth := &emu.GroundTruth{Handovers: []emu.HandoverRecord{{
		Index: 0, Procedure: emu.ProcedureHandover, Class: "sub6_mmwave", Source: "a", Target: "b",
		MeasAt: 9820 * time.Millisecond, CommandAt: 9967 * time.Millisecond, ExecAt: 10 * time.Second, CompleteAt: 10027 * time.Millisecond,
		Reordered: true, OverflowDrops: 5,
	}}, DupAcks: []emu.DupAck{{Cause: emu.DupAckReorder, Handover: 0}, {Cause: emu.DupAckReorder, Handover: 0}, {Cause: emu.DupAckLoss, Handover: -1}}}
	return sc, truth
}

// measurements: goodput 8 Mbit/s until 10 s, then rising by 20 Mbit/s per
// second up to 90; one retransmission at retransAt; cwnd 100 then 50 for
// 0.5 s after execution, then 200.
func measurements(retransAt time.Duration) *traffic.Measurements {
	m := &traffic.Measurements{}
	var bytes float64
	for at := time.Duration(0); at <= 20*time.Second; at += 100 * time.Millisecond {
		rate := 8e6
		if at > 10*time.Second {
			rate = min(90e6, 8e6+20e6*(at-10*time.Second).Seconds())
		}
		if at > 0 {
			bytes += rate / 8 * 0.1
		}
		m.Goodput = append(m.Goodput, traffic.GoodputSample{At: at, Bytes: uint64(bytes)})
	}
	for at := time.Duration(0); at <= 20*time.Second; at += 10 * time.Millisecond {
		s := traffic.TCPInfoSample{At: at, Cwnd: 100}
		switch {
		case at >= 10*time.Second && at < 10500*time.Millisecond:
			s.Cwnd = 50
		case at >= 10500*time.Millisecond:
			s.Cwnd = 200
		}
		if at >= retransAt {
			s.Retrans = 1
		}
		m.TCPInfo = append(m.TCPInfo, s)
	}
	m.ReceivedBytes = m.Goodput[len(m.Goodput)-1].Bytes
	return m
}

func TestAnalyze(t *testing.T) {
	sc, truth := fixture(t)
	tests := []struct {
		name         string
		retransAt    time.Duration
		wantLossFree bool
	}{
		{name: "retransmission inside the window", retransAt: 11 * time.Second, wantLossFree: false},
		{name: "retransmission before prediction", retransAt: 5 * time.Second, wantLossFree: true},
		{name: "retransmission after the window", retransAt: 12500 * time.Millisecond, wantLossFree: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs, err := Analyze(sc, truth, measurements(tt.retransAt))
			require.NoError(t, err)
			require.Len(t, hs, 1)
			h := hs[0]
			assert.Equal(t, tt.wantLossFree, h.LossFree)
			// [5 s, 10 s] at 8 Mbit/s = 5 MB; [10, 15] ramps 8->90 by 4.1 s
			// then holds: integral of the ramp (about 4.1 s x 49) plus 0.9 s
			// x 90, over 10 s.
			assert.InDelta(t, (5*8e6+4.1*49e6+0.9*90e6)/10, h.ThroughputBps, 1.5e6)
			// The mean of 8+20(t-10) over [T-1, T] reaches 75 at T = 13.85 s.
			assert.True(t, h.Converged)
			assert.InDelta(t, 3.85, h.ConvergenceTime.Seconds(), 0.15)
			assert.Equal(t, uint32(100), h.CwndBefore)
			assert.Equal(t, uint32(50), h.CwndMin)
			assert.InDelta(t, 0.5, h.CwndDrop, 1e-9)
			assert.Equal(t, 2, h.ReorderDupAck)
			assert.InDelta(t, 100e6, h.TargetCapacityBps, 1)
		})
	}
}

func TestAnalyzeCountsSourceDiscardsOfHandoversOnly(t *testing.T) {
	for _, tt := range []struct {
		procedure string
		want      int
	}{{emu.ProcedureHandover, 3}, {emu.ProcedureRLF, 0}} {
		t.Run(tt.procedure, func(t *testing.T) {
			sc, truth := fixture(t)
			truth.Handovers[0].Procedure = tt.procedure
			truth.Handovers[0].Discarded = 3
			hs, err := Analyze(sc, truth, measurements(time.Hour))
			require.NoError(t, err)
			assert.Equal(t, tt.want, hs[0].SourceDiscards, "a failure's discards are its buffer, not a context release")
		})
	}
}

func TestAnalyzeNeverConverges(t *testing.T) {
	sc, truth := fixture(t)
	m := measurements(time.Hour)
	// Flat 8 Mbit/s all along: never near the 100 Mbit/s target.
	for i := range m.Goodput {
		m.Goodput[i].Bytes = uint64(float64(m.Goodput[i].At.Seconds()) * 1e6)
	}
	hs, err := Analyze(sc, truth, m)
	require.NoError(t, err)
	assert.False(t, hs[0].Converged)
	assert.InDelta(t, 10, hs[0].ConvergenceTime.Seconds(), 0.01, "censored at the end of the run")

	_, err = Analyze(sc, truth, &traffic.Measurements{})
	assert.Error(t, err)
}

func TestSummariesAndTables(t *testing.T) {
	sc, truth := fixture(t)
	hs, err := Analyze(sc, truth, measurements(11*time.Second))
	require.NoError(t, err)
	summary := Summarize("cubic", hs)
	require.Len(t, summary, 2, "the class and the overall row")
	assert.Equal(t, "sub6_mmwave", summary[0].Class)
	assert.Equal(t, diag.AllClasses, summary[1].Class)
	assert.Equal(t, 0, summary[1].LossFree)
	assert.Equal(t, 5, summary[1].OverflowDrops)

	var out bytes.Buffer
	require.NoError(t, WriteComparison(&out, [][]Summary{summary, Summarize("cubic+m2ho", hs)}))
	assert.Contains(t, out.String(), "cubic+m2ho")
	assert.Contains(t, out.String(), "sub6_mmwave")
	out.Reset()
	require.NoError(t, WriteHandoverTable(&out, "cubic", hs))
	assert.Contains(t, out.String(), "sub6_mmwave")

	findings := Findings(hs)
	require.Len(t, findings, 4)
	assert.Contains(t, findings[1], "finding 2")
	assert.Contains(t, findings[1], "2 reorder dupACKs")
	assert.Contains(t, findings[2], "5 packets dropped")
	assert.Contains(t, findings[3], "sub6 to mmWave")
	assert.Equal(t, "CUBIC + m2ho", Title("cubic+m2ho"))
}

func TestFindingTwoNamesWhatTheSourceDid(t *testing.T) {
	forwarded := Handover{Procedure: "handover", Reordered: true, ReorderDupAck: 4, Retransmissions: 1, CwndDrop: 0.2}
	discarded := Handover{Procedure: "handover", Reordered: true, SourceDiscards: 7, Retransmissions: 7, CwndDrop: 0.4}
	plain := Handover{Procedure: "handover"}
	tests := []struct {
		name string
		hs   []Handover
		want []string
	}{
		{name: "forwarded", hs: []Handover{forwarded, plain},
			want: []string{"finding 2, context release reordering (1 handovers): 4 reorder dupACKs, 1 retransmissions, cwnd drop 20%"}},
		{name: "discarded", hs: []Handover{discarded, plain},
			want: []string{"finding 2, context release discarded at the source (1 handovers): 7 packets lost, 7 retransmissions, cwnd drop 40%"}},
		{name: "both", hs: []Handover{forwarded, discarded},
			want: []string{"finding 2, context release reordering (1 handovers)", "finding 2, context release discarded at the source (1 handovers)"}},
		{name: "none", hs: []Handover{plain}, want: []string{"finding 2: no context release in this run"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			findings := Findings(tt.hs)
			require.Len(t, findings, 3+len(tt.want))
			for i, want := range tt.want {
				assert.Contains(t, findings[1+i], want)
			}
		})
	}
}

func TestCapacitySeriesFollowsServingCell(t *testing.T) {
	sc, truth := fixture(t)
	xy, err := CapacitySeries(sc, truth, 20*time.Second)
	require.NoError(t, err)
	require.Len(t, xy, 200)
	assert.InDelta(t, 10e6, xy[50].Y, 1, "5 s: first cell")
	assert.InDelta(t, 100e6, xy[150].Y, 1, "15 s: target cell")
	// The period holding execution loses the 27 ms interruption.
	assert.Less(t, xy[100].Y, 100e6)
}

func TestPlotRunsWritesReadablePNG(t *testing.T) {
	sc, truth := fixture(t)
	path := filepath.Join(t.TempDir(), "plot.png")
	require.NoError(t, PlotRuns(path, "fixture", sc, truth, []Run{
		{Variant: "cubic", Measurements: measurements(11 * time.Second)},
		{Variant: "cubic+m2ho", Measurements: measurements(time.Hour)},
	}))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	assert.Greater(t, img.Bounds().Dx(), 800)
	assert.Greater(t, img.Bounds().Dy(), 500)
}

// TestSectionThreeThroughputAfterSumsGoodput: a handover whose 3 s before
// were a stall (a sender waiting out a retransmission timeout) must not
// outweigh the others, as a mean of per-handover ratios would let it.
func TestSectionThreeThroughputAfterSumsGoodput(t *testing.T) {
	sc, truth := fixture(t)
	steady := measurements(5 * time.Second)
	// The same run, but the sender stalled at 8 kbit/s until the handover
	// and ran at 8 Mbit/s after it.
	stalled := measurements(5 * time.Second)
	var bytes float64
	for i := range stalled.Goodput {
		at := stalled.Goodput[i].At
		rate := 8e3
		if at > 10*time.Second {
			rate = 8e6
		}
		if at > 0 {
			bytes += rate / 8 * 0.1
		}
		stalled.Goodput[i].Bytes = uint64(bytes)
	}
	var runs []ObservedRun
	for _, m := range []*traffic.Measurements{steady, stalled} {
		hs, err := Analyze(sc, truth, m)
		require.NoError(t, err)
		runs = append(runs, ObservedRun{Scenario: sc, Truth: truth, Measurements: m, Handovers: hs})
	}
	obs, err := SectionThree(runs)
	require.NoError(t, err)
	after := obs[3]
	require.Equal(t, "throughput in the 3 s after a handover against the 3 s before", after.Name)
	assert.Equal(t, 2, after.N)
	// Steady: 8 Mbit/s before; after, the samples of 8+20(t-10) Mbit/s at
	// 10.1..13 s average 39. Stalled: 0.008 before, 8 after.
	assert.InDelta(t, (39+8)/(8+0.008)-1, after.Value, 0.05)
}

// TestRunGoodput: a run's goodput after its startup, whatever its first
// slow start delivered; nothing for a run no longer than the startup.
func TestRunGoodput(t *testing.T) {
	series := func(until time.Duration, startupMbps, laterMbps float64) *traffic.Measurements {
		m := &traffic.Measurements{}
		var bytes float64
		for at := time.Duration(0); at <= until; at += traffic.GoodputPeriod {
			m.Goodput = append(m.Goodput, traffic.GoodputSample{At: at, Bytes: uint64(bytes)})
			rate := laterMbps
			if at < Startup {
				rate = startupMbps
			}
			bytes += rate * 1e6 / 8 * traffic.GoodputPeriod.Seconds()
		}
		return m
	}
	tests := []struct {
		name string
		m    *traffic.Measurements
		want float64
	}{
		{name: "the startup left out", m: series(60*time.Second, 1, 20), want: 20e6},
		{name: "a run no longer than the startup", m: series(Startup, 20, 20), want: 0},
		{name: "no sample", m: &traffic.Measurements{}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.InDelta(t, tc.want, RunGoodput(tc.m), tc.want/1000+1)
		})
	}
}

func TestSenderLostStateOfTheFirstFlow(t *testing.T) {
	sane := []traffic.TCPInfoSample{{Flow: 0, Cwnd: 10, Ssthresh: InfiniteSsthresh}, {Flow: 0, Cwnd: 300, Ssthresh: 210}}
	tests := []struct {
		name    string
		samples []traffic.TCPInfoSample
		lost    bool
	}{
		{name: "no samples"},
		{name: "a new connection's infinite ssthresh, then a loss", samples: sane},
		{name: "a window of a million segments", samples: append(sane, traffic.TCPInfoSample{Flow: 0, Cwnd: ImplausibleCwnd, Ssthresh: 210}), lost: true},
		{name: "an ssthresh above infinity (a return-thunk address)", samples: append(sane, traffic.TCPInfoSample{Flow: 0, Cwnd: 134, Ssthresh: 0x82270de5}), lost: true},
		{name: "another flow's state is not the run's", samples: append(sane, traffic.TCPInfoSample{Flow: 1, Cwnd: ImplausibleCwnd, Ssthresh: 0x82270de5})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.lost, SenderLostState(&traffic.Measurements{TCPInfo: tc.samples}))
		})
	}
}
