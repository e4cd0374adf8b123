package datapath

import (
	"time"

	"golang.org/x/sys/unix"
)

// The BPF programs time everything with bpf_ktime_get_ns (CLOCK_MONOTONIC),
// while the API speaks wall-clock time.Time. These two functions are the only
// conversion between them; they anchor on a fresh reading of both clocks so
// wall-clock steps (NTP, manual changes) never skew a deadline for long.

func monotonicNow() uint64 {
	var ts unix.Timespec
	// CLOCK_MONOTONIC cannot fail on Linux with a valid pointer.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// toMonotonic converts a wall-clock instant to CLOCK_MONOTONIC ns. Instants
// before boot map to 0.
func toMonotonic(t time.Time) uint64 {
	now := monotonicNow()
	delta := time.Until(t)
	if delta < 0 && uint64(-delta) > now {
		return 0
	}
	return uint64(int64(now) + int64(delta))
}

// fromMonotonic converts CLOCK_MONOTONIC ns to a wall-clock instant.
func fromMonotonic(ns uint64) time.Time { return newClockAnchor().wall(ns) }

// clockAnchor is one reading of both clocks. Conversions of many values
// read at once (a flow table snapshot) share one: reading CLOCK_MONOTONIC
// is a system call, which would otherwise dominate the snapshot.
type clockAnchor struct {
	monotonic uint64
	now       time.Time
}

func newClockAnchor() clockAnchor {
	return clockAnchor{monotonic: monotonicNow(), now: time.Now()}
}

// wall converts CLOCK_MONOTONIC ns to a wall-clock instant.
func (a clockAnchor) wall(ns uint64) time.Time {
	return a.now.Add(time.Duration(int64(ns) - int64(a.monotonic)))
}
