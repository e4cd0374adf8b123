// Package rtprio gives the testbed's time-critical goroutines (the
// emulator's packet path, the measurement samplers) real-time threads, so
// that other load on the machine does not delay them.
package rtprio

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Priority is the SCHED_FIFO priority used: above every normal task, low
// among real-time ones. The kernel's real-time throttling still leaves
// other tasks their share if a real-time thread overloads.
const Priority = 10

// Lock pins the calling goroutine to its thread and makes the thread
// real-time. The goroutine must keep the thread locked until it exits, so
// that the runtime discards the thread rather than reuse it with the raised
// priority. Without the privilege to do so the thread stays normal and the
// returned error says why.
func Lock() error {
	runtime.LockOSThread()
	attr := unix.SchedAttr{
		Size:     unix.SizeofSchedAttr,
		Policy:   unix.SCHED_FIFO,
		Priority: Priority,
	}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return fmt.Errorf("SCHED_FIFO: %w", err)
	}
	return nil
}
