package daemon

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/datapath"
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
			fake.counters.IngressBytes = uint64(now.Sub(start).Seconds() * bytesPerSecond)
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
