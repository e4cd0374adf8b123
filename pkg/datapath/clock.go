package datapath

import (
	"time"

	"golang.org/x/sys/unix"
)

// The BPF programs time everything with bpf_ktime_get_ns (CLOCK_MONOTONIC),
// while the API speaks wall-clock time.Time. These functions are the only
// conversion between them. Each conversion reads the wall clock afresh, so
// wall-clock steps (NTP, manual changes) never skew a deadline for long.
//
// CLOCK_MONOTONIC is read through Go's own monotonic clock, which on Linux
// is CLOCK_MONOTONIC read through the vDSO: one system call at start pairs
// the two, and every later reading is an offset on time.Now. A system call
// per reading cost a third of the daemon's CPU during a download, as each
// one also wakes the Go runtime's monitor thread.

// clockBase is CLOCK_MONOTONIC at the instant at, whose monotonic reading
// is Go's.
var clockBase = readClockBase()

type monotonicBase struct {
	ns uint64
	at time.Time
}

// clockPairings is how many times readClockBase pairs the clocks.
const clockPairings = 16

// readClockBase pairs the clocks, placing the system call's reading
// midway between two reads of Go's clock: the pairing is off by half the
// call's duration at most, a microsecond, unless the thread was preempted
// during the call. It keeps the tightest of clockPairings pairings, as a
// single one taken on a loaded machine could place BPF's timestamps of a
// moment before ahead of this clock's now.
func readClockBase() monotonicBase {
	var best monotonicBase
	bestSpan := time.Duration(-1)
	for range clockPairings {
		before := time.Now()
		var ts unix.Timespec
		// CLOCK_MONOTONIC cannot fail on Linux with a valid pointer.
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		after := time.Now()
		if span := after.Sub(before); bestSpan < 0 || span < bestSpan {
			best, bestSpan = monotonicBase{ns: uint64(ts.Nano()), at: before.Add(span / 2)}, span
		}
	}
	return best
}

// monotonicAt is CLOCK_MONOTONIC at now, a time.Time with a monotonic
// reading (from time.Now).
func monotonicAt(now time.Time) uint64 {
	return uint64(int64(clockBase.ns) + int64(now.Sub(clockBase.at)))
}

func monotonicNow() uint64 { return monotonicAt(time.Now()) }

// toMonotonic converts a wall-clock instant to CLOCK_MONOTONIC ns. Instants
// before boot map to 0.
func toMonotonic(t time.Time) uint64 {
	wall := time.Now()
	now, delta := monotonicAt(wall), t.Sub(wall)
	if delta < 0 && uint64(-delta) > now {
		return 0
	}
	return uint64(int64(now) + int64(delta))
}

// fromMonotonic converts CLOCK_MONOTONIC ns to a wall-clock instant.
func fromMonotonic(ns uint64) time.Time { return newClockAnchor().wall(ns) }

// clockAnchor is one reading of both clocks, shared by the conversions of
// many values read at once (a flow table snapshot) so that they agree.
type clockAnchor struct {
	monotonic uint64
	now       time.Time
}

func newClockAnchor() clockAnchor {
	now := time.Now()
	return clockAnchor{monotonic: monotonicAt(now), now: now}
}

// wall converts CLOCK_MONOTONIC ns to a wall-clock instant.
func (a clockAnchor) wall(ns uint64) time.Time {
	return a.now.Add(time.Duration(int64(ns) - int64(a.monotonic)))
}
