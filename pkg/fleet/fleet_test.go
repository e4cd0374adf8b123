package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/natstest"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

const (
	network = "001-01"
	// waitFor bounds every wait on the server; the publisher and the
	// watcher act within milliseconds.
	waitFor = 10 * time.Second
	tick    = 10 * time.Millisecond
)

var (
	cellA  = diag.Cell{RAT: diag.RATNR, Band: diag.BandSub6, ARFCN: 632628, PCI: 17}
	cellB  = diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, ARFCN: 1850, PCI: 301}
	mmCell = diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, ARFCN: 2079167, PCI: 5}
)

// clock is a settable Options.Now.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time                 { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration)        { c.offset.Add(int64(d)) }
func withClock(c *clock) func(*Options)         { return func(o *Options) { o.Now = c.now } }
func withQueue(n int) func(*Options)            { return func(o *Options) { o.QueueSize = n } }
func withMaxAge(d time.Duration) func(*Options) { return func(o *Options) { o.MaxAge = d } }
func withMaxEntries(n int) func(*Options)       { return func(o *Options) { o.MaxEntries = n } }

// startClient opens a client of url as host and runs it until the test
// ends.
func startClient(t *testing.T, url, host string, options ...func(*Options)) *Client {
	t.Helper()
	opts := Options{URL: url, Network: network, Host: host, PublishInterval: 20 * time.Millisecond}
	for _, o := range options {
		o(&opts)
	}
	c, err := Open(opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, c.Run(ctx)) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return c
}

// newEstimator is an estimator sharing through c.
func newEstimator(t *testing.T, c *Client) *estimator.Estimator {
	t.Helper()
	e, err := estimator.New(estimator.DefaultConfig(), nil, nil)
	require.NoError(t, err)
	e.UseFleet(c)
	return e
}

// learn feeds e one burst of bytes in cell.
func learn(e *estimator.Estimator, cell diag.Cell, bytes uint64) {
	now := time.Now()
	e.SetServing(cell, now.Add(-time.Second))
	e.AddBurst(estimator.Burst{Start: now.Add(-30 * time.Millisecond), End: now, Bytes: bytes, Packets: bytes / 1400})
}

func connected(c *Client) func() bool { return func() bool { return c.Stats().Connected } }

// bucket is a raw view of the fleet bucket, as a peer writing anything
// sees it.
func bucket(t *testing.T, url string) jetstream.KeyValue {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	kv, err := js.KeyValue(ctx, DefaultBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		// Without the clients' value size limit, so that a peer can
		// write anything.
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: DefaultBucket, History: 1})
		if errors.Is(err, jetstream.ErrBucketExists) { // a client created it meanwhile
			kv, err = js.KeyValue(ctx, DefaultBucket)
		}
	}
	require.NoError(t, err)
	return kv
}

func put(t *testing.T, kv jetstream.KeyValue, key string, value []byte) {
	t.Helper()
	_, err := kv.Put(context.Background(), key, value)
	require.NoError(t, err)
}

func TestTwoHostsShareACell(t *testing.T) {
	srv := natstest.Start(t)
	first := startClient(t, srv.URL(), "bus-1")
	second := startClient(t, srv.URL(), "bus-2")
	learner, newcomer := newEstimator(t, first), newEstimator(t, second)

	bytes, source := newcomer.TargetBuffer(cellA)
	assert.Equal(t, estimator.SourceDefault, source, "nothing shared yet")
	assert.Equal(t, estimator.DefaultConfig().DefaultBufferBytes, bytes)

	learn(learner, cellA, 700_000)
	require.Eventually(t, func() bool {
		_, source := newcomer.TargetBuffer(cellA)
		return source == estimator.SourceFleet
	}, waitFor, tick, "the second host never saw the first one's estimate")
	bytes, _ = newcomer.TargetBuffer(cellA)
	assert.Equal(t, uint64(700_000), bytes)

	// What the newcomer measures itself wins from then on.
	learn(newcomer, cellA, 250_000)
	bytes, source = newcomer.TargetBuffer(cellA)
	assert.Equal(t, uint64(250_000), bytes)
	assert.Equal(t, estimator.SourceCell, source)

	st := second.Stats()
	assert.True(t, st.Connected)
	assert.Positive(t, st.Hits)
	assert.Positive(t, st.Misses)
	assert.Empty(t, st.Malformed)
	// The peer's watch may deliver the entry before the publisher has
	// taken the server's acknowledgement of it.
	assert.Eventually(t, func() bool { return first.Stats().Published > 0 }, waitFor, tick)
}

