package estimator

import (
	"testing"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type rttSample struct {
	ms  float64
	rtt time.Duration
}

type byteSampleIn struct {
	ms    float64
	total uint64
}

// steadyBytes samples a counter growing at bytesPerSecond every 10 ms
// over [0, untilMs].
func steadyBytes(bytesPerSecond float64, untilMs int) []byteSampleIn {
	var out []byteSampleIn
	for ms := 0; ms <= untilMs; ms += 10 {
		out = append(out, byteSampleIn{ms: float64(ms), total: uint64(bytesPerSecond * float64(ms) / 1000)})
	}
	return out
}

func TestBandwidthClampEq2(t *testing.T) {
	const rate = 12_500_000 // 100 Mbit/s
	tests := []struct {
		name    string
		cfg     Config
		rtts    []rttSample
		bytes   []byteSampleIn
		queryMs float64
		window  uint64
		ok      bool
		skipped map[string]uint64
	}{
		{
			name:    "no RTT sample yet",
			bytes:   steadyBytes(rate, 200),
			queryMs: 200,
		},
		{
			name:    "no byte samples yet",
			rtts:    []rttSample{{0, 50 * time.Millisecond}},
			queryMs: 200,
		},
		{
			name:    "steady link at its minimum RTT: lambda times the bytes per RTT",
			rtts:    []rttSample{{0, 50 * time.Millisecond}},
			bytes:   steadyBytes(rate, 200),
			queryMs: 200,
			window:  2 * rate * 50 / 1000,
			ok:      true,
		},
		{
			name:    "lambda is configurable",
			cfg:     Config{Lambda: 1},
			rtts:    []rttSample{{0, 50 * time.Millisecond}},
			bytes:   steadyBytes(rate, 200),
			queryMs: 200,
			window:  rate * 50 / 1000,
			ok:      true,
		},
		{
			name: "queueing delay shrinks the window by RTT_min/RTT",
			// srtt settles near 80 ms: bytes per RTT grow with it, and
			// RTT_min/RTT scales them back to the 40 ms path.
			rtts:    append([]rttSample{{0, 40 * time.Millisecond}}, repeatRTT(80*time.Millisecond, 1, 60)...),
			bytes:   steadyBytes(rate, 600),
			queryMs: 600,
			window:  2 * rate * 40 / 1000,
			ok:      true,
		},
		{
			name:    "an idle link gives the minimum clamp",
			rtts:    []rttSample{{0, 50 * time.Millisecond}},
			bytes:   steadyBytes(0, 200),
			queryMs: 200,
			window:  64 << 10,
			ok:      true,
		},
		{
			name:    "a stale estimate is not used: a round and the max age after the last one",
			rtts:    []rttSample{{0, 50 * time.Millisecond}},
			bytes:   steadyBytes(rate, 200),
			queryMs: 1251,
		},
		{
			name:    "an absurd rate is capped at the largest window",
			rtts:    []rttSample{{0, 50 * time.Millisecond}},
			bytes:   steadyBytes(1e12, 200),
			queryMs: 200,
			window:  1 << 30,
			ok:      true,
		},
		{
			name: "bad samples are counted and skipped",
			rtts: []rttSample{{0, 50 * time.Millisecond}, {1, 0}, {2, -time.Millisecond}, {3, 2 * time.Minute}},
			bytes: append(steadyBytes(rate, 100),
				byteSampleIn{ms: 50, total: 1}, // back in time
			),
			queryMs: 100,
			window:  2 * rate * 50 / 1000,
			ok:      true,
			skipped: map[string]uint64{"rtt_not_positive": 2, "rtt_implausible": 1, "bytes_time_backwards": 1},
		},
		{
			name: "a counter reset restarts the rounds",
			rtts: []rttSample{{0, 50 * time.Millisecond}},
			bytes: append(steadyBytes(rate, 100),
				byteSampleIn{ms: 110, total: 0},
				byteSampleIn{ms: 140, total: 100_000},
			),
			queryMs: 140,
			// The round in progress at the reset is never closed:
			// the estimate is still the one of the round ending at 100.
			window:  2 * rate * 50 / 1000,
			ok:      true,
			skipped: map[string]uint64{"bytes_counter_reset": 1},
		},
		{
			name: "a second sample at the same time is skipped",
			rtts: []rttSample{{0, 50 * time.Millisecond}},
			bytes: []byteSampleIn{
				{ms: 0, total: 0}, {ms: 50, total: 625_000}, {ms: 50, total: 1},
				{ms: 100, total: 1_250_000},
			},
			queryMs: 100,
			window:  2 * rate * 50 / 1000,
			ok:      true,
			skipped: map[string]uint64{"bytes_duplicate_time": 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			// A default buffer of over two products, so that the cap
			// leaves Eq. 2 as it is (TestBandwidthClampCappedByBuffer).
			cfg.DefaultBufferBytes = 2 << 20
			e, err := New(cfg, nil, nil)
			require.NoError(t, err)
			feedSeries(e, tc.rtts, tc.bytes)
			window, ok := e.BandwidthClamp(at(tc.queryMs))
			assert.Equal(t, tc.ok, ok)
			if tc.ok {
				assert.InDelta(t, float64(tc.window), float64(window), float64(tc.window)/1000)
			}
			want := tc.skipped
			if want == nil {
				want = map[string]uint64{}
			}
			assert.Equal(t, want, skipped(e))
		})
	}
}

func repeatRTT(rtt time.Duration, fromMs, count int) []rttSample {
	out := make([]rttSample, count)
	for i := range out {
		out[i] = rttSample{ms: float64(fromMs + 10*i), rtt: rtt}
	}
	return out
}

// feedSeries interleaves RTT and byte samples in time order.
func feedSeries(e *Estimator, rtts []rttSample, bytes []byteSampleIn) {
	i, j := 0, 0
	for i < len(rtts) || j < len(bytes) {
		if j == len(bytes) || (i < len(rtts) && rtts[i].ms <= bytes[j].ms) {
			e.AddRTT(e.Path(), at(rtts[i].ms), rtts[i].rtt)
			i++
			continue
		}
		e.AddBytes(at(bytes[j].ms), bytes[j].total)
		j++
	}
}

func TestMinRTTWindow(t *testing.T) {
	e := newEstimator(t, nil)
	e.SetServing(lteA, at(0))
	e.AddRTT(e.Path(), at(0), 20*time.Millisecond)
	e.AddRTT(e.Path(), at(5000), 60*time.Millisecond)
	assert.Equal(t, 20*time.Millisecond, e.bw.minRTT, "within the window")
	e.AddRTT(e.Path(), at(10_001), 60*time.Millisecond)
	assert.Equal(t, 20*time.Millisecond, e.bw.minRTT, "expired, it is probed, not replaced")
	e.AddRTT(e.Path(), at(10_200), 45*time.Millisecond)
	e.AddRTT(e.Path(), at(10_301), 50*time.Millisecond)
	assert.Equal(t, 45*time.Millisecond, e.bw.minRTT, "the probe's smallest sample")
	e.AddRTT(e.Path(), at(10_400), 44*time.Millisecond)
	assert.Equal(t, 44*time.Millisecond, e.bw.minRTT, "a smaller sample at any time")
}

// TestStaleMinRTTIsProbed: once RTT_min is older than its window, the hold
// lets through the bandwidth-delay product only, for three smoothed RTTs,
// so the queue it kept drains, and the probe's smallest sample becomes
// RTT_min: the base delay, not the queue the hold kept.
func TestStaleMinRTTIsProbed(t *testing.T) {
	const (
		rate   = 1_875_000 // 15 Mbit/s
		buffer = 150_000
		base   = 70 * time.Millisecond
	)
	tests := []struct {
		name string
		// held is the RTT of the samples from 100 ms until the probe,
		// the hold's queue on top of the base delay; probed the RTT once
		// the probe began.
		held, probed time.Duration
		wantMinRTT   time.Duration
	}{
		{name: "the base delay stayed", held: base + 40*time.Millisecond, probed: base + time.Millisecond, wantMinRTT: base + time.Millisecond},
		{name: "the base delay rose", held: 2*base + 40*time.Millisecond, probed: 2 * base, wantMinRTT: 2 * base},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEstimator(t, nil)
			e.SetServing(lteA, at(0))
			e.AddBurst(Burst{Start: at(1), End: at(5), Bytes: buffer})
			var total float64
			probeSeen, probeEnd := false, 0.0
			for ms := 0.0; ms <= 13_000; ms += 10 {
				rtt := base
				switch {
				case probeSeen:
					rtt = tc.probed
				case ms >= 100:
					rtt = tc.held
				}
				e.AddRTT(e.Path(), at(ms), rtt)
				e.AddBytes(at(ms), uint64(total))
				total += rate / 100
				e.mu.Lock()
				probing := e.probingLocked()
				e.mu.Unlock()
				if probing && !probeSeen {
					probeSeen = true
					assert.Equal(t, 10_100.0, ms, "the probe starts with the first sample 10 s after RTT_min's")
					window, ok := e.BandwidthClamp(at(ms))
					require.True(t, ok)
					assert.InDelta(t, rate*base.Seconds(), float64(window), rate*base.Seconds()/20, "the product only")
					drainable, ok := e.DrainableWindow(at(ms), 200*time.Millisecond)
					require.True(t, ok)
					assert.Equal(t, window, drainable, "the mmWave hold too")
				}
				if probeSeen && !probing && probeEnd == 0 {
					probeEnd = ms
				}
			}
			require.True(t, probeSeen, "a probe")
			assert.Equal(t, tc.wantMinRTT, e.bw.minRTT)
			assert.GreaterOrEqual(t, probeEnd-10_100, 300.0, "it lasts three smoothed RTTs, 300 ms at least")
			window, ok := e.BandwidthClamp(at(13_000))
			require.True(t, ok)
			estimate := float64(cellRecord(t, e, lteA).BufferBytes)
			assert.InDelta(t, rate*tc.wantMinRTT.Seconds()+estimate/2, float64(window), 3000, "the hold after the probe")
		})
	}
}

