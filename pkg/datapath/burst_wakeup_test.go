package datapath

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startReadBursts runs ReadBursts until the test ends and returns the
// channel it delivers to, once the reader is in place for FlushBursts.
func startReadBursts(t *testing.T, d *Datapath, capacity int) <-chan Burst {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan Burst, capacity)
	done := make(chan error, 1)
	go func() { done <- d.ReadBursts(ctx, func(b Burst) { got <- b }) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	require.Eventually(t, func() bool { return d.bursts.Load() != nil }, 5*time.Second, time.Millisecond,
		"ReadBursts did not start")
	return got
}

// TestBurstWakeup checks when a finished burst reaches ReadBursts: at once
// while a policy is in force (Smoothing waits for the end of the first
// burst), otherwise at the next FlushBursts and not before.
func TestBurstWakeup(t *testing.T) {
	// wide enough that scheduling stalls do not split the test's burst
	const gap = 50 * time.Millisecond
	// well below burstFallbackDelay, so that only a wake-up by the BPF
	// code delivers the burst within it
	const promptly = burstFallbackDelay / 4
	tests := []struct {
		name   string
		policy func(*Datapath) error
		woken  bool
	}{
		{"no policy waits for a flush", func(*Datapath) error { return nil }, false},
		{"clamp in force wakes the reader", func(d *Datapath) error {
			return d.SetClamp(64<<10, time.Now().Add(time.Minute))
		}, true},
		{"freeze in force wakes the reader", func(d *Datapath) error {
			return d.SetFreeze(time.Now().Add(time.Minute))
		}, true},
		{"suppression in force wakes the reader", func(d *Datapath) error {
			_, err := d.StartSuppression(time.Now().Add(time.Minute))
			return err
		}, true},
		{"cleared clamp waits for a flush", func(d *Datapath) error {
			if err := d.SetClamp(64<<10, time.Now().Add(time.Minute)); err != nil {
				return err
			}
			return d.ClearClamp()
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := loadDetachedWithGap(t, true, 0, gap)
			require.NoError(t, tc.policy(d))
			got := startReadBursts(t, d, 4)
			frame, _ := peerData(freshPorts(segment{}), 0, 1000).build(t)
			d.ingress(t, frame)
			d.ingress(t, frame)
			time.Sleep(2 * gap)
			d.ingress(t, frame) // closes the first burst

			select {
			case b := <-got:
				assert.True(t, tc.woken, "burst delivered without a flush")
				assert.Equal(t, uint64(2), b.Packets)
			case <-time.After(promptly):
				assert.False(t, tc.woken, "no wake-up for the burst")
				require.NoError(t, d.FlushBursts())
				// FlushBursts delivers on the calling goroutine before
				// it returns.
				select {
				case b := <-got:
					assert.Equal(t, uint64(2), b.Packets)
				default:
					t.Fatal("FlushBursts did not deliver the burst")
				}
			}
		})
	}
}

// TestBurstWakeupBeforeWait checks that a wake-up the poller saw while the
// reader was still draining is not lost: arming the wait clears it, so the
// wait must find the burst in the ring rather than sleep until the
// fallback drain.
func TestBurstWakeupBeforeWait(t *testing.T) {
	const gap = 50 * time.Millisecond
	d := loadDetachedWithGap(t, true, 0, gap)
	require.NoError(t, d.SetClamp(64<<10, time.Now().Add(time.Minute)))
	r, err := d.openBurstReader(func(Burst) {})
	require.NoError(t, err)
	t.Cleanup(func() {
		r.wake.Close()
		r.close()
	})
	raw, err := r.wake.SyscallConn()
	require.NoError(t, err)
	// a fallback drain far beyond the test's patience
	require.NoError(t, r.wake.SetReadDeadline(time.Now().Add(time.Hour)))

	frame, _ := peerData(freshPorts(segment{}), 0, 1000).build(t)
	d.ingress(t, frame)
	d.ingress(t, frame)
	time.Sleep(2 * gap)
	d.ingress(t, frame) // closes the first burst and wakes the reader
	// While this goroutine sleeps, the idle scheduler polls and records
	// the wake-up, as it would while the reader was busy draining.
	time.Sleep(50 * time.Millisecond)

	waited := make(chan error, 1)
	go func() { waited <- r.wait(raw) }()
	select {
	case err := <-waited:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		r.wake.Close() // ends the wait
		t.Fatal("the wake-up of a burst in the ring was lost: the wait sleeps until the fallback drain")
	}
	burst, ok, err := r.next()
	require.NoError(t, err)
	require.True(t, ok, "the wait returned, but the ring is empty")
	assert.Equal(t, uint64(2), burst.Packets)
}

