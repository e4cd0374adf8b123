package daemon

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/datapath"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
)

// feedIngressBytes grows the fake datapath's ingress byte counter at
// bytesPerSecond, by wall-clock time, until ctx ends.
func feedIngressBytes(ctx context.Context, fake *fakeDatapath, bytesPerSecond float64) {
	start := time.Now()
	ticker := time.NewTicker(time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			fake.mu.Lock()
			fake.counters[datapath.IngressBytes] = uint64(now.Sub(start).Seconds() * bytesPerSecond)
			fake.mu.Unlock()
		}
	}
}

// TestSampleLoopMeasuresIngressBytes runs the sample loop on a datapath
// whose ingress byte counter grows at a set rate: the estimator's
// bandwidth clamp exists only once bytes flow, and then allows at least
// the bandwidth-delay product of that rate.
func TestSampleLoopMeasuresIngressBytes(t *testing.T) {
	const rtt = 20 * time.Millisecond
	tests := []struct {
		name           string
		bytesPerSecond float64
		wantClamp      bool
	}{
		{"idle link", 0, false},
		{"8 MB/s", 8e6, true},
		{"40 MB/s", 40e6, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFakeDatapath()
			fake.flows = []datapath.Flow{{
				Local:      netip.MustParseAddrPort("10.0.0.2:40000"),
				Remote:     netip.MustParseAddrPort("192.0.2.1:443"),
				RTTLatest:  rtt,
				RTTMin:     rtt,
				SRTT:       rtt,
				RTTSamples: 1,
			}}
			est, err := estimator.New(estimator.DefaultConfig(), nil, nil)
			require.NoError(t, err)
			d := &Daemon{dp: fake, est: est, logger: slog.New(slog.DiscardHandler)}

			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { d.sampleLoop(ctx) })
			wg.Go(func() { feedIngressBytes(ctx, fake, tc.bytesPerSecond) })
			defer func() {
				cancel()
				wg.Wait()
			}()

			clampReady := func() bool {
				_, ok := est.BandwidthClamp(time.Now())
				return ok
			}
			if !tc.wantClamp {
				assert.Never(t, clampReady, 500*time.Millisecond, 10*time.Millisecond)
				return
			}
			require.Eventually(t, clampReady, 5*time.Second, 10*time.Millisecond)
			clamp, ok := est.BandwidthClamp(time.Now())
			require.True(t, ok)
			bdp := tc.bytesPerSecond * rtt.Seconds()
			// a round measured on a loaded machine may fall short
			assert.GreaterOrEqual(t, float64(clamp), bdp/2, "clamp %d bytes against a %.0f-byte product", clamp, bdp)
		})
	}
}

func TestSampleInterval(t *testing.T) {
	tests := []struct {
		name        string
		fast, quiet bool
		want        time.Duration
	}{
		{"policy in force", true, false, pollInterval},
		{"policy in force on a silent link", true, true, pollInterval},
		{"traffic, nothing under way", false, false, idleInterval},
		{"silent link, nothing under way", false, true, quietInterval},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, sampleInterval(tc.fast, tc.quiet))
		})
	}
}

func TestEvictDue(t *testing.T) {
	tests := []struct {
		name      string
		fast      bool
		sinceLast time.Duration
		want      bool
	}{
		{"due", false, evictInterval, true},
		{"not yet due", false, evictInterval - time.Millisecond, false},
		// an eviction may wait longer than a fine sample's interval
		{"due while fine samples are needed", true, 10 * evictInterval, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, evictDue(tc.fast, tc.sinceLast))
		})
	}
}

// countingDatapath counts the reads of the ingress byte counter.
type countingDatapath struct {
	*fakeDatapath
	reads atomic.Int64
}

func (c *countingDatapath) IngressBytes() (uint64, error) {
	c.reads.Add(1)
	return c.fakeDatapath.IngressBytes()
}

// TestSampleLoopFollowsTheLoop checks that the sampler reads the byte
// counter at pollInterval only while the loop asks for fine samples, and
// that it speeds up as soon as it is asked, not at its next slow tick.
// The bounds leave room for a loaded machine: the rates differ tenfold.
func TestSampleLoopFollowsTheLoop(t *testing.T) {
	const window = 300 * time.Millisecond
	tests := []struct {
		name               string
		fast               bool
		minReads, maxReads int64
	}{
		{"fine samples asked", true, 10, 40},
		{"coarse samples", false, 1, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := &countingDatapath{fakeDatapath: newFakeDatapath()}
			est, err := estimator.New(estimator.DefaultConfig(), nil, nil)
			require.NoError(t, err)
			d := &Daemon{dp: fake, est: est, logger: slog.New(slog.DiscardHandler), sampleWake: make(chan struct{}, 1)}

			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { d.sampleLoop(ctx) })
			wg.Go(func() { feedIngressBytes(ctx, fake.fakeDatapath, 1e6) })
			defer func() {
				cancel()
				wg.Wait()
			}()
			// Let the sampler settle on the coarse pace first.
			time.Sleep(2 * pollInterval)
			before := fake.reads.Load()
			d.setSampleFast(tc.fast)
			if tc.fast {
				require.Eventually(t, func() bool { return fake.reads.Load() > before }, idleInterval/2, time.Millisecond,
					"the sampler waited for its slow tick")
			}
			time.Sleep(window)
			reads := fake.reads.Load() - before
			assert.GreaterOrEqual(t, reads, tc.minReads)
			assert.LessOrEqual(t, reads, tc.maxReads)
		})
	}
}