// TestCellChangeRestartsBandwidth: the rate and delays of one cell say
// nothing of the next; a mmWave rate held on sub-6 overflows it.
func TestCellChangeRestartsBandwidth(t *testing.T) {
	const mmWaveRate, sub6Rate = 12_500_000, 1_875_000
	tests := []struct {
		name string
		// next is the cell served at 200 ms.
		next diag.Cell
		// window after the change: at 200 ms (before any round of the
		// new cell) and at 400 ms.
		windowAt200, windowAt400 uint64
		okAt200                  bool
	}{
		{
			name:        "same cell keeps the estimate",
			next:        lteA,
			windowAt200: 2 * mmWaveRate * 50 / 1000,
			okAt200:     true,
			// Rounds at the sub-6 rate from 200 ms on, but the peak of
			// the last second is still the faster rate of the cell.
			windowAt400: 2 * mmWaveRate * 50 / 1000,
		},
		{
			name:        "new cell: no estimate until it had a round",
			next:        nrA,
			windowAt400: 2 * sub6Rate * 50 / 1000,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			// Over two products of the faster cell: the cap leaves Eq. 2
			// as it is.
			cfg.DefaultBufferBytes = 2 << 20
			e, err := New(cfg, nil, nil)
			require.NoError(t, err)
			e.SetServing(lteA, at(0))
			var total uint64
			for ms := 0; ms <= 400; ms += 10 {
				if ms%50 == 0 {
					e.AddRTT(e.Path(), at(float64(ms)), 50*time.Millisecond)
				}
				if ms == 200 {
					e.SetServing(tc.next, at(200))
				}
				e.AddBytes(at(float64(ms)), total)
				rate := uint64(mmWaveRate)
				if ms >= 200 {
					rate = sub6Rate
				}
				total += rate / 100
				if ms == 200 {
					window, ok := e.BandwidthClamp(at(200))
					assert.Equal(t, tc.okAt200, ok, "at 200 ms")
					assert.Equal(t, tc.windowAt200, window, "at 200 ms")
				}
			}
			window, ok := e.BandwidthClamp(at(400))
			assert.True(t, ok, "at 400 ms")
			assert.InDelta(t, tc.windowAt400, window, float64(tc.windowAt400)/20, "at 400 ms")
		})
	}
}

