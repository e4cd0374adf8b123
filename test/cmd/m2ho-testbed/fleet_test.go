package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/eval"
	"github.com/m2ho/m2ho/test/report"
	"github.com/m2ho/m2ho/test/scenario"
)

func TestFirstVisits(t *testing.T) {
	sc := &scenario.Scenario{InitialCell: "a", Cells: []scenario.Cell{
		{Name: "a", Band: diag.BandSub6}, {Name: "b", Band: diag.BandSub6}, {Name: "c", Band: diag.BandMmWave}, {Name: "d", Band: diag.BandSub6},
	}}
	truth := &emu.GroundTruth{Handovers: []emu.HandoverRecord{
		{Index: 0, Target: "b"}, // first
		{Index: 1, Target: "a"}, // the initial cell
		{Index: 2, Target: "c"}, // first
		{Index: 3, Target: "b"}, // again
		{Index: 4, Target: "d"}, // first, but not measured
	}}
	hs := []report.Handover{
		{Index: 0, LossFree: true, ThroughputBps: 5e6},
		{Index: 1, Retransmissions: 50, OverflowDrops: 9},
		{Index: 2, Retransmissions: 6, OverflowDrops: 4, ThroughputBps: 9e6},
		{Index: 3, Retransmissions: 8, OverflowDrops: 2},
	}
	assert.Equal(t, FirstVisits{Run: "r", Handovers: 2, LossFree: 1, OverflowDrops: 4, Retransmissions: 3,
		Sub6: 1, Sub6LossFree: 1, Sub6ThroughputBps: 5e6},
		firstVisits("r", sc, truth, hs))
}

// TestCompareFleet: the second CPE's runs pair scenario by scenario; the
// loss-free difference and the throughput ratio come out of the sums.
func TestCompareFleet(t *testing.T) {
	scenarioOf := func(name string, n, freeWith, freeAlone int, tputWith, tputAlone float64) FleetScenario {
		return FleetScenario{Scenario: name, Runs: []FirstVisits{
			{Run: "cpe1-fleet", Sub6: n},
			{Run: "cpe2-fleet", Sub6: n, Sub6LossFree: freeWith, Sub6ThroughputBps: tputWith, Sub6OverflowDrops: 1},
			{Run: "cpe2-alone", Sub6: n, Sub6LossFree: freeAlone, Sub6ThroughputBps: tputAlone, Sub6OverflowDrops: 3},
		}}
	}
	c := compareFleet([]FleetScenario{
		scenarioOf("s1", 4, 3, 2, 110, 100),
		scenarioOf("s2", 6, 6, 4, 220, 200),
		{Scenario: "unpaired", Runs: []FirstVisits{{Run: "cpe2-fleet", Sub6: 2}}},
	})
	assert.Equal(t, 3, c.Scenarios)
	assert.Equal(t, 10, c.Sub6)
	assert.InDelta(t, 0.9, c.LossFreeFleet.Value, 1e-9)
	assert.InDelta(t, 0.6, c.LossFreeAlone.Value, 1e-9)
	assert.InDelta(t, 0.3, c.LossFreeGain.Value, 1e-9)
	assert.InDelta(t, -0.4, c.OverflowChange.Value, 1e-9)
	assert.InDelta(t, 0.1, c.ThroughputGain.Value, 1e-9)
	assert.Equal(t, 2, c.ThroughputGain.Scenarios)
	assert.LessOrEqual(t, c.LossFreeGain.Low, c.LossFreeGain.Value)
	assert.GreaterOrEqual(t, c.LossFreeGain.High, c.LossFreeGain.Value)
}

func TestPreparationClamps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m2hod.log")
	require.NoError(t, os.WriteFile(path, []byte(`time=x level=INFO msg=state from=stable to=preparation reason=predicted
time=x level=INFO msg="preparation clamp" target="NR 627264/101" bytes=150000 source=fleet
time=x level=INFO msg="preparation clamp" target="NR 627264/102" bytes=65536 source=sub6_min
time=x level=INFO msg="preparation clamp" target="NR 627264/103" bytes=150000 source=fleet
`), 0o644))
	counts, err := preparationClamps(path)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"fleet": 2, "sub6_min": 1}, counts)
	_, err = preparationClamps(filepath.Join(t.TempDir(), "none"))
	assert.Error(t, err)
	assert.Equal(t, "fleet=2 sub6_min=1", formatCounts(counts))
	assert.Equal(t, "-", formatCounts(nil))
}

// TestFleetScenarios: without a file the fleet runs routes of
// consecutive seeds.
func TestFleetScenarios(t *testing.T) {
	scs, err := fleetScenarios("", 2, scenario.GenerateOptions{Seed: 4, Duration: time.Minute, Mobility: scenario.MobilityDriving,
		Scale: 0.1, MatchMix: true, Route: true})
	require.NoError(t, err)
	require.Len(t, scs, 2)
	assert.Equal(t, "generated-driving-seed4-route", scs[0].Name)
	assert.Equal(t, "generated-driving-seed5-route", scs[1].Name)
	_, err = fleetScenarios(filepath.Join(t.TempDir(), "missing.yaml"), 1, scenario.GenerateOptions{})
	assert.Error(t, err)
}

func TestFleetRejectsVariantsWithoutM2HO(t *testing.T) {
	err := cmdFleet(context.Background(), []string{"--variant", "cubic"}, nil, slog.Default())
	assert.ErrorContains(t, err, "does not run m2hod")
}

func TestFleetServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		assert.NoError(t, cmdFleetServer(ctx, []string{"--store", filepath.Join(t.TempDir(), "store"), "--listen", addr}, nil, slog.Default()))
	})
	defer wg.Wait()
	defer cancel()
	var nc *nats.Conn
	require.Eventually(t, func() bool {
		nc, err = nats.Connect("nats://" + addr)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	defer nc.Close()
	js, err := nc.JetStream()
	require.NoError(t, err)
	info, err := js.AccountInfo()
	require.NoError(t, err, "JetStream is on")
	assert.NotNil(t, info)

	assert.ErrorContains(t, cmdFleetServer(context.Background(), nil, nil, slog.Default()), "--store is required")
}

func TestWriteFleetComparison(t *testing.T) {
	var out strings.Builder
	writeFleetComparison(&out, fleetComparison{Scenarios: 2, Sub6: 10,
		LossFreeFleet:  eval.Interval{Value: 0.9, Low: 0.8, High: 1, Valid: true},
		LossFreeAlone:  eval.Interval{Value: 0.6, Low: 0.5, High: 0.7, Valid: true},
		LossFreeGain:   eval.Interval{Value: 0.3, Low: 0.1, High: 0.5, Valid: true},
		OverflowChange: eval.Interval{Value: -0.4, Low: -1, High: 0, Valid: true},
	})
	assert.Equal(t, `  scenarios 2, sub-6 first visits 10
  loss-free sub-6 first visits: with the fleet 90.0% [80.0, 100.0], alone 60.0% [50.0, 70.0], difference +30.0 [+10.0, +50.0] points
  overflow drops per sub-6 first visit, with the fleet minus alone: -0.4 [-1.0, +0.0]
  throughput of the sub-6 first visits, with the fleet over alone: -
`, out.String())
}
