package daemon

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/natstest"
	"github.com/m2ho/m2ho/pkg/config"
	"github.com/m2ho/m2ho/pkg/datapath"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/fleet"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

func fleetConfig(t *testing.T, url, host string) config.Config {
	cfg := testConfig(t)
	cfg.Fleet = config.Fleet{URL: url, Network: "001-01", Host: host}
	// The harness's diag input is no real URI: only the fleet is checked.
	valid := cfg
	valid.Diag = []string{"jsonl:-"}
	require.NoError(t, valid.Validate())
	return cfg
}

// TestDaemonsShareACell: a daemon that has never served cell B clamps a
// handover towards it with what another daemon measured there, and
// /status says the clamp came from the fleet.
func TestDaemonsShareACell(t *testing.T) {
	srv := natstest.Start(t)
	first := startHarness(t, fleetConfig(t, srv.URL(), "bus-1"))
	first.src.events <- diag.Event{Type: diag.TypeMeasReport, Meas: diag.EventA1, Serving: cellB}
	require.Eventually(t, func() bool { return first.status(t).Serving == cellB }, 2*time.Second, time.Millisecond)
	start := time.Now()
	first.dp.bursts <- datapath.Burst{Start: start, End: start.Add(20 * time.Millisecond), Bytes: 400000, Packets: 280}
	// The publisher writes once per publish interval.
	require.Eventually(t, func() bool { return first.status(t).Fleet.Published > 0 }, 15*time.Second, 10*time.Millisecond)

	second := startHarness(t, fleetConfig(t, srv.URL(), "bus-2"))
	require.Eventually(t, func() bool { return second.status(t).Fleet.Entries > 0 }, 10*time.Second, 10*time.Millisecond)
	second.src.events <- a3(cellA, cellB)
	require.Eventually(t, func() bool { return second.status(t).State == statemachine.Preparation }, 2*time.Second, time.Millisecond)
	st := second.status(t)
	assert.Equal(t, uint32(400000), st.InForce.ClampBytes)
	assert.Equal(t, estimator.SourceFleet, st.InForce.ClampSource)
	assert.Equal(t, uint64(1), st.Fleet.Hits)
	assert.Empty(t, st.Cells, "the fleet's entry is not this daemon's measurement")
}

// TestStartsWithTheFleetUnreachable: the daemon runs, and says so, while
// the fleet store's server is out of reach.
func TestStartsWithTheFleetUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	h := startHarness(t, fleetConfig(t, "nats://127.0.0.1:"+strconv.Itoa(port), "bus-1"))
	h.src.events <- a3(cellA, cellB)
	require.Eventually(t, func() bool { return h.status(t).State == statemachine.Preparation }, 2*time.Second, time.Millisecond)
	st := h.status(t)
	require.NotNil(t, st.Fleet)
	assert.False(t, st.Fleet.Connected)
	assert.Equal(t, estimator.SourceDefault, st.InForce.ClampSource)
	assert.Equal(t, uint64(1), st.Fleet.Misses)

	resp, err := http.Get("http://" + h.d.Addr().String() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(body), "m2hod_fleet_connected 0")
	assert.Contains(t, string(body), `m2hod_fleet_lookups_total{result="miss"} 1`)
	assert.Contains(t, string(body), "m2hod_fleet_publish_rejected_total 0", "a series from the start")
}

func TestNoFleetNoFleetStatus(t *testing.T) {
	h := startHarness(t, testConfig(t))
	assert.Nil(t, h.status(t).Fleet)
}

// TestFleetThroughALeafNode: a daemon connected to a vehicle's leaf node
// reports the fleet store connected only while the hub behind it
// answers.
func TestFleetThroughALeafNode(t *testing.T) {
	leafPort := natstest.FreePort(t)
	leaf := natstest.StartLeaf(t, leafPort)
	h := startHarness(t, fleetConfig(t, leaf.URL(), "bus-1"))
	require.Eventually(t, func() bool { return h.status(t).Fleet.Error != "" }, 10*time.Second, 10*time.Millisecond)
	st := h.status(t)
	assert.False(t, st.Fleet.Connected, "the leaf node is up, its hub is not")
	assert.Contains(t, st.Fleet.Error, "no responders")
	assert.Contains(t, fleetMetrics(t, h), "m2hod_fleet_connected 0")

	natstest.StartHub(t, leafPort)
	require.Eventually(t, func() bool { return h.status(t).Fleet.Connected }, 15*time.Second, 10*time.Millisecond)
	assert.Empty(t, h.status(t).Fleet.Error)
	assert.Contains(t, fleetMetrics(t, h), "m2hod_fleet_connected 1")
}

// fleetMetrics is the daemon's /metrics.
func fleetMetrics(t *testing.T, h *harness) string {
	t.Helper()
	resp, err := http.Get("http://" + h.d.Addr().String() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// TestFleetBucketBound: the bucket the first daemon creates is bounded
// by the configured size, or the fleet store's default without one.
func TestFleetBucketBound(t *testing.T) {
	tests := []struct {
		name     string
		maxBytes int64
		want     int64
	}{
		{name: "default", want: fleet.DefaultMaxBytes},
		{name: "configured", maxBytes: 2 << 20, want: 2 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := natstest.Start(t)
			cfg := fleetConfig(t, srv.URL(), "bus-1")
			cfg.Fleet.MaxBytes = tt.maxBytes
			h := startHarness(t, cfg)
			require.Eventually(t, func() bool { return h.status(t).Fleet.Connected }, 10*time.Second, 10*time.Millisecond)

			nc, err := nats.Connect(srv.URL())
			require.NoError(t, err)
			t.Cleanup(nc.Close)
			js, err := jetstream.New(nc)
			require.NoError(t, err)
			kv, err := js.KeyValue(context.Background(), fleet.DefaultBucket)
			require.NoError(t, err)
			st, err := kv.Status(context.Background())
			require.NoError(t, err)
			assert.Equal(t, tt.want, st.Config().MaxBytes)
		})
	}
}