// TestBurstRingFillWakes checks that, with no policy and no flush, a ring
// filling up wakes the reader, and that every burst arrives, in order.
func TestBurstRingFillWakes(t *testing.T) {
	// every test run of the program is more than a microsecond after the
	// previous one, so each packet closes a burst
	d := loadDetachedWithGap(t, true, 0, time.Microsecond)
	// A record is an 8-byte header and the event; the BPF code wakes the
	// reader past a quarter of the ring (M2HO_BURST_WAKEUP_BYTES).
	recordBytes := 8 + binary.Size(m2hoBurstEvent{})
	wakeupRecords := int(d.objs.Bursts.MaxEntries()) / 4 / recordBytes
	bursts := 2 * wakeupRecords
	got := startReadBursts(t, d, bursts)
	// Bursts microseconds apart are too close for their times to show the
	// order (each conversion from the kernel clock jitters by as much), so
	// packet sizes cycle through a prime count of lengths instead.
	s := freshPorts(segment{})
	var frames [][]byte
	for _, length := range []int{100, 200, 300, 400, 500, 600, 700} {
		frame, _ := peerData(s, 0, length).build(t)
		frames = append(frames, frame)
	}
	for i := range bursts + 1 {
		d.ingress(t, frames[i%len(frames)])
	}

	flushed := false
	for received := 0; received < bursts; {
		select {
		case b := <-got:
			assert.Equal(t, uint64(1), b.Packets, "burst %d", received)
			assert.Equal(t, uint64(len(frames[received%len(frames)])), b.Bytes, "burst %d out of order", received)
			received++
		case <-time.After(burstFallbackDelay / 2):
			// the bursts past the last wake-up wait for a flush
			require.False(t, flushed, "FlushBursts left bursts in the ring")
			require.Greater(t, received, wakeupRecords, "reader not woken by a filling ring")
			require.NoError(t, d.FlushBursts())
			flushed = true
		}
	}
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(bursts), c[m2hoCounterIdCNT_BURSTS])
	assert.Zero(t, c[m2hoCounterIdCNT_BURST_LOST])
}

// TestFlushBurstsWithoutReader checks that FlushBursts is a no-op while no
// ReadBursts runs.
func TestFlushBurstsWithoutReader(t *testing.T) {
	d := loadDetached(t, true, 0)
	assert.NoError(t, d.FlushBursts())
}

// TestFlushBurstsDuringClose checks that FlushBursts racing the end of
// ReadBursts, by cancellation or by Close, neither fails nor touches the
// released ring.
func TestFlushBurstsDuringClose(t *testing.T) {
	tests := []struct {
		name string
		stop func(d *Datapath, cancel context.CancelFunc) error
	}{
		{"context cancelled", func(_ *Datapath, cancel context.CancelFunc) error { cancel(); return nil }},
		{"datapath closed", func(d *Datapath, _ context.CancelFunc) error { return d.Close() }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := loadDetachedWithGap(t, true, 0, time.Microsecond)
			frame, _ := peerData(freshPorts(segment{}), 0, 100).build(t)
			for range 64 {
				d.ingress(t, frame)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- d.ReadBursts(ctx, func(Burst) {}) }()
			require.Eventually(t, func() bool { return d.bursts.Load() != nil }, 5*time.Second, time.Millisecond)

			flushErrs := make(chan error, 1)
			go func() {
				var err error
				for d.bursts.Load() != nil && err == nil {
					err = d.FlushBursts()
				}
				flushErrs <- err
			}()
			require.NoError(t, tc.stop(d, cancel))
			assert.NoError(t, <-done)
			assert.NoError(t, <-flushErrs)
			assert.NoError(t, d.FlushBursts())
		})
	}
}
