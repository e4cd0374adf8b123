package traffic

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// here runs in the test's own namespace (loopback traffic only).
func here(f func() error) error { return f() }

func TestBulkTransferAndSampling(t *testing.T) {
	tests := []struct {
		name  string
		cc    string
		flows int
	}{
		{name: "cubic one flow", cc: "cubic", flows: 1},
		{name: "reno two flows", cc: "reno", flows: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Listen(here, "127.0.0.1:0")
			require.NoError(t, err)
			go r.Serve()
			defer r.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
			defer cancel()
			s, err := Dial(ctx, here, r.ln.Addr().String(), tt.cc, tt.flows)
			require.NoError(t, err)
			defer s.Close()
			for i := range tt.flows {
				cc, err := s.CongestionControl(i)
				require.NoError(t, err)
				assert.Equal(t, tt.cc, cc)
			}
			epoch := time.Now()
			measured := make(chan *Measurements, 1)
			go func() { measured <- Measure(ctx, epoch, r, s) }()
			require.NoError(t, s.Run(ctx))
			m := <-measured

			assert.InDelta(t, GoodputPeriod, medianInterval(goodputTimes(m)), float64(20*time.Millisecond))
			assert.InDelta(t, TCPInfoPeriod, medianInterval(tcpInfoTimes(m, 0)), float64(5*time.Millisecond))
			assert.Zero(t, m.TCPInfoErrors)
			assert.Greater(t, m.ReceivedBytes, uint64(1<<20))
			assert.LessOrEqual(t, m.ReceivedBytes, s.Sent())
			// A receiver the loaded host lets fall behind advertises a
			// zero window now and then: the field is read when some
			// sample of every flow carries a window.
			largestWnd := map[int]uint32{}
			for _, x := range m.TCPInfo {
				largestWnd[x.Flow] = max(largestWnd[x.Flow], x.SndWnd)
				assert.Positive(t, x.SndMSS)
			}
			assert.Len(t, largestWnd, tt.flows)
			for flow, wnd := range largestWnd {
				assert.Positive(t, wnd, "flow %d: the receiver's advertised window", flow)
			}

			at, bps := m.GoodputSeries()
			require.Len(t, at, len(m.Goodput)-1)
			var total float64
			for i := range at {
				prev := m.Goodput[i].At
				total += bps[i] / 8 * (at[i] - prev).Seconds()
			}
			assert.InDelta(t, float64(m.ReceivedBytes-m.Goodput[0].Bytes), total, 1)
		})
	}
}

func TestDialRejectsUnknownCongestionControl(t *testing.T) {
	r, err := Listen(here, "127.0.0.1:0")
	require.NoError(t, err)
	go r.Serve()
	defer r.Close()
	_, err = Dial(context.Background(), here, r.ln.Addr().String(), "no-such-cc", 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no-such-cc")
}

func goodputTimes(m *Measurements) []time.Duration {
	var out []time.Duration
	for _, g := range m.Goodput {
		out = append(out, g.At)
	}
	return out
}

func tcpInfoTimes(m *Measurements, flow int) []time.Duration {
	var out []time.Duration
	for _, s := range m.TCPInfo {
		if s.Flow == flow {
			out = append(out, s.At)
		}
	}
	return out
}

// medianInterval is the median gap between consecutive times: the
// sampling period, robust to the odd late tick on a busy machine.
func medianInterval(times []time.Duration) time.Duration {
	var gaps []time.Duration
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i]-times[i-1])
	}
	if len(gaps) == 0 {
		return 0
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2]
}