func TestLearntIsPublished(t *testing.T) {
	srv := natstest.Start(t)
	c := startClient(t, srv.URL(), "bus-1")
	local := &memLearnt{}
	store := c.LearntStore(local)
	inter := statemachine.ReportStats{Network: network, Cell: cellB, RAT: diag.RATLTE, Band: diag.BandSub6, Event: diag.EventA5,
		Measured: diag.BandSub6, Carrier: statemachine.CarrierInterFrequency, Reports: 4, Followed: 3}
	// The same trigger on the serving carrier is another kind.
	intra := inter
	intra.Carrier, intra.Reports, intra.Followed = statemachine.CarrierIntraFrequency, 6, 1
	saves := []statemachine.ReportStats{inter, intra}
	// Counts of a band, of a pair of cells, or of another network are
	// not the cell's in this network.
	band := inter
	band.Cell = diag.Cell{}
	pair := inter
	pair.Neighbor = cellA
	otherNetwork := inter
	otherNetwork.Network, otherNetwork.Cell = "310-260", mustSub6(t, 3)
	saves = append(saves, band, pair, otherNetwork)
	for _, s := range saves {
		require.NoError(t, store.SaveReportStats(s))
	}
	ms := time.Millisecond
	leads := []statemachine.LeadStats{
		{Network: network, Band: diag.BandSub6, Samples: []time.Duration{80 * ms, 120 * ms, 640 * ms}},
		{Network: "310-260", Band: diag.BandSub6, Samples: []time.Duration{900 * ms}},
	}
	for _, l := range leads {
		require.NoError(t, store.SaveLeadStats(l))
	}
	assert.Equal(t, saves, local.saved, "every save reaches the local store")
	assert.Equal(t, leads, local.savedLeads)

	require.Eventually(t, func() bool { return c.Stats().Published == 1 }, waitFor, tick)
	kv := bucket(t, srv.URL())
	var got entry
	require.Eventually(t, func() bool {
		e, err := kv.Get(context.Background(), cellKey(network, cellB, "bus-1"))
		return err == nil && json.Unmarshal(e.Value(), &got) == nil
	}, waitFor, tick)
	assert.Equal(t, []reportCount{
		{Event: diag.EventA5, Measured: diag.BandSub6, Carrier: statemachine.CarrierInterFrequency, Reports: 4, Followed: 3},
		{Event: diag.EventA5, Measured: diag.BandSub6, Carrier: statemachine.CarrierIntraFrequency, Reports: 6, Followed: 1},
	}, got.Reports)
	assert.Equal(t, &leadSummary{Quantile: statemachine.LeadQuantile, Millis: 640, Samples: 3}, got.Lead,
		"the host's lead of the cell's band, not another network's")
	assert.Zero(t, got.BufferBytes)
	keys, err := kv.ListKeys(context.Background())
	require.NoError(t, err)
	var all []string
	for k := range keys.Keys() {
		all = append(all, k)
	}
	assert.Equal(t, []string{cellKey(network, cellB, "bus-1")}, all, "nothing of another network")
}

// memLearnt is a statemachine.LearntStore in memory.
type memLearnt struct {
	saved      []statemachine.ReportStats
	savedLeads []statemachine.LeadStats
}

