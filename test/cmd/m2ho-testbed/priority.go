package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// testbedNice is the nice value of the testbed's threads. The emulator's
// packet path runs real-time (test/emu); the TCP endpoints, the samplers
// and the Go runtime's own threads run here, above ordinary load, so that
// a busy machine delays them less and the measurements stay about the
// emulated link rather than about the machine.
const testbedNice = -10

// raisePriority renices every thread of the process; threads the runtime
// creates later inherit the value from the thread that creates them.
func raisePriority() error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("listing threads: %w", err)
	}
	var errs []error
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, testbedNice); err != nil {
			errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
		}
	}
	return errors.Join(errs...)
}
