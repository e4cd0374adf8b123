package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/natstest"
)

// TestLeafNode runs the deployment of a vehicle (deploy/nats-leaf.conf
// dialling deploy/nats-server.conf): the client connects to the leaf
// node, which stays up, and is connected only while the hub, which holds
// the bucket, is reachable.
func TestLeafNode(t *testing.T) {
	leafPort := natstest.FreePort(t)
	leaf := natstest.StartLeaf(t, leafPort)
	c := startClient(t, leaf.URL(), "bus-1")
	e := newEstimator(t, c)

	// The hub is out of reach from the start.
	require.Eventually(t, func() bool { return c.nc.IsConnected() && c.Stats().Error != "" }, waitFor, tick)
	assert.Never(t, connected(c), 300*time.Millisecond, tick, "connected to a leaf node whose hub is out of reach")
	assert.Contains(t, c.Stats().Error, "no responders", "nobody answers the bucket's requests")
	learn(e, cellA, 400_000)
	assert.Equal(t, 1, c.Stats().Queued)

	hub := natstest.StartHub(t, leafPort)
	require.Eventually(t, connected(c), waitFor, tick, "the hub came into reach: %+v", c.Stats())
	require.Eventually(t, func() bool { return c.Stats().Published == 1 }, waitFor, tick, "the queue waited for the hub")
	assert.Empty(t, c.Stats().Error)

	// Another vehicle, connected to the hub directly, sees it and
	// publishes back through the leaf.
	other := startClient(t, hub.URL(), "bus-2")
	require.Eventually(t, func() bool {
		b, ok := other.Lookup(cellA)
		return ok && b == 400_000
	}, waitFor, tick)
	learn(newEstimator(t, other), cellB, 250_000)
	require.Eventually(t, func() bool {
		b, ok := c.Lookup(cellB)
		return ok && b == 250_000
	}, waitFor, tick, "the watcher through the leaf node")

	// The vehicle leaves coverage: the leaf node stays, the hub goes.
	hub.Shutdown()
	hub.WaitForShutdown()
	// The session's failure, which says why, may come a moment after the
	// disconnection.
	require.Eventually(t, func() bool { st := c.Stats(); return !st.Connected && st.Error != "" }, waitFor, tick,
		"still connected, or no reason given, without the hub: %+v", c.Stats())
	assert.True(t, c.nc.IsConnected(), "the connection to the leaf node is up")
	b, ok := c.Lookup(cellB)
	assert.True(t, ok, "lookups answer from the entries already watched")
	assert.Equal(t, uint64(250_000), b)
	learn(e, cellA, 420_000)

	// Back in coverage.
	hub.Restart(t)
	require.Eventually(t, connected(c), waitFor, tick)
	require.Eventually(t, func() bool { return c.Stats().Published == 2 && c.Stats().Queued == 0 }, waitFor, tick,
		"the queue waited for the hub: %+v", c.Stats())
}
