package scenario

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

const base = `
name: t
duration: 20s
initial_cell: a
cells:
  - {name: a, rat: nr, pci: 1, arfcn: 627264, capacity: {constant_mbps: 100}, buffer_bytes: 100000, delay_down: 10ms, delay_up: 10ms}
  - {name: b, rat: nr, pci: 2, arfcn: 2079167, capacity: {constant_mbps: 900}, buffer_bytes: 100000}
`

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		timeline string
		wantErr  string
		check    func(t *testing.T, sc *Scenario)
	}{
		{name: "defaults", timeline: "timeline:\n  - {at: 5s, type: handover, source: a, target: b}\n", check: func(t *testing.T, sc *Scenario) {
			assert.Equal(t, 1.0, sc.Scale)
			assert.Equal(t, ReceiverUE, sc.Traffic.Receiver)
			assert.Equal(t, 1, sc.Traffic.Flows)
			assert.Equal(t, diag.BandSub6, sc.Cells[0].Band)
			assert.Equal(t, diag.BandMmWave, sc.Cells[1].Band, "band derived from the FR2 ARFCN")
			assert.Equal(t, SlotMmWave, sc.Cells[1].Slot)
			assert.Equal(t, CarrierRBsSub6, sc.Cells[0].CarrierRBs)
			e := sc.Timeline[0]
			assert.Equal(t, diag.HOPCell, e.Kind)
			assert.Equal(t, DefaultMeasLead, e.MeasLead)
			assert.Equal(t, DefaultCommandLead, e.CommandLead)
			assert.Equal(t, DefaultInterruption, e.Interruption)
		}},
		{name: "rlf target defaults to the failed cell", timeline: "timeline:\n  - {at: 5s, type: rlf}\n", check: func(t *testing.T, sc *Scenario) {
			assert.Equal(t, "a", sc.Timeline[0].Target)
			assert.Equal(t, DefaultRLFRecovery, sc.Timeline[0].Interruption)
		}},
		{name: "handover from a cell not serving", timeline: "timeline:\n  - {at: 5s, type: handover, source: b, target: a}\n", wantErr: "but \"a\" is serving"},
		{name: "unknown target", timeline: "timeline:\n  - {at: 5s, type: handover, source: a, target: z}\n", wantErr: "not another cell"},
		{name: "overlap", timeline: "timeline:\n  - {at: 5s, type: handover, source: a, target: b}\n  - {at: 5100ms, type: handover, source: b, target: a}\n", wantErr: "before the previous event ends"},
		{name: "out of order", timeline: "timeline:\n  - {at: 9s, type: rlf}\n  - {at: 5s, type: rlf}\n", wantErr: "not in time order"},
		{name: "past the end", timeline: "timeline:\n  - {at: 20s, type: rlf}\n", wantErr: "does not fit"},
		{name: "meas lead before start", timeline: "timeline:\n  - {at: 100ms, type: handover, source: a, target: b}\n", wantErr: "does not fit"},
		{name: "bad kind", timeline: "timeline:\n  - {at: 5s, type: handover, kind: soft, source: a, target: b}\n", wantErr: "kind \"soft\""},
		{name: "bad event", timeline: "timeline:\n  - {at: 5s, type: report, reports: [{event: C1}]}\n", wantErr: "not a 3GPP event"},
		{name: "unknown field", timeline: "timelime: []\n", wantErr: "field timelime not found"},
		{name: "unknown type", timeline: "timeline:\n  - {at: 5s, type: teleport}\n", wantErr: "type \"teleport\""},
		{name: "context release forwards by default", timeline: "timeline:\n  - {at: 5s, type: handover, source: a, target: b, context_release: {held_packets: 3}}\n", check: func(t *testing.T, sc *Scenario) {
			assert.Equal(t, &ContextRelease{HeldPackets: 3}, sc.Timeline[0].ContextRelease)
		}},
		{name: "context release discarding", timeline: "timeline:\n  - {at: 5s, type: handover, source: a, target: b, context_release: {held_packets: 3, discard: true}}\n", check: func(t *testing.T, sc *Scenario) {
			assert.Equal(t, &ContextRelease{HeldPackets: 3, Discard: true}, sc.Timeline[0].ContextRelease)
		}},
		{name: "empty held", timeline: "timeline:\n  - {at: 5s, type: handover, source: a, target: b, context_release: {held_packets: 0}}\n", wantErr: "held_packets"},
		{name: "zero leads take the defaults", timeline: "timeline:\n  - {at: 5s, type: handover, source: a, target: b, meas_lead: 0s, command_lead: 0s}\n", check: func(t *testing.T, sc *Scenario) {
			assert.Equal(t, DefaultMeasLead, sc.Timeline[0].MeasLead)
			assert.Equal(t, DefaultCommandLead, sc.Timeline[0].CommandLead)
		}},
		{name: "negative command lead", timeline: "timeline:\n  - {at: 5s, type: handover, source: a, target: b, command_lead: -1ms}\n", wantErr: "command_lead >= 0"},
		// The emulator applies buffer sizes after scaling: 100000 bytes
		// at scale 0.01 are 1000 bytes, less than one packet.
		{name: "cell buffer below one packet once scaled", timeline: "scale: 0.01\n", wantErr: "buffer_bytes 100000 at scale 0.01 is 1000 bytes, smaller than one packet"},
		{name: "target buffer below one packet once scaled", timeline: "scale: 0.1\ntimeline:\n  - {at: 5s, type: handover, source: a, target: b, target_buffer_bytes: 10000}\n", wantErr: "target_buffer_bytes 10000 at scale 0.1 is 1000 bytes"},
		{name: "target buffer of one packet once scaled", timeline: "scale: 0.1\ntimeline:\n  - {at: 5s, type: handover, source: a, target: b, target_buffer_bytes: 15000}\n", check: func(t *testing.T, sc *Scenario) {
			assert.Equal(t, 15000, sc.Timeline[0].TargetBufferBytes)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, err := Parse([]byte(base + tt.timeline))
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.check(t, sc)
		})
	}
}

