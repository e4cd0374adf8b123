package rtprio

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/nstest"
)

func TestLockMakesTheThreadRealtime(t *testing.T) {
	nstest.RequireRoot(t) // SCHED_FIFO
	type result struct {
		err    error
		policy uint32
		prio   uint32
	}
	done := make(chan result, 1)
	go func() {
		// The goroutine ends with its thread locked: the thread goes too.
		err := Lock()
		attr, gerr := unix.SchedGetAttr(0, 0)
		if gerr != nil {
			done <- result{err: gerr}
			return
		}
		done <- result{err: err, policy: attr.Policy, prio: attr.Priority}
	}()
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, uint32(unix.SCHED_FIFO), r.policy)
	assert.Equal(t, uint32(Priority), r.prio)
}

func TestSleepUntil(t *testing.T) {
	tests := []struct {
		name  string
		after time.Duration
	}{
		{name: "past deadline returns at once", after: -time.Millisecond},
		{name: "sub-millisecond", after: 300 * time.Microsecond},
		{name: "longer than one bounded sleep", after: 120 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := Now()
			SleepUntil(context.Background(), start.Add(tt.after))
			assert.GreaterOrEqual(t, Now().Sub(start), tt.after)
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := Now()
	SleepUntil(ctx, start.Add(time.Hour))
	assert.Less(t, Now().Sub(start), time.Second, "cancellation ends the sleep")
}
