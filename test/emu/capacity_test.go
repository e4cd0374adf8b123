package emu

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/shareddata"
	"github.com/m2ho/m2ho/test/scenario"
)

func TestParseMahimahi(t *testing.T) {
	tests := []struct {
		name    string
		trace   string
		wantErr string
		// bytes in [from, to)
		from, to  time.Duration
		wantBytes float64
		period    time.Duration
	}{
		{name: "one per ms is 12 Mbit/s", trace: "1\n2\n3\n4\n", from: 0, to: 4 * time.Millisecond, wantBytes: 4 * 1500, period: 4 * time.Millisecond},
		{name: "repeated ms", trace: "1\n1\n1\n2\n", from: time.Millisecond, to: 2 * time.Millisecond, wantBytes: 3 * 1500, period: 2 * time.Millisecond},
		{name: "loops", trace: "1\n2\n", from: 0, to: 10 * time.Millisecond, wantBytes: 10 * 1500, period: 2 * time.Millisecond},
		{name: "half a ms", trace: "1\n2\n", from: 0, to: 500 * time.Microsecond, wantBytes: 750, period: 2 * time.Millisecond},
		{name: "blank lines ignored", trace: "\n5\n\n10\n", from: 0, to: 10 * time.Millisecond, wantBytes: 2 * 1500, period: 10 * time.Millisecond},
		{name: "not a number", trace: "1\nx\n", wantErr: "line 2"},
		{name: "backwards", trace: "5\n3\n", wantErr: "backwards"},
		{name: "empty", trace: "", wantErr: "no positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseMahimahi(strings.NewReader(tt.trace))
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.InDelta(t, tt.wantBytes, c.Bytes(tt.from, tt.to), 1e-6)
			assert.Equal(t, tt.period, c.Period())
		})
	}
}

// A Mahimahi trace line is one delivery opportunity for one MTU-sized
// packet: a trace of one line per millisecond moves 1000 packets of 1500
// IP bytes a second through the link, as it does through mm-link.
func TestLinkMahimahiLineCarriesOnePacket(t *testing.T) {
	var trace strings.Builder
	for ms := 1; ms <= 1000; ms++ {
		fmt.Fprintln(&trace, ms)
	}
	path := filepath.Join(t.TempDir(), "one-per-ms.trace")
	require.NoError(t, os.WriteFile(path, []byte(trace.String()), 0o644))
	cells := twoCells(12, 4<<20, 0)
	cells[0].Capacity = scenario.CapacitySpec{Mahimahi: path}
	r := newLinkRun(t, &scenario.Scenario{Name: "mahimahi", Duration: 10 * time.Second, Cells: cells, InitialCell: "a"})
	// 1460 payload bytes without TCP options: 1500-byte IP packets.
	for i := range 2500 {
		frame := tcpFrame(t, uint32(i*1460), 1, 1460, false)
		size, _, tcp := ParseFrame(frame, true)
		require.Equal(t, 1500, size)
		r.link.Arrive(&Packet{Frame: frame, Size: size, TCP: tcp}, 0)
	}
	tests := []struct {
		until time.Duration
		want  int
	}{
		{until: time.Second, want: 1000},
		{until: 2 * time.Second, want: 2000},
	}
	for _, tt := range tests {
		r.link.Advance(tt.until)
		assert.Equal(t, tt.want, len(r.deliveries), "delivered by %v", tt.until)
	}
}

func TestParseLumos5G(t *testing.T) {
	tests := []struct {
		name     string
		trace    string
		wantErr  string
		from, to time.Duration
		wantMbps float64
	}{
		{name: "per second", trace: "1.0\t100.0\n2.0\t300.0\n", from: time.Second, to: 2 * time.Second, wantMbps: 300},
		{name: "mean over both", trace: "1.0\t100.0\n2.0\t300.0\n", from: 0, to: 2 * time.Second, wantMbps: 200},
		{name: "loops", trace: "1.0\t100.0\n2.0\t300.0\n", from: 2 * time.Second, to: 3 * time.Second, wantMbps: 100},
		{name: "three fields", trace: "1.0 2 3\n", wantErr: "want 2 fields"},
		{name: "time not increasing", trace: "2.0\t1\n1.0\t1\n", wantErr: "does not increase"},
		{name: "negative rate", trace: "1.0\t-5\n", wantErr: "not \"seconds Mbps\""},
		{name: "empty", trace: "\n", wantErr: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseLumos5G(strings.NewReader(tt.trace))
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.InDelta(t, tt.wantMbps*1e6, c.MeanBitsPerSecond(tt.from, tt.to), 1e-3)
		})
	}
}

