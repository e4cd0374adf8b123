package rtprio

import (
	"context"
	"time"

	"golang.org/x/sys/unix"
)

// Mono is CLOCK_MONOTONIC in nanoseconds: the clock clock_nanosleep
// sleeps on. Real-time loops sleep with it rather than with Go timers,
// which have about 1 ms resolution and wake a locked goroutine only
// through the Go scheduler.
type Mono int64

// Now reads the monotonic clock.
func Now() Mono {
	var ts unix.Timespec
	// CLOCK_MONOTONIC cannot fail with a valid pointer.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return Mono(ts.Nano())
}

// Sub is the time from start to m.
func (m Mono) Sub(start Mono) time.Duration { return time.Duration(m - start) }

// Add is m plus d.
func (m Mono) Add(d time.Duration) Mono { return m + Mono(d) }

// maxSleep bounds one sleep so cancellation is noticed.
const maxSleep = 50 * time.Millisecond

// SleepUntil blocks the calling thread until deadline or until ctx ends.
func SleepUntil(ctx context.Context, deadline Mono) {
	for ctx.Err() == nil {
		t := Now()
		if t >= deadline {
			return
		}
		target := min(deadline, t.Add(maxSleep))
		ts := unix.NsecToTimespec(int64(target))
		// EINTR just loops.
		_ = unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil)
	}
}