// TestRTTMinCarriesOverAHandover: the new cell's first RTT samples wait
// behind what the handover piled up in it; the hold sized on them would
// keep that pile as a standing queue. The path's RTT_min stays the
// ceiling of the new cell's, which a faster sample still lowers, for two
// seconds at most: then a probe measures the new cell's own.
func TestRTTMinCarriesOverAHandover(t *testing.T) {
	const rate = 1_875_000 // 15 Mbit/s on both cells
	const buffer = 150_000
	tests := []struct {
		name string
		// newRTT is every RTT sample of the new cell.
		newRTT     time.Duration
		wantMinRTT time.Duration
	}{
		{name: "samples behind the handover's queue: the path's RTT_min", newRTT: 130 * time.Millisecond, wantMinRTT: 70 * time.Millisecond},
		{name: "a faster new cell lowers it", newRTT: 60 * time.Millisecond, wantMinRTT: 60 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEstimator(t, nil)
			for _, c := range []diag.Cell{lteA, lteB} {
				e.SetServing(c, at(0))
				e.AddBurst(Burst{Start: at(1), End: at(5), Bytes: buffer})
			}
			e.SetServing(lteA, at(0))
			var total uint64
			handover := 2000.0
			for ms := 0.0; ms <= 3000; ms += 10 {
				rtt := 70 * time.Millisecond
				if ms == handover {
					e.SetServing(lteB, at(ms))
				}
				if ms >= handover {
					rtt = tc.newRTT
				}
				if int(ms)%50 == 0 {
					e.AddRTT(e.Path(), at(ms), rtt)
				}
				// The interruption: nothing arrives for 50 ms.
				if ms < handover || ms >= handover+50 {
					total += rate / 100
				}
				e.AddBytes(at(ms), total)
			}
			got, ok := e.Carried(at(3000))
			require.True(t, ok)
			assert.Equal(t, tc.wantMinRTT, got.MinRTT)
			window, ok := e.BandwidthClamp(at(3000))
			require.True(t, ok)
			assert.InDelta(t, rate*tc.wantMinRTT.Seconds()+buffer/2, float64(window), 5000, "the hold: the product on the path's RTT_min, plus half the buffer")
		})
	}
	t.Run("a slower new path raises no buffer estimate", func(t *testing.T) {
		// a buffer below the 37.5 kB the 20 ms would seem to queue
		const small = 20_000
		e := newEstimator(t, nil)
		e.SetServing(lteB, at(0))
		e.AddBurst(Burst{Start: at(1), End: at(5), Bytes: small})
		e.SetServing(lteA, at(0))
		e.AddRTT(e.Path(), at(0), 40*time.Millisecond)
		e.SetServing(lteB, at(10))
		var total uint64
		for ms := 10.0; ms <= 1500; ms += 10 {
			if int(ms)%50 == 0 {
				e.AddRTT(e.Path(), at(ms), 60*time.Millisecond)
			}
			total += rate / 100
			e.AddBytes(at(ms), total)
		}
		assert.Equal(t, 40*time.Millisecond, e.bw.minRTT, "still the old path's")
		assert.Equal(t, uint64(small), cellRecord(t, e, lteB).BufferBytes, "20 ms of a slower path is no queue")
	})
	for _, tc := range []struct {
		name     string
		measured float64 // ms: when the old path measured its RTT_min
		// the new cell serves at 9 s; its RTT_min is probed by then
		probedBy float64
	}{
		{name: "carried for two seconds, then probed", measured: 8900, probedBy: 11_350},
		{name: "no longer than it had left", measured: 0, probedBy: 10_350},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEstimator(t, nil)
			e.SetServing(lteA, at(0))
			e.AddRTT(e.Path(), at(tc.measured), 70*time.Millisecond)
			e.SetServing(lteB, at(9000))
			for ms := 9000.0; ms <= 12_000; ms += 50 {
				e.AddRTT(e.Path(), at(ms), 90*time.Millisecond)
				want := 70 * time.Millisecond
				if ms >= tc.probedBy {
					want = 90 * time.Millisecond
				}
				require.Equal(t, want, e.bw.minRTT, "at %v ms", ms)
			}
		})
	}
}