func TestParseCellErrors(t *testing.T) {
	tests := []struct {
		name    string
		cell    string
		wantErr string
	}{
		{name: "two capacity sources", cell: "{name: c, rat: nr, capacity: {constant_mbps: 1, mahimahi: x}, buffer_bytes: 100000}", wantErr: "exactly one"},
		{name: "no capacity", cell: "{name: c, rat: nr, buffer_bytes: 100000}", wantErr: "exactly one"},
		{name: "tiny buffer", cell: "{name: c, rat: nr, capacity: {constant_mbps: 1}, buffer_bytes: 10}", wantErr: "smaller than one packet"},
		{name: "bad rat", cell: "{name: c, rat: wifi, capacity: {constant_mbps: 1}, buffer_bytes: 100000}", wantErr: "rat \"wifi\""},
		{name: "duplicate", cell: "{name: a, rat: nr, capacity: {constant_mbps: 1}, buffer_bytes: 100000}", wantErr: "used twice"},
		{name: "background share", cell: "{name: c, rat: nr, capacity: {constant_mbps: 1}, buffer_bytes: 100000, background_share: 1}", wantErr: "background_share"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(base + "  - " + tt.cell + "\n"))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestBuiltinScenariosLoad(t *testing.T) {
	paths, err := filepath.Glob("../scenarios/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			sc, err := Load(p)
			require.NoError(t, err)
			assert.NotEmpty(t, sc.Timeline)
			for _, c := range sc.Cells {
				for _, path := range []string{c.Capacity.Mahimahi, c.Capacity.Lumos5G} {
					if path == "" {
						continue
					}
					if _, err := os.Stat(sc.ResolvePath(path)); err != nil {
						t.Skipf("trace %s not present (shared data absent)", path)
					}
				}
			}
		})
	}
}

func TestDemoScenarioHasThePaperHandovers(t *testing.T) {
	sc, err := Load("../scenarios/demo.yaml")
	require.NoError(t, err)
	var classes []string
	for _, e := range sc.Timeline {
		if e.Type != TypeHandover {
			continue
		}
		src, _ := sc.Cell(e.Source)
		dst, _ := sc.Cell(e.Target)
		classes = append(classes, diag.HandoverClass(src.Band, dst.Band))
	}
	assert.Equal(t, []string{"sub6_mmwave", "mmwave_mmwave", "mmwave_sub6"}, classes)
}