func (m *memLearnt) LoadReportStats() ([]statemachine.ReportStats, error) { return m.saved, nil }
func (m *memLearnt) LoadLeadStats() ([]statemachine.LeadStats, error)     { return m.savedLeads, nil }
func (m *memLearnt) LoadT2Stats() ([]statemachine.T2Stats, error)         { return nil, nil }
func (m *memLearnt) SaveT2Stats(statemachine.T2Stats) error               { return nil }
func (m *memLearnt) SaveReportStats(s statemachine.ReportStats) error {
	m.saved = append(m.saved, s)
	return nil
}
func (m *memLearnt) SaveLeadStats(l statemachine.LeadStats) error {
	m.savedLeads = append(m.savedLeads, l)
	return nil
}

func TestPeersCannotAbuseTheFleet(t *testing.T) {
	srv := natstest.Start(t)
	kv := bucket(t, srv.URL())
	c := startClient(t, srv.URL(), "bus-1")
	require.Eventually(t, connected(c), waitFor, tick)
	now := time.Now().UTC()
	valid := func(cell diag.Cell, buffer uint64) entry {
		return entry{Version: entryVersion, RAT: cell.RAT, Band: cell.Band, ARFCN: cell.ARFCN, PCI: cell.PCI,
			BufferBytes: buffer, Bursts: 3, Updated: now}
	}
	encode := func(e entry) []byte {
		b, err := json.Marshal(e)
		require.NoError(t, err)
		return b
	}
	change := func(e entry, f func(*entry)) entry { f(&e); return e }
	malformedCases := []struct {
		name, reason, key string
		value             []byte
	}{
		{"garbage bytes", MalformedDecode, cellKey(network, cellB, "evil"), []byte("\x00\xffnot json")},
		{"oversized", MalformedDecode, cellKey(network, cellB, "big"), make([]byte, maxValueSize+1)},
		{"wrong version", MalformedSchema, cellKey(network, cellB, "v2"), encode(change(valid(cellB, 500_000), func(e *entry) { e.Version = 2 }))},
		{"cell of another key", MalformedSchema, cellKey(network, cellB, "swap"), encode(valid(cellA, 500_000))},
		{"band that is not the carrier's", MalformedSchema, cellKey(network, cellB, "band"), encode(change(valid(cellB, 500_000), func(e *entry) { e.Band = diag.BandMmWave }))},
		{"bad key", MalformedKey, network + ".lte.x.301.evil", encode(valid(cellB, 500_000))},
		{"short key", MalformedKey, network + ".lte", encode(valid(cellB, 500_000))},
		{"buffer above any window", MalformedValue, cellKey(network, cellB, "huge"), encode(valid(cellB, estimator.MaxWindowBytes+1))},
		{"buffer without bursts", MalformedValue, cellKey(network, cellB, "nobursts"), encode(change(valid(cellB, 500_000), func(e *entry) { e.Bursts = 0 }))},
		{"updated in the future", MalformedValue, cellKey(network, cellB, "future"), encode(change(valid(cellB, 500_000), func(e *entry) { e.Updated = now.Add(time.Hour) }))},
		{"negative rate", MalformedValue, cellKey(network, cellB, "rate"), encode(change(valid(cellB, 500_000), func(e *entry) { e.RateBytesPerSecond = -1 }))},
		{"more followed than reports", MalformedValue, cellKey(network, cellB, "reports"), encode(change(valid(cellB, 500_000), func(e *entry) {
			e.Reports = []reportCount{{Event: diag.EventA3, Reports: 1, Followed: 2}}
		}))},
		{"unknown trigger", MalformedValue, cellKey(network, cellB, "event"), encode(change(valid(cellB, 500_000), func(e *entry) {
			e.Reports = []reportCount{{Event: "a3", Reports: 2, Followed: 1}}
		}))},
		{"unknown carrier relation", MalformedValue, cellKey(network, cellB, "carrier"), encode(change(valid(cellB, 500_000), func(e *entry) {
			e.Reports = []reportCount{{Event: diag.EventA3, Carrier: "same", Reports: 2, Followed: 1}}
		}))},
		{"a kind counted twice", MalformedValue, cellKey(network, cellB, "twice"), encode(change(valid(cellB, 500_000), func(e *entry) {
			e.Reports = []reportCount{{Event: diag.EventA3, Reports: 2, Followed: 2}, {Event: diag.EventA3, Reports: 2, Followed: 2}}
		}))},
		{"a lead beyond two seconds", MalformedValue, cellKey(network, cellB, "lead"), encode(change(valid(cellB, 500_000), func(e *entry) {
			e.Lead = &leadSummary{Quantile: 0.95, Millis: 2001, Samples: 64}
		}))},
		{"a lead that is not positive", MalformedValue, cellKey(network, cellB, "nolead"), encode(change(valid(cellB, 500_000), func(e *entry) {
			e.Lead = &leadSummary{Quantile: 0.95, Millis: 0, Samples: 64}
		}))},
		{"a lead of no interval", MalformedValue, cellKey(network, cellB, "nosamples"), encode(change(valid(cellB, 500_000), func(e *entry) {
			e.Lead = &leadSummary{Quantile: 0.95, Millis: 300, Samples: 0}
		}))},
		{"a lead resting on more intervals than a fleet measures", MalformedValue, cellKey(network, cellB, "sybil"),
			encode(change(valid(cellB, 500_000), func(e *entry) { e.Lead = &leadSummary{Quantile: 0.95, Millis: 300, Samples: maxLeadSamples + 1} }))},
		{"a lead at no quantile", MalformedValue, cellKey(network, cellB, "q"), encode(change(valid(cellB, 500_000), func(e *entry) {
			e.Lead = &leadSummary{Quantile: 1.5, Millis: 300, Samples: 64}
		}))},
	}
	want := map[string]uint64{}
	for _, tc := range malformedCases {
		put(t, kv, tc.key, tc.value)
		want[tc.reason]++
	}
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, c.Stats().Malformed) }, waitFor, tick,
		"malformed entries counted: %v, want %v", c.Stats().Malformed, want)
	_, ok := c.Lookup(cellB)
	assert.False(t, ok, "no malformed entry may answer")
	_, _, ok = c.ReportPrior(cellB.Key(), diag.EventA3, "", "")
	assert.False(t, ok)
	_, _, ok = c.LeadPrior(diag.BandSub6)
	assert.False(t, ok)

	// Entries that are well formed but out of bounds reach the estimator,
	// which bounds them.
	e := newEstimator(t, c)
	put(t, kv, cellKey(network, cellA, "liar"), encode(valid(cellA, 900<<20)))
	put(t, kv, cellKey(network, mmCell, "liar"), encode(valid(mmCell, 1000)))
	require.Eventually(t, func() bool { return c.Stats().Entries == 2 }, waitFor, tick)
	bytes, source := e.TargetBuffer(cellA)
	assert.Equal(t, estimator.SourceFleet, source)
	assert.Equal(t, estimator.DefaultConfig().FleetMaxBufferBytes, bytes, "capped")
	bytes, source = e.TargetBuffer(mmCell)
	assert.Equal(t, estimator.SourceDefault, source, "mmWave targets ignore the fleet")
	assert.Equal(t, estimator.DefaultConfig().DefaultBufferBytes, bytes)

	// With honest peers around, one liar no longer moves the answer.
	put(t, kv, cellKey(network, cellA, "honest-1"), encode(valid(cellA, 600_000)))
	put(t, kv, cellKey(network, cellA, "honest-2"), encode(valid(cellA, 640_000)))
	require.Eventually(t, func() bool { return c.Stats().Entries == 4 }, waitFor, tick)
	bytes, _ = e.TargetBuffer(cellA)
	assert.Equal(t, uint64(640_000), bytes)

	// A deleted entry leaves the cache.
	require.NoError(t, kv.Delete(context.Background(), cellKey(network, cellA, "liar")))
	require.Eventually(t, func() bool { return c.Stats().Entries == 3 }, waitFor, tick)
	bytes, _ = e.TargetBuffer(cellA)
	assert.Equal(t, uint64(600_000), bytes, "lower median of two")
}