// hookedFlowsDatapath runs onRead right after a read of the flow table,
// as the loop may change the serving cell while the sampler walks.
type hookedFlowsDatapath struct {
	*fakeDatapath
	onRead func()
}

func (h *hookedFlowsDatapath) Flows() ([]datapath.Flow, error) {
	flows, err := h.fakeDatapath.Flows()
	if h.onRead != nil {
		h.onRead()
		h.onRead = nil
	}
	return flows, err
}

// TestRTTWalksKeepTheOldCellOut follows a mmWave to sub-6 handover
// (10 ms RTT before, 40 ms after) through the flow walks: the last
// mmWave sample, taken after the previous walk, must not reach the sub-6
// cell's estimate. The path's RTT_min carries over for
// estimator.carriedRTTMin, 2 s; once the sub-6 cell's own is probed, Eq. 2
// holds its window at twice its bandwidth-delay product, where an old
// sample kept in its RTT_min would hold it at a quarter of that.
func TestRTTWalksKeepTheOldCellOut(t *testing.T) {
	mm := diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 7, ARFCN: 2079167}
	sub6 := diag.Cell{RAT: diag.RATNR, Band: diag.BandSub6, PCI: 2, ARFCN: 632628}
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	const rate = 10e6 // bytes/s
	tests := []struct {
		name string
		// duringWalk: the handover is handled while the walk at 210 ms
		// reads the flows, rather than before it.
		duringWalk bool
	}{
		{name: "handover between two walks"},
		{name: "handover during a walk", duringWalk: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			est, err := estimator.New(estimator.DefaultConfig(), nil, nil)
			require.NoError(t, err)
			fake := &hookedFlowsDatapath{fakeDatapath: newFakeDatapath()}
			d := &Daemon{dp: fake, est: est, logger: slog.New(slog.DiscardHandler)}
			flow := datapath.Flow{Local: netip.MustParseAddrPort("10.0.0.2:40000"), Remote: netip.MustParseAddrPort("192.0.2.1:443")}
			sample := func(rtt time.Duration) {
				flow.RTTSamples++
				flow.RTTLatest = rtt
				fake.flows = []datapath.Flow{flow}
			}
			rtts := newRTTSampler()
			walk := func(ms int) { require.NoError(t, d.walkRTTs(at(ms), rtts, newLossSampler())) }

			est.SetServing(mm, at(0))
			sample(10 * time.Millisecond)
			walk(10)
			sample(10 * time.Millisecond)
			walk(110)
			// The last mmWave sample, after the last walk on that cell.
			sample(10 * time.Millisecond)
			handover := func() { est.SetServing(sub6, at(200)) }
			if tc.duringWalk {
				fake.onRead = handover
			} else {
				handover()
			}
			// The sub-6 cell has not delivered yet: this walk finds only
			// the mmWave sample.
			walk(210)
			for ms := 300; ms <= 3000; ms += 10 {
				if ms%50 == 0 {
					sample(40 * time.Millisecond)
					walk(ms)
				}
				est.AddBytes(at(ms), uint64(rate*float64(ms)/1000))
			}
			got, ok := est.BandwidthClamp(at(3000))
			require.True(t, ok)
			// Eq. 2 on the sub-6 path: 2 * 10 MB/s * 40 ms * 40/40.
			assert.InDelta(t, 2*rate*0.040, float64(got), 2*rate*0.040/20)
		})
	}
}

// TestLossSampler: payload received beyond what a flow's highest sequence
// advanced arrived below it (retransmissions filling holes); new flows and
// reused keys count from their first walk.
func TestLossSampler(t *testing.T) {
	a := datapath.Flow{Local: netip.MustParseAddrPort("10.0.0.2:40000"), Remote: netip.MustParseAddrPort("192.0.2.1:443"), HaveRxSeq: true}
	b := datapath.Flow{Local: netip.MustParseAddrPort("10.0.0.2:40001"), Remote: netip.MustParseAddrPort("192.0.2.1:443"), HaveRxSeq: true}
	at := func(f datapath.Flow, rx uint64, highest uint32) datapath.Flow {
		f.RxBytes, f.HighestRxSeq = rx, highest
		return f
	}
	s := newLossSampler()
	assert.Zero(t, s.observe([]datapath.Flow{at(a, 10_000, 10_000)}), "first walk")
	assert.Zero(t, s.observe([]datapath.Flow{at(a, 20_000, 20_000)}), "in order")
	assert.Equal(t, uint64(3000), s.observe([]datapath.Flow{at(a, 30_000, 27_000)}), "3000 bytes filled holes")
	assert.Zero(t, s.observe([]datapath.Flow{at(a, 30_000, 27_000), at(b, 5000, 5000)}), "a new flow counts from now")
	assert.Equal(t, uint64(1000), s.observe([]datapath.Flow{at(a, 31_000, 27_000), at(b, 100, 100)}),
		"1000 more below a's highest; b, its count lower, is a new connection counted from now")
	wrapped := at(a, 41_000, 27_000+10_000)
	wrapped.HighestRxSeq = 0xffff_ff00
	s = newLossSampler()
	s.observe([]datapath.Flow{wrapped})
	assert.Zero(t, s.observe([]datapath.Flow{at(a, 42_000, 0x0000_0300)}), "a sequence wrap is an advance")
}
