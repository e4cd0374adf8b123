package emu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/m2ho/m2ho/test/scenario"
)

// LoadTraceDir reads every capacity trace in dir, Lumos5G (two columns:
// seconds, Mbit/s) or Mahimahi (one column: millisecond delivery
// opportunities), and returns each as its mean rate per second, for the
// scenario generator to cut cells' capacities from. Hidden files and
// files that are neither format are skipped and named in the error only
// when no trace is left.
func LoadTraceDir(dir string) ([]scenario.Trace, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("trace folder: %w", err)
	}
	var traces []scenario.Trace
	var skipped []string
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		c, format, err := parseAnyTrace(path)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s (%v)", e.Name(), err))
			continue
		}
		seconds := int(c.Period() / time.Second)
		if seconds < 1 {
			skipped = append(skipped, e.Name()+" (shorter than a second)")
			continue
		}
		t := scenario.Trace{Name: e.Name(), Path: path, Format: format, Mbps: make([]float64, seconds)}
		for i := range seconds {
			from := time.Duration(i) * time.Second
			t.Mbps[i] = c.MeanBitsPerSecond(from, from+time.Second) / 1e6
		}
		traces = append(traces, t)
	}
	if len(traces) == 0 {
		if len(skipped) > 0 {
			return nil, fmt.Errorf("no Lumos5G or Mahimahi trace in %s: %s", dir, strings.Join(skipped, "; "))
		}
		return nil, fmt.Errorf("no trace in %s", dir)
	}
	sort.Slice(traces, func(i, j int) bool { return traces[i].Name < traces[j].Name })
	return traces, nil
}

// parseAnyTrace reads a trace as Lumos5G when its first line has two
// fields, as Mahimahi when it has one.
func parseAnyTrace(path string) (*Capacity, string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	first := ""
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.TrimSpace(line) != "" {
			first = line
			break
		}
	}
	switch len(strings.Fields(first)) {
	case 2:
		c, err := ParseLumos5G(strings.NewReader(string(raw)))
		return c, scenario.TraceLumos5G, err
	case 1:
		c, err := ParseMahimahi(strings.NewReader(string(raw)))
		return c, scenario.TraceMahimahi, err
	}
	return nil, "", errors.New("neither Lumos5G (seconds, Mbit/s) nor Mahimahi (milliseconds)")
}
