package main

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/report"
	"github.com/m2ho/m2ho/test/scenario"
)

func TestFirstVisits(t *testing.T) {
	sc := &scenario.Scenario{InitialCell: "a"}
	truth := &emu.GroundTruth{Handovers: []emu.HandoverRecord{
		{Index: 0, Target: "b"}, // first
		{Index: 1, Target: "a"}, // the initial cell
		{Index: 2, Target: "c"}, // first
		{Index: 3, Target: "b"}, // again
		{Index: 4, Target: "d"}, // first, but not measured
	}}
	hs := []report.Handover{
		{Index: 0, LossFree: true},
		{Index: 1, Retransmissions: 50, OverflowDrops: 9},
		{Index: 2, Retransmissions: 6, OverflowDrops: 4},
		{Index: 3, Retransmissions: 8, OverflowDrops: 2},
	}
	assert.Equal(t, FirstVisits{Run: "r", Handovers: 2, LossFree: 1, OverflowDrops: 4, Retransmissions: 3},
		firstVisits("r", sc, truth, hs))
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
