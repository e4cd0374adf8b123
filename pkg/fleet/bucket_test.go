package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/natstest"
)

func withMaxBytes(n int64) func(*Options) { return func(o *Options) { o.MaxBytes = n } }

// bucketConfig is the configuration of the fleet bucket on the server
// at url.
func bucketConfig(t *testing.T, url string) jetstream.KeyValueConfig {
	t.Helper()
	st, err := bucket(t, url).Status(context.Background())
	require.NoError(t, err)
	return st.Config()
}

// TestFullBucketCostsACounter: a bucket full of entries refuses the
// rest, which are counted and leave the queue; the client stays
// connected and keeps publishing what fits.
func TestFullBucketCostsACounter(t *testing.T) {
	srv := natstest.Start(t)
	const maxBytes = 4 * maxValueSize
	c := startClient(t, srv.URL(), "bus-1", withMaxBytes(maxBytes))
	require.Eventually(t, connected(c), waitFor, tick)
	cfg := bucketConfig(t, srv.URL())
	assert.Equal(t, int64(maxBytes), cfg.MaxBytes)
	assert.Equal(t, uint8(1), cfg.History)
	assert.Equal(t, int32(maxValueSize), cfg.MaxValueSize)

	const cells = 100 // about 300 bytes each: far more than fit
	e := newEstimator(t, c)
	for pci := range uint16(cells) {
		learn(e, mustSub6(t, pci), 300_000)
	}
	require.Eventually(t, func() bool {
		st := c.Stats()
		return st.Published+st.Rejected == cells && st.Queued == 0
	}, waitFor, tick, "publications neither published nor refused: %+v", c.Stats())
	st := c.Stats()
	assert.Positive(t, st.Published)
	assert.Positive(t, st.Rejected)
	assert.True(t, st.Connected, "a full bucket still answers")
	assert.Empty(t, st.Error)
	assert.Empty(t, st.Malformed)

	// A cell refused before is published again once its next change
	// fits: deleting entries makes room.
	kv := bucket(t, srv.URL())
	keys, err := kv.ListKeys(context.Background())
	require.NoError(t, err)
	for k := range keys.Keys() {
		require.NoError(t, kv.Purge(context.Background(), k))
	}
	published := st.Published
	learn(e, mustSub6(t, cells-1), 310_000)
	require.Eventually(t, func() bool { return c.Stats().Published == published+1 }, waitFor, tick)
}

// TestUnboundedBucketIsBounded: a bucket an earlier m2hod (or an
// operator) created without a size bound gets one, and one value per
// key, from the first host that binds it.
func TestUnboundedBucketIsBounded(t *testing.T) {
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: DefaultBucket, History: 5, TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, int64(-1), bucketConfig(t, srv.URL()).MaxBytes, "unbounded to start with")

	c := startClient(t, srv.URL(), "bus-1")
	require.Eventually(t, connected(c), waitFor, tick)
	cfg := bucketConfig(t, srv.URL())
	assert.Equal(t, int64(DefaultMaxBytes), cfg.MaxBytes)
	assert.Equal(t, uint8(1), cfg.History)
	assert.Equal(t, time.Hour, cfg.TTL, "the rest is left as it was")
}