// TestBandwidthClampCappedByBuffer: Eq. 2 converges to lambda bandwidth-
// delay products in flight; the cap keeps the queue within the serving
// cell's buffer estimate.
func TestBandwidthClampCappedByBuffer(t *testing.T) {
	const rate = 1_875_000 // 15 Mbit/s
	const bdp = rate * 70 / 1000
	tests := []struct {
		name   string
		buffer uint64 // 0: no burst seen, the default buffer applies
		window uint64
	}{
		{name: "buffer below one product: capped at product plus half the buffer", buffer: 100_000, window: bdp + 50_000},
		{name: "buffer of 1.5 products: capped at product plus half the buffer", buffer: 200_000, window: bdp + 100_000},
		{name: "buffer above two products: Eq. 2 as is", buffer: 300_000, window: 2 * bdp},
		{name: "unknown cell: the default buffer, Eq. 2 as is", window: 2 * bdp},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEstimator(t, nil)
			e.SetServing(lteA, at(0))
			if tc.buffer > 0 {
				e.AddBurst(Burst{Start: at(0), End: at(5), Bytes: tc.buffer})
			}
			e.AddRTT(e.Path(), at(0), 70*time.Millisecond)
			for _, s := range steadyBytes(rate, 300) {
				e.AddBytes(at(s.ms), s.total)
			}
			window, ok := e.BandwidthClamp(at(300))
			require.True(t, ok)
			assert.InDelta(t, tc.window, window, float64(tc.window)/100)
		})
	}
}