// TestFloodingPeerIsBounded: a peer that writes entries for invented
// cells fills the cache up to its bound and no further; the rest are
// counted, and a deletion makes room again.
func TestFloodingPeerIsBounded(t *testing.T) {
	srv := natstest.Start(t)
	c := startClient(t, srv.URL(), "bus-1", withMaxEntries(3))
	kv := bucket(t, srv.URL())
	require.Eventually(t, connected(c), waitFor, tick)
	now := time.Now().UTC()
	for pci := uint16(1); pci <= 5; pci++ {
		cell := diag.Cell{RAT: cellA.RAT, Band: cellA.Band, ARFCN: cellA.ARFCN, PCI: pci}
		b, err := json.Marshal(entry{Version: entryVersion, RAT: cell.RAT, Band: cell.Band, ARFCN: cell.ARFCN, PCI: cell.PCI,
			BufferBytes: 500_000, Bursts: 3, Updated: now})
		require.NoError(t, err)
		put(t, kv, cellKey(network, cell, "flood"), b)
	}
	require.Eventually(t, func() bool { return c.Stats().Malformed[MalformedCapacity] == 2 }, waitFor, tick,
		"entries beyond the bound counted: %v", c.Stats().Malformed)
	assert.Equal(t, 3, c.Stats().Entries)

	first := diag.Cell{RAT: cellA.RAT, Band: cellA.Band, ARFCN: cellA.ARFCN, PCI: 1}
	require.NoError(t, kv.Delete(context.Background(), cellKey(network, first, "flood")))
	require.Eventually(t, func() bool { return c.Stats().Entries == 2 }, waitFor, tick)
	sixth := diag.Cell{RAT: cellA.RAT, Band: cellA.Band, ARFCN: cellA.ARFCN, PCI: 6}
	b, err := json.Marshal(entry{Version: entryVersion, RAT: sixth.RAT, Band: sixth.Band, ARFCN: sixth.ARFCN, PCI: sixth.PCI,
		BufferBytes: 500_000, Bursts: 3, Updated: now})
	require.NoError(t, err)
	put(t, kv, cellKey(network, sixth, "flood"), b)
	require.Eventually(t, func() bool { return c.Stats().Entries == 3 }, waitFor, tick)
	_, ok := c.Lookup(sixth)
	assert.True(t, ok, "room again after a deletion")
}