func TestGenerateIsReproducible(t *testing.T) {
	opts := GenerateOptions{Seed: 7, Duration: 5 * time.Minute, Mobility: MobilityDriving, Scale: 0.1}
	a, err := Generate(opts)
	require.NoError(t, err)
	b, err := Generate(opts)
	require.NoError(t, err)
	rawA, err := a.Marshal()
	require.NoError(t, err)
	rawB, err := b.Marshal()
	require.NoError(t, err)
	assert.Equal(t, string(rawA), string(rawB))
	// Short runs of many seeds all validate (every event fits the run).
	for seed := range uint64(200) {
		_, err := Generate(GenerateOptions{Seed: seed, Duration: 30 * time.Second, Mobility: MobilityDriving})
		require.NoError(t, err, "seed %d", seed)
	}
	opts.Seed = 8
	c, err := Generate(opts)
	require.NoError(t, err)
	rawC, err := c.Marshal()
	require.NoError(t, err)
	assert.NotEqual(t, string(rawA), string(rawC))

	// What it writes, it reads back.
	again, err := Parse(rawA)
	require.NoError(t, err)
	assert.Equal(t, len(a.Timeline), len(again.Timeline))
}

// The "small target buffer" of an overflow handover replaces the target's
// buffer while the handover lasts: it has to be smaller than the target's
// own buffer, or the handover gets more room than an ordinary one, and at
// least one packet at the scenario's scale, or the target drops
// everything.
func TestGenerateSmallTargetBufferIsBelowTheTargets(t *testing.T) {
	tests := []struct {
		name  string
		scale float64
	}{
		{name: "full scale", scale: 1},
		{name: "the evaluation's scale", scale: 0.1},
		// A sub-6 buffer is 7.5 kB here: one packet is a fifth of it.
		{name: "tiny scale", scale: 0.005},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			overrides := 0
			for seed := uint64(1); seed <= 20; seed++ {
				sc, err := Generate(GenerateOptions{Seed: seed, Duration: 10 * time.Minute, Mobility: MobilityDriving, Scale: tt.scale, MatchMix: true})
				require.NoError(t, err)
				for i, e := range sc.Timeline {
					if e.Type != TypeHandover || e.TargetBufferBytes == 0 {
						continue
					}
					overrides++
					target, ok := sc.Cell(e.Target)
					require.True(t, ok)
					own, small := ScaledBytes(target.BufferBytes, sc.Scale), ScaledBytes(e.TargetBufferBytes, sc.Scale)
					assert.Less(t, small, own, "seed %d timeline %d: %s -> %s", seed, i, e.Source, e.Target)
					assert.GreaterOrEqual(t, small, PacketBytes, "seed %d timeline %d", seed, i)
				}
			}
			// 20 ten-minute drives have about 1,200 handovers, four in
			// ten from a mmWave cell, a fifth of those with a small
			// target buffer.
			assert.Greater(t, overrides, 80)
		})
	}
}