// TestRTTOfThePreviousPathIsDropped: a sample read before the
// serving cell changed may have been measured on the old path; reaching
// the restarted estimate, a faster old path would be the new cell's
// RTT_min for RTTMinWindow.
func TestRTTOfThePreviousPathIsDropped(t *testing.T) {
	tests := []struct {
		name string
		// change serves nrA at 100 ms, after the sample was read.
		change      bool
		wantMinRTT  time.Duration
		wantSkipped uint64
	}{
		{name: "same cell: the sample counts", wantMinRTT: 10 * time.Millisecond},
		{name: "cell changed since the read: dropped", change: true, wantSkipped: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEstimator(t, nil)
			e.SetServing(lteA, at(0))
			path := e.Path()
			if tc.change {
				e.SetServing(nrA, at(100))
				assert.NotEqual(t, path, e.Path(), "a new cell is a new path")
			}
			e.AddRTT(path, at(110), 10*time.Millisecond)
			assert.Equal(t, tc.wantMinRTT, e.bw.minRTT)
			assert.Equal(t, tc.wantSkipped, e.skipped["rtt_previous_cell"])
		})
	}
	t.Run("same cell again is the same path", func(t *testing.T) {
		e := newEstimator(t, nil)
		e.SetServing(lteA, at(0))
		path := e.Path()
		e.SetServing(lteA, at(50))
		assert.Equal(t, path, e.Path())
	})
}

// TestBandwidthClampFollowsPeakRate: a sender that probes (BBR's gain
// cycle: one round at 1.25 times its rate, one at 0.75, six at 1) is
// clamped to the rate of its probe, not to the round after it, until the
// probe leaves the peak window.
func TestBandwidthClampFollowsPeakRate(t *testing.T) {
	const rate = 1_875_000 // 15 Mbit/s
	gains := []float64{1.25, 0.75, 1, 1, 1, 1, 1, 1}
	e := newEstimator(t, nil)
	e.SetServing(lteA, at(0))
	var total uint64
	ms := 0
	feedRound := func(gain float64) {
		for end := ms + 50; ms < end; ms += 10 {
			e.AddRTT(e.Path(), at(float64(ms)), 50*time.Millisecond)
			e.AddBytes(at(float64(ms)), total)
			total += uint64(gain * rate / 100)
		}
	}
	for _, g := range gains {
		feedRound(g)
	}
	e.AddBytes(at(float64(ms)), total)
	window, ok := e.BandwidthClamp(at(float64(ms)))
	require.True(t, ok)
	assert.InDelta(t, 2*1.25*rate*50/1000, float64(window), 2*rate*50/1000/50, "the probe's rate, 6 rounds later")
	last, ok := e.LastRound(at(float64(ms)))
	require.True(t, ok)
	assert.InDelta(t, rate*50/1000, float64(last.Flight), rate*50/1000/20, "the last round's flight is the steady rate's")

	// A second of steady rounds later the probe no longer counts.
	for range 20 {
		feedRound(1)
	}
	e.AddBytes(at(float64(ms)), total)
	window, ok = e.BandwidthClamp(at(float64(ms)))
	require.True(t, ok)
	assert.InDelta(t, 2*rate*50/1000, float64(window), 2*rate*50/1000/50, "the probe left the peak window")
}

// TestCarried: the flight at the peak rate is the rate times the smoothed
// RTT, its bandwidth-delay product the rate times RTT_min.
func TestCarried(t *testing.T) {
	const rate = 1_875_000
	e := newEstimator(t, nil)
	e.SetServing(lteA, at(0))
	_, ok := e.Carried(at(0))
	assert.False(t, ok, "nothing measured yet")
	rtts := append([]rttSample{{0, 40 * time.Millisecond}}, repeatRTT(80*time.Millisecond, 1, 100)...)
	feedSeries(e, rtts, steadyBytes(rate, 1000))
	c, ok := e.Carried(at(1000))
	require.True(t, ok)
	assert.InDelta(t, rate*80/1000, float64(c.Flight), rate*80/1000/20)
	assert.InDelta(t, rate*40/1000, float64(c.BDP), rate*40/1000/50)
	_, ok = e.Carried(at(2500))
	assert.False(t, ok, "stale")
}

