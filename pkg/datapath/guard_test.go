package datapath

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMapGuard(t *testing.T) {
	var g mapGuard
	require.NoError(t, g.enter())
	require.NoError(t, g.enter(), "uses nest")
	closed := make(chan struct{})
	go func() {
		g.close()
		close(closed)
	}()
	require.Eventually(t, func() bool {
		err := g.enter()
		if err == nil {
			g.leave() // close has not begun yet
		}
		return errors.Is(err, ErrClosed)
	}, 5*time.Second, time.Millisecond, "no use starts once close has begun")
	g.leave()
	select {
	case <-closed:
		t.Fatal("close returned while a use was under way")
	case <-time.After(50 * time.Millisecond):
	}
	g.leave()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not return once the uses ended")
	}
	assert.ErrorIs(t, g.enter(), ErrClosed)
}

// TestMethodsDuringClose calls the methods that use the maps while the
// datapath closes: each call succeeds or returns ErrClosed, none touches
// freed maps (the race detector watches the memory-mapped flow table),
// and every call after Close returns ErrClosed.
func TestMethodsDuringClose(t *testing.T) {
	const callers = 6
	for range 20 {
		d := loadDetached(t, true, 1024)
		keys, states := syntheticFlows(500)
		insertFlows(t, d, keys, states)
		calls := []func() error{
			func() error { _, err := d.Flows(); return err },
			func() error { _, err := d.Counters(); return err },
			func() error { _, err := d.RTTHistogram(); return err },
			func() error { _, err := d.EvictIdle(time.Hour, time.Hour); return err },
			func() error { _, err := d.SuppressionPending(); return err },
			func() error { return d.SetClamp(1<<16, time.Now().Add(time.Minute)) },
		}
		require.Len(t, calls, callers)
		errs := make(chan error, callers)
		var started, wg sync.WaitGroup
		started.Add(callers)
		for _, call := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				started.Done()
				for {
					if err := call(); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		started.Wait()
		require.NoError(t, d.Close())
		wg.Wait()
		close(errs)
		for err := range errs {
			assert.ErrorIs(t, err, ErrClosed)
		}
		for _, call := range calls {
			assert.ErrorIs(t, call(), ErrClosed)
		}
		assert.NoError(t, d.ReadBursts(context.Background(), func(Burst) {}), "ReadBursts returns at once")
	}
}