func TestGenerateFollowsTheStatistics(t *testing.T) {
	tests := []struct {
		mobility     string
		wantInterval float64 // mean seconds between handovers, measured
	}{
		{mobility: MobilityWalking, wantInterval: 22.1},
		{mobility: MobilityDriving, wantInterval: 9.2},
	}
	for _, tt := range tests {
		t.Run(tt.mobility, func(t *testing.T) {
			sc, err := Generate(GenerateOptions{Seed: 1, Duration: 10 * time.Hour, Mobility: tt.mobility})
			require.NoError(t, err)
			counts, unreported, falseReports := map[string]int{}, map[string]int{}, map[string]int{}
			fromBand, smallFromBand := map[diag.Band]int{}, map[diag.Band]int{}
			var handovers, reorder, rlf int
			var measLead, cmdLead, interruption time.Duration
			serving, _ := sc.Cell(sc.InitialCell)
			for _, e := range sc.Timeline {
				switch e.Type {
				case TypeHandover:
					handovers++
					dst, _ := sc.Cell(e.Target)
					class := diag.HandoverClass(serving.Band, dst.Band)
					counts[class]++
					if e.Unreported {
						unreported[class]++
						assert.Empty(t, e.MeasEvent)
						assert.Equal(t, e.CommandLead, e.MeasLead)
					} else {
						measLead += e.MeasLead
					}
					cmdLead += e.CommandLead
					interruption += e.Interruption
					if e.ContextRelease != nil {
						reorder++
					}
					fromBand[serving.Band]++
					if e.TargetBufferBytes > 0 {
						smallFromBand[serving.Band]++
					}
					assert.LessOrEqual(t, e.MeasLead, 311*time.Millisecond)
					serving = dst
				case TypeRLF:
					rlf++
					serving, _ = sc.Cell(e.Target)
				case TypeReport:
					// The class of the handover the report announces.
					target := serving.Band
					switch first := e.Reports[0]; {
					case first.Event == diag.EventA2:
						target = diag.BandSub6
					case first.Neighbor != "":
						neighbor, _ := sc.Cell(first.Neighbor)
						target = neighbor.Band
					}
					falseReports[diag.HandoverClass(serving.Band, target)]++
				}
			}
			require.Greater(t, handovers, 1000)
			n := float64(handovers)
			reported := 0
			for class, want := range paperPrediction {
				reported += counts[class] - unreported[class]
				p := 1 - want.recall
				assert.InDelta(t, p, float64(unreported[class])/float64(counts[class]), 3*math.Sqrt(p*(1-p)/float64(counts[class])), "%s: handovers no report announces", class)
				q := want.recall * (1 - want.precision) / want.precision
				got := float64(falseReports[class]) / float64(counts[class])
				assert.InDelta(t, q, got, 3*math.Sqrt(q*(1-q)/float64(counts[class])), "%s: reports that lead nowhere, per handover", class)
			}
			assert.InDelta(t, 178.9, float64(measLead.Milliseconds())/float64(reported), 15, "mean measurement lead")
			assert.InDelta(t, 32.7, float64(cmdLead.Milliseconds())/n, 3, "mean command lead")
			assert.InDelta(t, 27.0, float64(interruption.Milliseconds())/n, 3, "mean interruption")
			assert.InDelta(t, probContextRelease, float64(reorder)/n, 0.03)
			// Small target buffers top up plain CUBIC's own overflows to
			// the paper's shares: after a mmWave source about a fifth,
			// after a sub-6 source none (smallTargetShare).
			assert.Zero(t, smallFromBand[diag.BandSub6], "small target buffers after a sub-6 source")
			p := probSmallTargetFromMmWave
			assert.InDelta(t, 0.21, p, 0.01)
			assert.InDelta(t, p, float64(smallFromBand[diag.BandMmWave])/float64(fromBand[diag.BandMmWave]),
				3*math.Sqrt(p*(1-p)/float64(fromBand[diag.BandMmWave])), "small target buffers after a mmWave source")
			assert.InDelta(t, probRLF, float64(rlf)/float64(handovers+rlf), 0.02)
			// The bands follow one another as a Markov chain: over 10 hours
			// the shares vary more than independent draws would (0.31 to
			// 0.36 from mmWave to sub-6, driving seeds 1 to 8).
			assert.InDelta(t, probMmWaveFromSub6, float64(counts["sub6_mmwave"])/float64(counts["sub6_mmwave"]+counts["sub6_sub6"]), 0.05)
			assert.InDelta(t, probSub6FromMmWave, float64(counts["mmwave_sub6"])/float64(counts["mmwave_sub6"]+counts["mmwave_mmwave"]), 0.05)
			interval := sc.Duration.Seconds() / float64(handovers+rlf)
			assert.InDelta(t, tt.wantInterval, interval, tt.wantInterval*0.1)
		})
	}
	_, err := Generate(GenerateOptions{Seed: 1, Duration: time.Minute, Mobility: "flying"})
	assert.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "flying"))
}

func TestGenerateMatchMixKeepsTheMeasuredHandoverMix(t *testing.T) {
	want := map[string]float64{"sub6_sub6": 0.456, "sub6_mmwave": 0.151, "mmwave_sub6": 0.139, "mmwave_mmwave": 0.255}
	counts := map[string]int{}
	total := 0
	for seed := uint64(1); seed <= 6; seed++ {
		sc, err := Generate(GenerateOptions{Seed: seed, Duration: 4 * time.Minute, Mobility: MobilityDriving, MatchMix: true})
		require.NoError(t, err)
		cells := map[string]Cell{}
		for _, c := range sc.Cells {
			cells[c.Name] = c
		}
		for _, e := range sc.Timeline {
			if e.Type == TypeHandover {
				counts[diag.HandoverClass(cells[e.Source].Band, cells[e.Target].Band)]++
				total++
			}
		}
	}
	require.GreaterOrEqual(t, total, 100)
	for class, share := range want {
		assert.InDelta(t, share, float64(counts[class])/float64(total), 0.03, class)
	}
}