// TestLastRoundQueue: the queue of a round is its rate times the smoothed
// RTT above RTT_min; a round at RTT_min queued nothing.
func TestLastRoundQueue(t *testing.T) {
	const rate = 1_875_000
	tests := []struct {
		name  string
		rtts  []rttSample
		queue uint64
	}{
		{name: "at RTT_min", rtts: repeatRTT(40*time.Millisecond, 0, 100), queue: 0},
		{name: "40 ms above RTT_min", rtts: append([]rttSample{{0, 40 * time.Millisecond}}, repeatRTT(80*time.Millisecond, 1, 100)...), queue: rate * 40 / 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEstimator(t, nil)
			e.SetServing(lteA, at(0))
			feedSeries(e, tc.rtts, steadyBytes(rate, 1000))
			r, ok := e.LastRound(at(1000))
			require.True(t, ok)
			assert.InDelta(t, tc.queue, float64(r.Queue), rate*40/1000/20)
		})
	}
}

// TestBandwidthClampOfACellBoundRound: once the last round queued more
// than CellBoundShare of the buffer estimate, the window is that round's
// product plus half the buffer; a round that queued less leaves the peak
// rate's.
func TestBandwidthClampOfACellBoundRound(t *testing.T) {
	const (
		rate = 1_875_000 // 15 Mbit/s
		// buffer is below one product, so that the cap (a product plus
		// half the buffer) is the window.
		buffer = 100_000
		minRTT = 70 * time.Millisecond
	)
	bdp := func(bytesPerSecond float64) float64 { return bytesPerSecond * minRTT.Seconds() }
	tests := []struct {
		name string
		// later is the rate of the last 300 ms, after 700 ms at rate;
		// queued its RTT above RTT_min.
		later     float64
		queued    time.Duration
		window    float64
		cellBound bool
	}{
		{name: "no queue: the peak rate", later: rate, window: bdp(rate) + buffer/2},
		{name: "a queue below the share: the peak rate", later: rate, queued: 10 * time.Millisecond, window: bdp(rate) + buffer/2},
		{name: "a cell at its rate with a queue: its product", later: rate, queued: 40 * time.Millisecond, window: bdp(rate) + buffer/2, cellBound: true},
		{name: "a cell that slowed by a third: the slow round's product", later: rate * 2 / 3, queued: 60 * time.Millisecond, window: bdp(rate*2/3) + buffer/2, cellBound: true},
		{name: "a cell that slowed by a third, no queue: the peak rate's", later: rate * 2 / 3, window: bdp(rate) + buffer/2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEstimator(t, nil)
			e.SetServing(lteA, at(0))
			e.AddBurst(Burst{Start: at(0), End: at(5), Bytes: buffer})
			var total float64
			for ms := 0; ms <= 1000; ms += 10 {
				r, rtt := float64(rate), minRTT
				if ms > 700 {
					r, rtt = tc.later, minRTT+tc.queued
				}
				if ms == 0 {
					rtt = minRTT
				}
				e.AddRTT(e.Path(), at(float64(ms)), rtt)
				e.AddBytes(at(float64(ms)), uint64(total))
				total += r / 100
			}
			window, ok := e.BandwidthClamp(at(1000))
			require.True(t, ok)
			assert.InDelta(t, tc.window, float64(window), tc.window/50)
			round, ok := e.LastRound(at(1000))
			require.True(t, ok)
			assert.Equal(t, tc.cellBound, round.CellBound)
		})
	}
}

