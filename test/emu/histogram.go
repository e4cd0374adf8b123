package emu

import (
	"sync"
	"time"
)

// histogramBucket is the resolution of a Histogram.
const histogramBucket = time.Microsecond

// histogramBuckets covers 0 to 100 ms; later values land in the last one.
const histogramBuckets = 100_000

// Histogram collects durations (timing errors) at microsecond resolution
// for percentiles. Negative values count as zero. Safe for concurrent use.
type Histogram struct {
	mu     sync.Mutex
	counts []uint64
	n      uint64
	max    time.Duration
}

// Observe adds one value.
func (h *Histogram) Observe(d time.Duration) {
	d = max(d, 0)
	i := min(int(d/histogramBucket), histogramBuckets-1)
	h.mu.Lock()
	if h.counts == nil {
		h.counts = make([]uint64, histogramBuckets)
	}
	h.counts[i]++
	h.n++
	h.max = max(h.max, d)
	h.mu.Unlock()
}

// Count is the number of values observed.
func (h *Histogram) Count() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// Max is the largest value observed.
func (h *Histogram) Max() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.max
}

// Quantile returns the upper edge of the bucket holding quantile q (0..1).
func (h *Histogram) Quantile(q float64) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(i+1) * histogramBucket
		}
	}
	return h.max
}
