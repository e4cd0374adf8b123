package datapath

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// RTTBuckets is the length of RTTHistogram's result (M2HO_RTT_BUCKETS).
const RTTBuckets = len(m2hoRttHistogram{}.Buckets)

// RTTBucketBounds returns the range of RTT histogram bucket i: samples with
// lower <= rtt < upper. Bucket i holds floor(log2(rtt in µs)) == i, so
// bucket 0 is [0, 2 µs), bucket i > 0 is [2^i µs, 2^(i+1) µs) and the last
// bucket is open-ended (upper is math.MaxInt64).
func RTTBucketBounds(i int) (lower, upper time.Duration) {
	if i > 0 {
		lower = time.Duration(1<<i) * time.Microsecond
	}
	if i >= RTTBuckets-1 {
		return lower, math.MaxInt64
	}
	return lower, time.Duration(1<<(i+1)) * time.Microsecond
}

// RTTHistogram returns the RTT sample counts per log2 bucket (see
// RTTBucketBounds), summed over CPUs, since load.
func (d *Datapath) RTTHistogram() ([]uint64, error) {
	var perCPU []m2hoRttHistogram
	if err := d.objs.RttHist.Lookup(&onlyEntry, &perCPU); err != nil {
		return nil, fmt.Errorf("datapath: read RTT histogram: %w", err)
	}
	hist := make([]uint64, RTTBuckets)
	for cpu := range perCPU {
		for i, n := range perCPU[cpu].Buckets {
			hist[i] += n
		}
	}
	return hist, nil
}

// Burst is one downlink packet train: packets separated by less than the
// burst gap. Bytes counts IP bytes of every protocol.
type Burst struct {
	Start, End     time.Time
	Bytes, Packets uint64
}

// ReadBursts calls fn for every finished burst until ctx is done or the
// datapath is closed; it returns nil in both cases. A burst is finished
// when the first packet after the idle gap arrives. One ReadBursts may run
// at a time.
func (d *Datapath) ReadBursts(ctx context.Context, fn func(Burst)) error {
	if !d.readMu.TryLock() {
		return errors.New("datapath: ReadBursts already running")
	}
	defer d.readMu.Unlock()

	reader, err := ringbuf.NewReader(d.objs.Bursts)
	if err != nil {
		return fmt.Errorf("datapath: open burst ring buffer: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { reader.Close() })
	defer stop()
	unregister := d.onClose(func() { reader.Close() })
	defer unregister()
	defer reader.Close()

	var record ringbuf.Record
	var event m2hoBurstEvent
	for {
		if err := reader.ReadInto(&record); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return nil
			}
			return fmt.Errorf("datapath: read burst: %w", err)
		}
		if err := decodeBurst(record.RawSample, &event); err != nil {
			d.log.Warn("skipping malformed burst record", "error", err)
			continue
		}
		// One conversion, so that End-Start is exactly the kernel's
		// duration; a packet racing the burst swap on another CPU can leave
		// the end a hair before the start.
		event.EndNs = max(event.EndNs, event.StartNs)
		start := fromMonotonic(event.StartNs)
		fn(Burst{
			Start:   start,
			End:     start.Add(time.Duration(event.EndNs - event.StartNs)),
			Bytes:   event.Bytes,
			Packets: event.Packets,
		})
	}
}

func decodeBurst(raw []byte, event *m2hoBurstEvent) error {
	if len(raw) != binary.Size(event) {
		return fmt.Errorf("burst record of %d bytes, want %d", len(raw), binary.Size(event))
	}
	_, err := binary.Decode(raw, binary.NativeEndian, event)
	return err
}