func TestStaleEntriesIgnored(t *testing.T) {
	srv := natstest.Start(t)
	var clk clock
	writer := startClient(t, srv.URL(), "bus-1")
	reader := startClient(t, srv.URL(), "bus-2", withClock(&clk), withMaxAge(time.Hour))
	learn(newEstimator(t, writer), cellA, 500_000)
	e := newEstimator(t, reader)
	require.Eventually(t, func() bool {
		_, source := e.TargetBuffer(cellA)
		return source == estimator.SourceFleet
	}, waitFor, tick)
	clk.advance(time.Hour + time.Minute)
	bytes, source := e.TargetBuffer(cellA)
	assert.Equal(t, estimator.SourceDefault, source)
	assert.Equal(t, estimator.DefaultConfig().DefaultBufferBytes, bytes)
}

func TestDisconnectAndReconnect(t *testing.T) {
	srv := natstest.Start(t)
	c := startClient(t, srv.URL(), "bus-1")
	e := newEstimator(t, c)
	require.Eventually(t, connected(c), waitFor, tick)
	learn(e, cellA, 400_000)
	require.Eventually(t, func() bool { return c.Stats().Published == 1 }, waitFor, tick)

	srv.Shutdown()
	srv.WaitForShutdown()
	require.Eventually(t, func() bool { return !c.Stats().Connected }, waitFor, tick)
	// Learning goes on out of coverage; the publications wait.
	learn(e, cellB, 300_000)
	learn(e, cellA, 450_000)
	time.Sleep(100 * time.Millisecond) // several publish intervals
	st := c.Stats()
	assert.Equal(t, 2, st.Queued)
	assert.Equal(t, uint64(1), st.Published)

	restarted := srv.Restart(t)
	require.Eventually(t, func() bool { return c.Stats().Published == 3 }, waitFor, tick, "queued publications not delivered")
	assert.Zero(t, c.Stats().Queued)

	// Both directions work again: another host sees what was queued,
	// and this one sees what the other publishes.
	other := startClient(t, restarted.URL(), "bus-2")
	otherEst := newEstimator(t, other)
	require.Eventually(t, func() bool {
		a, sa := otherEst.TargetBuffer(cellA)
		b, sb := otherEst.TargetBuffer(cellB)
		return sa == estimator.SourceFleet && sb == estimator.SourceFleet && a == 450_000 && b == 300_000
	}, waitFor, tick)
	learn(otherEst, mustSub6(t, 9), 350_000)
	require.Eventually(t, func() bool {
		b, ok := c.Lookup(mustSub6(t, 9))
		return ok && b == 350_000
	}, waitFor, tick, "the watcher did not resume after the restart")
}

