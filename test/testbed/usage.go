package testbed

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// DaemonUsage is what m2hod cost while a run's traffic flowed.
type DaemonUsage struct {
	CPUSeconds  float64 `json:"cpu_seconds"`
	WallSeconds float64 `json:"wall_seconds"`
	// CPUPercent is CPU time over wall time, in percent of one core.
	CPUPercent float64 `json:"cpu_percent"`
	// RSSBytes is the resident set at the end, PeakRSSBytes its high
	// water mark over the daemon's life.
	RSSBytes     uint64 `json:"rss_bytes"`
	PeakRSSBytes uint64 `json:"peak_rss_bytes"`
	// Error says why a figure is missing.
	Error string `json:"error,omitempty"`
}

// procSample is a process's CPU time at a wall-clock instant.
type procSample struct {
	at  time.Time
	cpu time.Duration
	err error
}

func (d *m2hod) sample() procSample {
	cpu, err := processCPU(d.cmd.Process.Pid)
	return procSample{at: time.Now(), cpu: cpu, err: err}
}

// usageSince is the daemon's cost from an earlier sample until now.
func (d *m2hod) usageSince(from procSample) *DaemonUsage {
	to := d.sample()
	u := &DaemonUsage{WallSeconds: to.at.Sub(from.at).Seconds()}
	if err := errors.Join(from.err, to.err); err != nil {
		u.Error = err.Error()
	} else {
		u.CPUSeconds = (to.cpu - from.cpu).Seconds()
		if u.WallSeconds > 0 {
			u.CPUPercent = 100 * u.CPUSeconds / u.WallSeconds
		}
	}
	rss, peak, err := processMemory(d.cmd.Process.Pid)
	if err != nil && u.Error == "" {
		u.Error = err.Error()
	}
	u.RSSBytes, u.PeakRSSBytes = rss, peak
	return u
}

// clockTick is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// processCPU is a process's user plus system time from /proc/PID/stat.
func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading process times: %w", err)
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start after the last ')'.
	end := bytes.LastIndexByte(raw, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc/%d/stat has no command name", pid)
	}
	fields := strings.Fields(string(raw[end+1:]))
	// utime and stime are fields 14 and 15 of the whole line, 12 and 13
	// counting from the state (field 3) as 1.
	const utime, stime = 11, 12
	if len(fields) <= stime {
		return 0, fmt.Errorf("/proc/%d/stat has %d fields after the name", pid, len(fields))
	}
	var ticks uint64
	for _, i := range []int{utime, stime} {
		v, err := strconv.ParseUint(fields[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat field %d: %w", pid, i+3, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * clockTick, nil
}

// processMemory is a process's resident set and its peak, from
// /proc/PID/status.
func processMemory(pid int) (rss, peak uint64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("reading process memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status %s: %w", pid, name, err)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	return rss, peak, sc.Err()
}
