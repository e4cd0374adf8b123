package daemon

import (
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// alignedTicker fires at the multiples of its interval (counted from the
// zero time), not at multiples after its start. The loop and the sampler
// each keep one; on the same interval they fire at the same instants, so
// the runtime wakes up once for both instead of once for each, which is
// most of what an idle daemon costs.
//
// It is a timerfd in the runtime's network poller rather than a runtime
// timer, for what a runtime timer costs in wake-ups: the poller sleeps
// in whole milliseconds, rounded down, so that it wakes up before the
// timer is due and again a millisecond later, and the runtime's monitor
// thread, while the process idles, sleeps until the next runtime timer
// and wakes up twice with it. A timerfd wakes the poller once, when it
// expires, and the monitor not at all.
type alignedTicker struct {
	file *os.File
	raw  syscall.RawConn
	// C receives the time of each tick; a tick the receiver is not ready
	// for is dropped, as a time.Ticker does.
	C <-chan time.Time
}

func newAlignedTicker(interval time.Duration) (*alignedTicker, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("ticker: %w", err)
	}
	// A non-blocking descriptor joins the network poller.
	file := os.NewFile(uintptr(fd), "m2ho-ticker")
	raw, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("ticker: %w", err)
	}
	c := make(chan time.Time, 1)
	t := &alignedTicker{file: file, raw: raw, C: c}
	if err := t.Reset(interval); err != nil {
		file.Close()
		return nil, err
	}
	go t.run(c)
	return t, nil
}

// run sends a tick on c at each expiry until the ticker is stopped.
func (t *alignedTicker) run(c chan<- time.Time) {
	var expirations uint64
	// The previous read emptied the timerfd, so each wait for the next
	// expiry starts without a read that would only find it empty.
	waited := false
	// Bound once: a closure per read would be an allocation per tick.
	read := func(fd uintptr) bool {
		if !waited {
			waited = true
			return false
		}
		// As datagramReader: a read that cannot block need not tell
		// the runtime, whose monitor thread it would wake.
		_, _, errno := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&expirations)), unsafe.Sizeof(expirations))
		if errno == unix.EAGAIN {
			return false
		}
		waited = false
		return true
	}
	for {
		// Fails once the ticker is stopped.
		if err := t.raw.Read(read); err != nil {
			return
		}
		select {
		case c <- time.Now():
		default:
		}
	}
}

// untilAlignedTick is the time from now to the next multiple of interval.
func untilAlignedTick(now time.Time, interval time.Duration) time.Duration {
	return now.Truncate(interval).Add(interval).Sub(now)
}

// Reset changes the interval and schedules the next tick on it, at the
// next multiple of the wall clock. The monotonic clock paces the ticks
// from there, so that a step of the wall clock neither stops nor bunches
// them; after one, they keep their phase until the next Reset.
func (t *alignedTicker) Reset(interval time.Duration) error {
	spec := unix.ItimerSpec{
		Interval: unix.NsecToTimespec(interval.Nanoseconds()),
		Value:    unix.NsecToTimespec(untilAlignedTick(time.Now(), interval).Nanoseconds()),
	}
	var setErr error
	if err := t.raw.Control(func(fd uintptr) { setErr = unix.TimerfdSettime(int(fd), 0, &spec, nil) }); err != nil {
		return fmt.Errorf("ticker: %w", err)
	}
	if setErr != nil {
		return fmt.Errorf("ticker: set %v: %w", interval, setErr)
	}
	return nil
}

// Stop stops the ticker and ends its goroutine.
func (t *alignedTicker) Stop() { t.file.Close() }