func mustSub6(t *testing.T, pci uint16) diag.Cell {
	t.Helper()
	return diag.Cell{RAT: diag.RATNR, Band: diag.BandSub6, ARFCN: 627264, PCI: pci}
}

func TestStartsWithoutServerAndBoundsItsQueue(t *testing.T) {
	url := "nats://127.0.0.1:" + strconv.Itoa(natstest.FreePort(t))
	c := startClient(t, url, "bus-1", withQueue(2))
	e := newEstimator(t, c)
	for i, cell := range []diag.Cell{cellA, cellB, mustSub6(t, 1)} {
		learn(e, cell, uint64(200_000+i))
	}
	_, ok := c.Lookup(cellA)
	assert.False(t, ok)
	st := c.Stats()
	assert.False(t, st.Connected)
	assert.Equal(t, 2, st.Queued)
	assert.Equal(t, uint64(1), st.Dropped, "the oldest cell is pushed out")
	assert.Equal(t, uint64(1), st.Misses)
	// A cell already queued is updated in place, not queued twice.
	learn(e, cellB, 900_000)
	assert.Equal(t, 2, c.Stats().Queued)
	assert.Equal(t, uint64(1), c.Stats().Dropped)
}

func TestOpenRejects(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"bucket smaller than an entry", Options{URL: "nats://127.0.0.1:1", Network: network, Host: "h", MaxBytes: maxValueSize - 1}, "bucket size"},
		{"no url", Options{Network: network, Host: "h"}, "no server URL"},
		{"network with a dot", Options{URL: "nats://127.0.0.1:1", Network: "a.b", Host: "h"}, "network"},
		{"empty host", Options{URL: "nats://127.0.0.1:1", Network: network}, "host"},
		{"wildcard bucket", Options{URL: "nats://127.0.0.1:1", Network: network, Host: "h", Bucket: "b*"}, "bucket"},
		{"missing credentials", Options{URL: "nats://127.0.0.1:1", Network: network, Host: "h", CredsFile: "/nonexistent/fleet.creds"}, "fleet"},
		{"missing CA", Options{URL: "nats://127.0.0.1:1", Network: network, Host: "h", CAFile: "/nonexistent/ca.pem"}, "fleet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Open(tt.opts)
			if c != nil {
				c.Close()
			}
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

func TestRedact(t *testing.T) {
	assert.Equal(t, "nats://***@hub:4222,tls://b:4222", redact("nats://user:pw@hub:4222, tls://b:4222"))
}