func TestCapacityStepsAndScale(t *testing.T) {
	c, err := NewCapacity([]Segment{
		{Duration: time.Second, BitsPerSecond: 8e6},
		{Duration: time.Second, BitsPerSecond: 8e6}, // merged with the first
		{Duration: 2 * time.Second, BitsPerSecond: 0},
	})
	require.NoError(t, err)
	tests := []struct {
		name      string
		c         *Capacity
		from, to  time.Duration
		wantBytes float64
	}{
		{name: "first segment", c: c, from: 0, to: 2 * time.Second, wantBytes: 2e6},
		{name: "outage", c: c, from: 2 * time.Second, to: 4 * time.Second, wantBytes: 0},
		{name: "second loop", c: c, from: 4 * time.Second, to: 4500 * time.Millisecond, wantBytes: 5e5},
		{name: "scaled by a tenth", c: c.Scaled(0.1), from: 0, to: 8 * time.Second, wantBytes: 4e5},
		{name: "empty interval", c: c, from: time.Second, to: time.Second, wantBytes: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.InDelta(t, tt.wantBytes, tt.c.Bytes(tt.from, tt.to), 1e-6)
		})
	}
	_, err = NewCapacity(nil)
	assert.Error(t, err)
	_, err = NewCapacity([]Segment{{Duration: 0, BitsPerSecond: 1}})
	assert.Error(t, err)
}

// TestRealTraces parses the shared real traces, when present.
func TestRealTraces(t *testing.T) {
	data := shareddata.DataDir(t, "")
	tests := []struct {
		name    string
		path    string
		minMbps float64
		maxMbps float64
	}{
		{name: "mahimahi verizon lte", path: "traces/mahimahi-lte/Verizon-LTE-short.down", minMbps: 1, maxMbps: 100},
		{name: "lumos5g walking", path: "traces/lumos5g/5g_trace_100_walking", minMbps: 10, maxMbps: 3000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := os.Open(filepath.Join(data, tt.path))
			require.NoError(t, err)
			defer f.Close()
			var c *Capacity
			if strings.Contains(tt.path, "mahimahi") {
				c, err = ParseMahimahi(f)
			} else {
				c, err = ParseLumos5G(f)
			}
			require.NoError(t, err)
			mean := c.MeanBitsPerSecond(0, c.Period()) / 1e6
			assert.Greater(t, mean, tt.minMbps)
			assert.Less(t, mean, tt.maxMbps)
		})
	}
}

func TestLoadTraceDirReadsBothFormats(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	write("5g_trace_1_walking", "1.0\t800.0\n2.0\t600.0\n3.0\t0.0\n")
	var mahimahi strings.Builder
	for ms := 1; ms <= 2000; ms++ {
		fmt.Fprintf(&mahimahi, "%d\n", ms)
	}
	write("lte.down", mahimahi.String())
	write("notes.txt", "a b c\n")
	write(".hidden", "1.0\t5.0\n")
	traces, err := LoadTraceDir(dir)
	require.NoError(t, err)
	require.Len(t, traces, 2)
	assert.Equal(t, "5g_trace_1_walking", traces[0].Name)
	assert.Equal(t, scenario.TraceLumos5G, traces[0].Format)
	assert.InDeltaSlice(t, []float64{800, 600, 0}, traces[0].Mbps, 1e-6)
	assert.Equal(t, "lte.down", traces[1].Name)
	assert.Equal(t, scenario.TraceMahimahi, traces[1].Format)
	require.Len(t, traces[1].Mbps, 2)
	// one 1500-byte packet a millisecond
	assert.InDelta(t, 12, traces[1].Mbps[0], 1e-6)

	empty := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(empty, "junk"), []byte("x y z\n"), 0o644))
	_, err = LoadTraceDir(empty)
	assert.ErrorContains(t, err, "junk")
	_, err = LoadTraceDir(filepath.Join(empty, "missing"))
	assert.Error(t, err)
}

func TestLoadTraceDirOnTheSharedTraces(t *testing.T) {
	traces, err := LoadTraceDir(shareddata.DataDir(t, "traces/lumos5g"))
	require.NoError(t, err)
	assert.Len(t, traces, 60)
	for _, tr := range traces {
		assert.Equal(t, scenario.TraceLumos5G, tr.Format, tr.Name)
		assert.NotEmpty(t, tr.Mbps, tr.Name)
	}
}