// flatTrace is n seconds of a trace at mbps, after lead seconds at 100.
func flatTrace(name string, lead, n int, mbps float64) Trace {
	t := Trace{Name: name, Format: TraceLumos5G}
	for i := range lead + n {
		v := mbps
		if i < lead {
			v = 100
		}
		t.Mbps = append(t.Mbps, v)
	}
	return t
}

func TestGenerateCutsMmWaveCellsFromTraces(t *testing.T) {
	traces := []Trace{flatTrace("5g_trace_1_walking", 30, 90, 800), flatTrace("5g_trace_2_driving", 0, 70, 500)}
	for _, tt := range []struct {
		mobility, trace string
		mbps            float64
	}{
		{mobility: MobilityWalking, trace: "5g_trace_1_walking", mbps: 800},
		{mobility: MobilityDriving, trace: "5g_trace_2_driving", mbps: 500},
	} {
		sc, err := Generate(GenerateOptions{Seed: 3, Duration: 5 * time.Minute, Mobility: tt.mobility, Scale: 0.1, Traces: traces, TracesFrom: "dir"})
		require.NoError(t, err)
		mmwave := 0
		for _, c := range sc.Cells {
			if c.Band != diag.BandMmWave {
				assert.Empty(t, c.Capacity.Origin, "sub-6 cells stay synthetic")
				continue
			}
			mmwave++
			assert.Contains(t, c.Capacity.Origin, tt.trace, "%s takes a trace of its pattern", tt.mobility)
			require.Len(t, c.Capacity.Steps, TraceWindow)
			mean, ok := meanMbps(c.Capacity)
			require.True(t, ok)
			assert.GreaterOrEqual(t, mean, float64(MmWaveTraceMinMbps), "only windows a mmWave cell can stand for")
		}
		assert.Positive(t, mmwave)
	}
	assert.Contains(t, GenerateOptions{Seed: 1, Duration: time.Minute, Mobility: MobilityWalking, TracesFrom: "dir"}.Flags(), "--traces dir")

	_, err := Generate(GenerateOptions{Seed: 3, Duration: time.Minute, Traces: []Trace{flatTrace("lte", 0, 100, 40)}})
	assert.ErrorContains(t, err, "no trace has")
}

// TestCellBuffer: a cell buffer given in time sizes every cell's buffer
// at its band's mean capacity and changes nothing else; none keeps the
// default sizes.
func TestCellBuffer(t *testing.T) {
	opts := GenerateOptions{Seed: 5, Duration: 3 * time.Minute, Mobility: MobilityDriving, Scale: 0.1, MatchMix: true}
	byDefault, err := Generate(opts)
	require.NoError(t, err)
	opts.CellBuffer = 20 * time.Millisecond
	sized, err := Generate(opts)
	require.NoError(t, err)
	assert.Contains(t, opts.Flags(), "--cell-buffer 20ms")
	require.Len(t, sized.Cells, len(byDefault.Cells))
	for i, c := range sized.Cells {
		want, was := 375_000, 1_500_000 // 150 Mbit/s for 20 ms
		if c.Band == diag.BandMmWave {
			want, was = 2_500_000, 12_000_000 // 1 Gbit/s for 20 ms
		}
		assert.Equal(t, want, c.BufferBytes, c.Name)
		assert.Equal(t, was, byDefault.Cells[i].BufferBytes, c.Name)
		c.BufferBytes = byDefault.Cells[i].BufferBytes
		assert.Equal(t, byDefault.Cells[i], c, "only the buffer differs")
	}
	require.Len(t, sized.Timeline, len(byDefault.Timeline))
	for i, ev := range sized.Timeline {
		assert.Equal(t, byDefault.Timeline[i].At, ev.At, "the same timeline")
	}
}

