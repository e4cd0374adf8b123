package deploy_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNATSConfigs: the fleet store's example server and leaf node
// configurations are read by the real server's parser.
func TestNATSConfigs(t *testing.T) {
	hub, err := server.ProcessConfigFile("nats-server.conf")
	require.NoError(t, err)
	assert.True(t, hub.JetStream, "the hub holds the bucket")
	assert.Equal(t, "/var/lib/nats", hub.StoreDir)
	assert.Equal(t, 7422, hub.LeafNode.Port, "vehicles' leaf nodes connect here")

	leaf, err := server.ProcessConfigFile("nats-leaf.conf")
	require.NoError(t, err)
	assert.False(t, leaf.JetStream, "the bucket lives on the hub")
	assert.Equal(t, "127.0.0.1", leaf.Host, "m2hod connects on loopback")
	assert.Equal(t, 4222, leaf.Port)
	assert.Equal(t, 5*time.Second, leaf.LeafNode.ReconnectInterval)
	require.Len(t, leaf.LeafNode.Remotes, 1)
	require.Len(t, leaf.LeafNode.Remotes[0].URLs, 1)
	assert.Equal(t, "hub.example.net:7422", leaf.LeafNode.Remotes[0].URLs[0].Host)
}
