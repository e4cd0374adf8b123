package daemon

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUntilAlignedTick(t *testing.T) {
	base := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		now      time.Time
		interval time.Duration
		want     time.Duration
	}{
		{"on a tick waits a full interval", base, idleInterval, idleInterval},
		{"just after a tick", base.Add(time.Nanosecond), idleInterval, idleInterval - time.Nanosecond},
		{"mid interval", base.Add(30 * time.Millisecond), idleInterval, 70 * time.Millisecond},
		{"just before a tick", base.Add(idleInterval - time.Nanosecond), idleInterval, time.Nanosecond},
		{"fine ticks fall on coarse ones", base.Add(95 * time.Millisecond), pollInterval, 5 * time.Millisecond},
		{"one-second ticks", base.Add(1500 * time.Millisecond), quietInterval, 500 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, untilAlignedTick(tc.now, tc.interval))
		})
	}
}

// TestAlignedTickersFireTogether checks that two tickers started at
// different times on one interval tick at the same instants, and keep
// ticking on another interval after a Reset.
func TestAlignedTickersFireTogether(t *testing.T) {
	// idleInterval rather than pollInterval: the margin for a late
	// wake-up on a busy machine is the whole interval.
	first, err := newAlignedTicker(idleInterval)
	require.NoError(t, err)
	defer first.Stop()
	// The second starts a third into an interval of the first.
	<-first.C
	time.Sleep(idleInterval / 3)
	second, err := newAlignedTicker(idleInterval)
	require.NoError(t, err)
	defer second.Stop()
	for range 2 {
		a, b := <-first.C, <-second.C
		assert.Equal(t, a.Truncate(idleInterval), b.Truncate(idleInterval), "ticks at %v and %v", a, b)
	}
	require.NoError(t, second.Reset(2*idleInterval))
	for range 2 {
		a, b := <-first.C, <-second.C
		for b.Sub(a) > idleInterval/2 {
			// first ticked once between b's ticks.
			a = <-first.C
		}
		assert.Equal(t, a.Truncate(2*idleInterval), b.Truncate(2*idleInterval), "ticks at %v and %v", a, b)
	}
}

// TestAlignedTickerStop: a stopped ticker ends its goroutine.
func TestAlignedTickerStop(t *testing.T) {
	before := runtime.NumGoroutine()
	ticker, err := newAlignedTicker(pollInterval)
	require.NoError(t, err)
	<-ticker.C
	ticker.Stop()
	// Polled here: assert.Eventually runs goroutines of its own.
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), before)
}