// TestSourceDiscard: the option marks every context release as
// discarding and changes nothing else, draw for draw, so that a corpus
// generated with it is the default corpus with the held packets lost.
func TestSourceDiscard(t *testing.T) {
	opts := GenerateOptions{Seed: 5, Duration: 10 * time.Minute, Mobility: MobilityDriving, Scale: 0.1, MatchMix: true}
	byDefault, err := Generate(opts)
	require.NoError(t, err)
	tests := []struct {
		name    string
		discard bool
	}{
		{name: "forwarded by default"},
		{name: "discarded", discard: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := opts
			o.SourceDiscard = tt.discard
			sc, err := Generate(o)
			require.NoError(t, err)
			assert.Equal(t, tt.discard, strings.Contains(o.Flags(), " --source-discard"))
			assert.Equal(t, byDefault.Cells, sc.Cells)
			require.Len(t, sc.Timeline, len(byDefault.Timeline))
			releases := 0
			for i, ev := range sc.Timeline {
				if ev.ContextRelease != nil {
					releases++
					assert.Equal(t, tt.discard, ev.ContextRelease.Discard)
					release := *ev.ContextRelease
					release.Discard = false
					ev.ContextRelease = &release
				}
				assert.Equal(t, byDefault.Timeline[i], ev, "only the fate of the held packets differs")
			}
			assert.Positive(t, releases)
		})
	}
}

// TestGenerateRoute: on a route every handover and radio link failure
// enters a cell the scenario had not used, the cells stay distinct, and
// the same seed gives the same route.
func TestGenerateRoute(t *testing.T) {
	for _, mobility := range []string{MobilityWalking, MobilityDriving} {
		t.Run(mobility, func(t *testing.T) {
			opts := GenerateOptions{Seed: 3, Duration: 5 * time.Minute, Mobility: mobility, Scale: 0.1, MatchMix: true, Route: true}
			sc, err := Generate(opts)
			require.NoError(t, err)
			assert.Contains(t, opts.Flags(), " --route")
			assert.True(t, strings.HasSuffix(sc.Name, "-route"), sc.Name)
			names, identities := map[string]bool{}, map[string]bool{}
			for _, c := range sc.Cells {
				names[c.Name] = true
				identities[fmt.Sprintf("%s/%d/%d", c.RAT, c.ARFCN, c.PCI)] = true
			}
			assert.Len(t, names, len(sc.Cells), "cell names are distinct")
			assert.Len(t, identities, len(sc.Cells), "cell identities are distinct")
			visited := map[string]bool{sc.InitialCell: true}
			entries := 0
			for _, ev := range sc.Timeline {
				if ev.Type != TypeHandover && ev.Type != TypeRLF {
					continue
				}
				entries++
				assert.False(t, visited[ev.Target], "%s entered twice", ev.Target)
				visited[ev.Target] = true
			}
			assert.Greater(t, entries, 10)
			again, err := Generate(opts)
			require.NoError(t, err)
			assert.Equal(t, sc, again)
		})
	}
}

func TestGenerateStaticIsOneMmWaveCell(t *testing.T) {
	sc, err := GenerateStatic(GenerateOptions{Seed: 2, Duration: time.Minute, Scale: 0.1,
		Traces: []Trace{flatTrace("5g_trace_9_walking", 0, 80, 900)}})
	require.NoError(t, err)
	require.Len(t, sc.Cells, 1)
	assert.Equal(t, diag.BandMmWave, sc.Cells[0].Band)
	assert.Equal(t, sc.Cells[0].Name, sc.InitialCell)
	assert.Empty(t, sc.Timeline)
	assert.Contains(t, sc.Cells[0].Capacity.Origin, "5g_trace_9_walking")

	synthetic, err := GenerateStatic(GenerateOptions{Seed: 2, Duration: time.Minute, Scale: 0.1})
	require.NoError(t, err)
	assert.NotEmpty(t, synthetic.Cells[0].Capacity.Steps)
	_, err = GenerateStatic(GenerateOptions{Seed: 2, Duration: time.Second})
	assert.Error(t, err)
}

