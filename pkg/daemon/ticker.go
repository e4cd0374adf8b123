package daemon

import "time"

// alignedTicker fires at the multiples of its interval (counted from the
// zero time), not at multiples after its start. The loop and the sampler
// each keep one; on the same interval they fire at the same instants, so
// the runtime wakes up once for both instead of once for each, which is
// most of what an idle daemon costs.
type alignedTicker struct {
	timer    *time.Timer
	interval time.Duration
	// C receives the time of each tick; Rearm must follow each receive.
	C <-chan time.Time
}

func newAlignedTicker(interval time.Duration) *alignedTicker {
	t := &alignedTicker{timer: time.NewTimer(untilAlignedTick(time.Now(), interval)), interval: interval}
	t.C = t.timer.C
	return t
}

// untilAlignedTick is the time from now to the next multiple of interval.
func untilAlignedTick(now time.Time, interval time.Duration) time.Duration {
	return now.Truncate(interval).Add(interval).Sub(now)
}

// Rearm schedules the next tick.
func (t *alignedTicker) Rearm() { t.timer.Reset(untilAlignedTick(time.Now(), t.interval)) }

// Reset changes the interval and schedules the next tick on it.
func (t *alignedTicker) Reset(interval time.Duration) {
	t.interval = interval
	t.Rearm()
}

// Stop stops the ticker; no tick follows.
func (t *alignedTicker) Stop() { t.timer.Stop() }