// TestQueueRaisesTheBufferEstimate: what the serving cell held queued for
// two rounds in a row (the smallest queue one of a round's RTT samples
// waited behind) is a lower bound of its buffer, as a burst is.
func TestQueueRaisesTheBufferEstimate(t *testing.T) {
	const (
		rate   = 1_875_000 // 15 Mbit/s
		minRTT = 70 * time.Millisecond
	)
	queueOf := func(d time.Duration) float64 { return rate * d.Seconds() }
	tests := []struct {
		name string
		// known is the burst estimate before; queued the RTT above
		// RTT_min of the samples from 500 ms, jitter added to every
		// other one of them, spike to one sample at 700 ms.
		known  uint64
		queued time.Duration
		jitter time.Duration
		spike  time.Duration
		want   float64
		saved  bool
	}{
		{name: "a standing queue raises an unknown cell's estimate", queued: 80 * time.Millisecond, want: queueOf(80 * time.Millisecond), saved: true},
		{name: "and a smaller burst estimate", known: 70_000, queued: 80 * time.Millisecond, want: queueOf(80 * time.Millisecond), saved: true},
		{name: "a queue below the estimate leaves it", known: 200_000, queued: 80 * time.Millisecond, want: 200_000},
		{name: "samples delayed beyond the queue do not count", queued: 40 * time.Millisecond, jitter: 60 * time.Millisecond, want: queueOf(40 * time.Millisecond), saved: true},
		{name: "one delayed sample is no queue", spike: 300 * time.Millisecond},
		{name: "no queue, no estimate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := &memStore{}
			e := newEstimator(t, store)
			e.SetServing(lteA, at(0))
			if tc.known > 0 {
				e.AddBurst(Burst{Start: at(0), End: at(5), Bytes: tc.known})
			}
			saves := len(store.saved)
			var total float64
			for ms := 0; ms <= 1500; ms += 10 {
				rtt := minRTT
				if ms >= 500 {
					rtt += tc.queued
					if ms%20 == 0 {
						rtt += tc.jitter
					}
				}
				if ms == 700 {
					rtt += tc.spike
				}
				e.AddRTT(e.Path(), at(float64(ms)), rtt)
				e.AddBytes(at(float64(ms)), uint64(total))
				total += rate / 100
			}
			var got CellRecord
			for _, r := range e.Cells() {
				if r.Cell == lteA {
					got = r
				}
			}
			assert.InDelta(t, tc.want, float64(got.BufferBytes), tc.want/50+1)
			assert.Equal(t, tc.saved, len(store.saved) > saves, "the raised estimate is stored")
		})
	}
}

// servingMmWaveAfterSub6 is an estimator serving mmWave cell mmA from 0
// ms, after a sub-6 cell whose burst showed a buffer of sub6Buffer: the
// sub-6 buffer estimate the mmWave hold adds to what the cell drains.
func servingMmWaveAfterSub6(t *testing.T, sub6Buffer uint64) *Estimator {
	t.Helper()
	e := newEstimator(t, nil)
	e.SetServing(lteA, at(-100))
	e.AddBurst(Burst{Start: at(-100), End: at(-95), Bytes: sub6Buffer})
	e.SetServing(mmA, at(0))
	return e
}

// TestDrainableWindow: on a mmWave cell the hold lets through what the
// cell delivers in the lead (at least its bandwidth-delay product) plus
// the smallest sub-6 buffer estimate; a cell that slowed with a queue
// drains at its new rate.
func TestDrainableWindow(t *testing.T) {
	const (
		rate       = 12_500_000 // 100 Mbit/s
		sub6Buffer = 150_000
		minRTT     = 70 * time.Millisecond
	)
	tests := []struct {
		name string
		lead time.Duration
		// later is the rate of the last 300 ms, after 700 ms at rate;
		// queued its RTT above RTT_min.
		later  float64
		queued time.Duration
		window float64
		// tolerance is the share of window the answer may be off by: a
		// round that spans the slowdown delivers at a rate between.
		tolerance float64
	}{
		{name: "a lead above RTT_min: the rate over the lead", lead: 146 * time.Millisecond, later: rate,
			window: rate*0.146 + sub6Buffer},
		{name: "a lead below RTT_min: the bandwidth-delay product", lead: 40 * time.Millisecond, later: rate,
			window: rate*minRTT.Seconds() + sub6Buffer},
		{name: "a cell that slowed to a fifth with a queue: the slow round's rate", lead: 146 * time.Millisecond,
			later: rate / 5, queued: 100 * time.Millisecond, window: rate/5*0.146 + sub6Buffer, tolerance: 0.2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := servingMmWaveAfterSub6(t, sub6Buffer)
			var total float64
			for ms := 0; ms <= 1000; ms += 10 {
				r, rtt := float64(rate), minRTT
				if ms > 700 {
					r, rtt = tc.later, minRTT+tc.queued
				}
				e.AddRTT(e.Path(), at(float64(ms)), rtt)
				e.AddBytes(at(float64(ms)), uint64(total))
				total += r / 100
			}
			window, ok := e.DrainableWindow(at(1000), tc.lead)
			require.True(t, ok)
			assert.InDelta(t, tc.window, float64(window), tc.window*max(tc.tolerance, 0.02))
		})
	}
}