func TestMeasureLeadsPairsReportCommandAndCompletion(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	ev := func(ms int, typ diag.Type) diag.Event { return diag.Event{Time: at(ms), Type: typ} }
	events := []diag.Event{
		ev(0, diag.TypeMeasReport), ev(80, diag.TypeHOCommand), ev(110, diag.TypeHOComplete), // paired
		ev(2000, diag.TypeHOCommand), ev(2030, diag.TypeHOComplete), // no report before it
		ev(4000, diag.TypeMeasReport), ev(5500, diag.TypeHOCommand), ev(5520, diag.TypeHOComplete), // report too old
		ev(7000, diag.TypeMeasReport), ev(7050, diag.TypeHOCommand), ev(7060, diag.TypeHOFailure), // failed
		ev(9000, diag.TypeMeasReport), ev(9040, diag.TypeMeasReport), ev(9100, diag.TypeHOCommand), ev(9125, diag.TypeHOComplete), // the last report
		ev(100, diag.TypeMeasReport), ev(150, diag.TypeHOCommand), // the clock went back: a new session
		ev(170, diag.TypeHOComplete),
	}
	leads := MeasureLeads("cap", events)
	require.Len(t, leads, 3)
	assert.Equal(t, Lead{Capture: "cap", ReportToCommand: 80 * time.Millisecond, CommandToCompletion: 30 * time.Millisecond}, leads[0])
	assert.Equal(t, Lead{Capture: "cap", ReportToCommand: 60 * time.Millisecond, CommandToCompletion: 25 * time.Millisecond}, leads[1])
	assert.Equal(t, Lead{Capture: "cap", ReportToCommand: 50 * time.Millisecond, CommandToCompletion: 20 * time.Millisecond}, leads[2])

	var buf strings.Builder
	require.NoError(t, WriteLeads(&buf, leads))
	back, err := ReadLeads(strings.NewReader(buf.String()))
	require.NoError(t, err)
	assert.Equal(t, leads, back)
	_, err = ReadLeads(strings.NewReader("capture,a,b\nx,1\n"))
	assert.Error(t, err)
	_, err = ReadLeads(strings.NewReader("capture,a,b\nx,-1,2\n"))
	assert.Error(t, err)
}

func TestGenerateWithCaptureLeads(t *testing.T) {
	leads, err := CaptureLeads()
	require.NoError(t, err)
	require.NotEmpty(t, leads, "leads-captures.csv holds the measured leads")
	var mean time.Duration
	for _, l := range leads {
		mean += l.ReportToCommand / time.Duration(len(leads))
	}
	sc, err := Generate(GenerateOptions{Seed: 4, Duration: time.Hour, Mobility: MobilityDriving, Leads: LeadsCaptures})
	require.NoError(t, err)
	assert.Contains(t, sc.Name, "captures-leads")
	var toCommand time.Duration
	n := 0
	for _, e := range sc.Timeline {
		if e.Type == TypeHandover && !e.Unreported {
			assert.Greater(t, e.MeasLead, e.CommandLead)
			toCommand += e.MeasLead - e.CommandLead
			n++
		}
	}
	require.Positive(t, n)
	assert.InDelta(t, mean.Seconds(), (toCommand / time.Duration(n)).Seconds(), 0.015, "report to command drawn from the captures")
	_, err = Generate(GenerateOptions{Seed: 4, Duration: time.Minute, Leads: "guess"})
	assert.ErrorContains(t, err, "guess")
}

// TestSmallTargetShare: the small target buffers a sender's own overflows
// leave to draw, so that its overflows total the paper's share.
func TestSmallTargetShare(t *testing.T) {
	tests := []struct {
		name                        string
		paper, natural, lossOnSmall float64
		want                        float64
	}{
		{name: "no overflow of its own: the paper's share over the small buffers' losses", paper: 0.2, lossOnSmall: 0.5, want: 0.4},
		{name: "own overflows lower the share", paper: 0.309, natural: 16.0 / 73, lossOnSmall: 17.0 / 31, want: 0.2097},
		{name: "own overflows above the paper's share: none", paper: 0.091, natural: 25.0 / 163, lossOnSmall: 17.0 / 18},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := smallTargetShare(tt.paper, tt.natural, tt.lossOnSmall)
			assert.InDelta(t, tt.want, p, 1e-3)
			if p > 0 {
				assert.InDelta(t, tt.paper, tt.natural+(1-tt.natural)*p*tt.lossOnSmall, 1e-9, "the sender's overflows total the paper's share")
			}
		})
	}
}
