// Package emu is the user-space 5G link emulator of the testbed: per-cell
// capacity over time, droptail cell buffers in bytes, one-way delays,
// slot-based delivery in bursts, handovers (with the source cell's context
// release and target buffer overflow), radio link failures, and the diag
// events a modem would report about all of it.
package emu

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MahimahiOpportunityBytes is what one Mahimahi delivery opportunity
// carries, in the IP bytes the link charges packets (Packet.Size). A trace
// line lets Mahimahi's link shell deliver one packet of up to 1504 bytes
// as it counts them, a 4-byte TUN header and an MTU-sized IP packet: one
// 1500-byte IP packet per line.
const MahimahiOpportunityBytes = 1500

// Capacity is a cell's downlink capacity over time: a piecewise-constant
// rate that repeats with its period (traces loop, as Mahimahi's do).
type Capacity struct {
	starts []time.Duration // segment start offsets, starts[0] == 0
	rates  []float64       // bytes per second in each segment
	cum    []float64       // bytes delivered before each segment
	period time.Duration
	total  float64 // bytes in one period
}

// Segment is one constant-rate stretch of a synthetic capacity profile.
type Segment struct {
	Duration      time.Duration
	BitsPerSecond float64
}

// NewCapacity builds a capacity from consecutive constant-rate segments.
func NewCapacity(segments []Segment) (*Capacity, error) {
	if len(segments) == 0 {
		return nil, errors.New("capacity needs at least one segment")
	}
	c := &Capacity{}
	var at time.Duration
	var bytes float64
	for i, s := range segments {
		if s.Duration <= 0 {
			return nil, fmt.Errorf("segment %d: duration %v is not positive", i, s.Duration)
		}
		if s.BitsPerSecond < 0 || math.IsNaN(s.BitsPerSecond) || math.IsInf(s.BitsPerSecond, 0) {
			return nil, fmt.Errorf("segment %d: rate %v is not a finite non-negative number", i, s.BitsPerSecond)
		}
		rate := s.BitsPerSecond / 8
		if n := len(c.rates); n > 0 && c.rates[n-1] == rate {
			at += s.Duration
			bytes += rate * s.Duration.Seconds()
			continue
		}
		c.starts = append(c.starts, at)
		c.rates = append(c.rates, rate)
		c.cum = append(c.cum, bytes)
		at += s.Duration
		bytes += rate * s.Duration.Seconds()
	}
	c.period = at
	c.total = bytes
	return c, nil
}

// ConstantCapacity is a capacity that never changes.
func ConstantCapacity(bitsPerSecond float64) (*Capacity, error) {
	return NewCapacity([]Segment{{Duration: time.Second, BitsPerSecond: bitsPerSecond}})
}

// ParseMahimahi reads a Mahimahi trace: one millisecond timestamp per line,
// each line one delivery opportunity for one 1500-byte IP packet,
// non-decreasing; the trace loops with a period equal to its last
// timestamp.
func ParseMahimahi(r io.Reader) (*Capacity, error) {
	perMs := map[int64]int{}
	var last int64 = -1
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		ms, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("mahimahi line %d: %q is not an integer millisecond", line, text)
		}
		if ms < 0 || ms < last {
			return nil, fmt.Errorf("mahimahi line %d: timestamp %d goes backwards (previous %d)", line, ms, last)
		}
		last = ms
		perMs[ms]++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mahimahi trace: %w", err)
	}
	if last <= 0 {
		return nil, errors.New("mahimahi trace has no positive timestamp")
	}
	// The opportunity at the period itself belongs to millisecond 0 of the
	// next loop.
	perMs[0] += perMs[last]
	delete(perMs, last)
	segments := make([]Segment, 0, last)
	for ms := int64(0); ms < last; ms++ {
		segments = append(segments, Segment{
			Duration:      time.Millisecond,
			BitsPerSecond: float64(perMs[ms]*MahimahiOpportunityBytes) * 8 * 1000,
		})
	}
	return NewCapacity(segments)
}

// ParseLumos5G reads a per-second throughput trace ("time_s<TAB>Mbps" per
// line, times increasing by one second). Each value holds for the second
// that ends at its timestamp.
func ParseLumos5G(r io.Reader) (*Capacity, error) {
	var segments []Segment
	prev := math.Inf(-1)
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("lumos5g line %d: want 2 fields, got %d", line, len(fields))
		}
		at, err1 := strconv.ParseFloat(fields[0], 64)
		mbps, err2 := strconv.ParseFloat(fields[1], 64)
		if err1 != nil || err2 != nil || mbps < 0 || math.IsNaN(mbps) || math.IsInf(mbps, 0) {
			return nil, fmt.Errorf("lumos5g line %d: %q is not \"seconds Mbps\"", line, sc.Text())
		}
		if at <= prev {
			return nil, fmt.Errorf("lumos5g line %d: time %v does not increase", line, at)
		}
		prev = at
		segments = append(segments, Segment{Duration: time.Second, BitsPerSecond: mbps * 1e6})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading lumos5g trace: %w", err)
	}
	if len(segments) == 0 {
		return nil, errors.New("lumos5g trace is empty")
	}
	return NewCapacity(segments)
}

// Period is the length of one loop of the capacity.
func (c *Capacity) Period() time.Duration { return c.period }

// Scaled returns the capacity multiplied by f (the testbed's scale factor).
func (c *Capacity) Scaled(f float64) *Capacity {
	s := &Capacity{
		starts: c.starts,
		rates:  make([]float64, len(c.rates)),
		cum:    make([]float64, len(c.cum)),
		period: c.period,
		total:  c.total * f,
	}
	for i := range c.rates {
		s.rates[i] = c.rates[i] * f
		s.cum[i] = c.cum[i] * f
	}
	return s
}

// cumulative is the number of bytes the cell can deliver in [0, t).
func (c *Capacity) cumulative(t time.Duration) float64 {
	if t <= 0 {
		return 0
	}
	loops := t / c.period
	in := t - loops*c.period
	i := sort.Search(len(c.starts), func(i int) bool { return c.starts[i] > in }) - 1
	return float64(loops)*c.total + c.cum[i] + c.rates[i]*(in-c.starts[i]).Seconds()
}

// Bytes is the number of bytes the cell can deliver in [from, to).
func (c *Capacity) Bytes(from, to time.Duration) float64 {
	if to <= from {
		return 0
	}
	return c.cumulative(to) - c.cumulative(from)
}

// MeanBitsPerSecond is the average capacity over [from, to).
func (c *Capacity) MeanBitsPerSecond(from, to time.Duration) float64 {
	if to <= from {
		return 0
	}
	return c.Bytes(from, to) * 8 / (to - from).Seconds()
}
