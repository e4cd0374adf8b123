package datapath

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func clockMonotonic(t *testing.T) uint64 {
	t.Helper()
	var ts unix.Timespec
	require.NoError(t, unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts))
	return uint64(ts.Nano())
}

// TestClockBaseIsAReadingOfItsOwn: the pairing's CLOCK_MONOTONIC is one
// of its own readings, taken between two readings around it, and maps
// back from the Go instant it was paired with.
func TestClockBaseIsAReadingOfItsOwn(t *testing.T) {
	before := clockMonotonic(t)
	b := readClockBase()
	after := clockMonotonic(t)
	assert.GreaterOrEqual(t, b.ns, before)
	assert.LessOrEqual(t, b.ns, after)
	assert.False(t, b.at.IsZero())
}

// TestMonotonicNowFollowsTheKernelClock: the conversion agrees with
// CLOCK_MONOTONIC read around it, to within the pairing's error.
func TestMonotonicNowFollowsTheKernelClock(t *testing.T) {
	for range 100 {
		before := clockMonotonic(t)
		now := monotonicNow()
		after := clockMonotonic(t)
		slack := uint64(time.Millisecond)
		assert.GreaterOrEqual(t, now+slack, before)
		assert.LessOrEqual(t, now, after+slack)
	}
}