// TestDrainableWindowOfACellThatSlowsUnderAQueue: once the newest RTT
// sample waited longer than the lead, the hold drains at the rate the
// cell delivered over that wait, which the rounds (a smoothed RTT long)
// learn only later; a queue the lead drains anyway keeps the rounds'
// rate.
func TestDrainableWindowOfACellThatSlowsUnderAQueue(t *testing.T) {
	const (
		rate       = 12_500_000 // 100 Mbit/s
		sub6Buffer = 150_000
		minRTT     = 70 * time.Millisecond
		lead       = 146 * time.Millisecond
		slowFromMs = 1700
	)
	tests := []struct {
		name string
		// queued is every sample's RTT above RTT_min after the first;
		// later the rate from slowFromMs to the end at 2000 ms.
		queued time.Duration
		later  float64
		window float64
	}{
		{name: "a queue longer than the lead at a steady rate: the rate over the lead", queued: 300 * time.Millisecond, later: rate,
			window: rate*lead.Seconds() + sub6Buffer},
		{name: "a queue longer than the lead as the cell slows to a third: the rate over the wait", queued: 300 * time.Millisecond, later: rate / 3,
			window: rate/3*lead.Seconds() + sub6Buffer},
		{name: "a queue shorter than the lead as the cell slows to a third: the rounds' rate", queued: 100 * time.Millisecond, later: rate / 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := servingMmWaveAfterSub6(t, sub6Buffer)
			var total float64
			for ms := 0; ms <= 2000; ms += 10 {
				rtt := minRTT + tc.queued
				if ms == 0 {
					rtt = minRTT
				}
				e.AddBytes(at(float64(ms)), uint64(total))
				e.AddRTT(e.Path(), at(float64(ms)), rtt)
				r := float64(rate)
				if ms >= slowFromMs {
					r = tc.later
				}
				total += r / 100
			}
			window, ok := e.DrainableWindow(at(2000), lead)
			require.True(t, ok)
			if tc.window == 0 {
				// The last round, a smoothed RTT long, began before
				// the fall: its rate lies between the two.
				round, ok := e.LastRound(at(2000))
				require.True(t, ok)
				rounds := float64(round.Flight) / (minRTT + tc.queued).Seconds()
				require.Greater(t, rounds, rate/3*1.1, "the last round saw the rate before the fall")
				tc.window = rounds*lead.Seconds() + sub6Buffer
			}
			assert.InDelta(t, tc.window, float64(window), tc.window*0.03)
		})
	}
}

func TestDrainableWindowNeedsAnEstimate(t *testing.T) {
	e := newEstimator(t, nil)
	e.SetServing(mmA, at(0))
	_, ok := e.DrainableWindow(at(0), 146*time.Millisecond)
	assert.False(t, ok, "no round on the cell")
	e.AddRTT(e.Path(), at(0), 70*time.Millisecond)
	for ms := 0; ms <= 300; ms += 10 {
		e.AddBytes(at(float64(ms)), uint64(ms)*10_000)
	}
	_, ok = e.DrainableWindow(at(300), 146*time.Millisecond)
	require.True(t, ok)
	_, ok = e.DrainableWindow(at(300).Add(DefaultConfig().BandwidthMaxAge+time.Second), 146*time.Millisecond)
	assert.False(t, ok, "an estimate too old")
}

// TestRoundsLongerThanTheMaxAgeStayFresh: a round lasts a smoothed RTT,
// so under a queue of more than BandwidthMaxAge the estimate must stay
// valid until the next round can close, or the hold lets go of the
// senders in between; once the byte feed stops it expires.
func TestRoundsLongerThanTheMaxAgeStayFresh(t *testing.T) {
	const rtt = 1500 * time.Millisecond
	e := newEstimator(t, nil)
	e.SetServing(mmA, at(0))
	var firstOK float64
	for ms := 0; ms <= 6000; ms += 10 {
		if ms%100 == 0 {
			e.AddRTT(e.Path(), at(float64(ms)), rtt)
		}
		e.AddBytes(at(float64(ms)), uint64(ms)*660)
		_, ok := e.BandwidthClamp(at(float64(ms)))
		if firstOK == 0 && ok {
			firstOK = float64(ms)
		}
		if firstOK > 0 {
			require.True(t, ok, "stale at %d ms", ms)
			_, ok = e.DrainableWindow(at(float64(ms)), 146*time.Millisecond)
			require.True(t, ok, "drainable window stale at %d ms", ms)
		}
	}
	require.Positive(t, firstOK)
	_, ok := e.BandwidthClamp(at(6000).Add(rtt + DefaultConfig().BandwidthMaxAge + 10*time.Millisecond))
	assert.False(t, ok, "no byte sample for a round and the max age")
}
