package daemon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
// different times on one interval tick at the same instants.
func TestAlignedTickersFireTogether(t *testing.T) {
	// idleInterval rather than pollInterval: the margin for a late
	// wake-up on a busy machine is the whole interval.
	first := newAlignedTicker(idleInterval)
	defer first.Stop()
	// The second starts a third into an interval of the first.
	<-first.C
	first.Rearm()
	time.Sleep(idleInterval / 3)
	second := newAlignedTicker(idleInterval)
	defer second.Stop()
	for range 2 {
		a, b := <-first.C, <-second.C
		first.Rearm()
		second.Rearm()
		assert.Equal(t, a.Truncate(idleInterval), b.Truncate(idleInterval), "ticks at %v and %v", a, b)
	}
}
