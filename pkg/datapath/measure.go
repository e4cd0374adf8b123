package datapath

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
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
	if err := d.maps.enter(); err != nil {
		return nil, err
	}
	defer d.maps.leave()
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

// burstFallbackDelay bounds how long a finished burst waits in the ring
// when nothing calls FlushBursts and no policy is in force. It exceeds the
// slowest pace a caller flushes at (a second on a silent link), so that a
// caller that flushes is never woken by it.
const burstFallbackDelay = 2 * time.Second

// pollOnly is a read deadline in the past: the ring reader then returns
// what the ring holds without waiting.
var pollOnly = time.Unix(1, 0)

// burstReader is a running ReadBursts.
type burstReader struct {
	// drainMu serialises drains, so that bursts reach fn in ring order
	// whichever goroutine drains. fn runs under it.
	drainMu sync.Mutex
	fn      func(Burst)
	log     *slog.Logger

	// ringMu guards the ring and closed, never across fn: closing must
	// not wait for a slow fn.
	ringMu sync.Mutex
	ring   *ringbuf.Reader
	closed bool
	record ringbuf.Record
	event  m2hoBurstEvent

	// wake is the ring buffer in Go's network poller: it turns readable
	// when the BPF code wakes the reader, and its read deadline paces the
	// fallback drain. Waiting there, unlike in the ring reader's own
	// epoll, costs no thread and no wake-up of its own.
	wake *os.File
}

// ReadBursts calls fn for every finished burst, in order, until ctx is
// done or the datapath is closed; it returns nil in both cases. A burst is
// finished when the first packet after the idle gap arrives. The BPF code
// wakes ReadBursts for each burst only while a policy is in force (or when
// the ring fills up); otherwise bursts wait in the ring until FlushBursts,
// at most burstFallbackDelay. One ReadBursts may run at a time.
func (d *Datapath) ReadBursts(ctx context.Context, fn func(Burst)) error {
	if !d.readMu.TryLock() {
		return errors.New("datapath: ReadBursts already running")
	}
	defer d.readMu.Unlock()

	r, err := d.openBurstReader(fn)
	if errors.Is(err, ErrClosed) {
		return nil
	}
	if err != nil {
		return err
	}
	stopped := make(chan struct{})
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			close(stopped)
			r.wake.Close()
			r.close()
		})
	}
	defer stop()
	stopOnCancel := context.AfterFunc(ctx, stop)
	defer stopOnCancel()
	unregister := d.onClose(stop)
	defer unregister()
	d.bursts.Store(r)
	defer d.bursts.Store(nil)

	raw, err := r.wake.SyscallConn()
	if err != nil {
		return fmt.Errorf("datapath: burst ring buffer wake-up: %w", err)
	}
	for {
		if err := r.drain(); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return nil
			}
			return err
		}
		err := r.wait(raw)
		select {
		case <-stopped:
			return nil
		default:
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("datapath: wait for bursts: %w", err)
		}
	}
}

// wait returns when the BPF code wakes the reader, at the fallback
// deadline, or once the reader is closed. Arming the wait clears any
// readiness the poller saw before it, and the BPF code wakes the reader
// once per burst, so a burst that finished between the last drain and the
// wait would lie in the ring until the fallback drain: the first call,
// made once the wait is armed, looks at the ring again. Readiness is edge
// triggered, and nothing is read from this descriptor.
func (r *burstReader) wait(raw syscall.RawConn) error {
	armed := false
	return raw.Read(func(uintptr) bool {
		if armed {
			return true
		}
		armed = true
		return r.pending()
	})
}

// pending says whether the ring holds a record to drain, or the reader is
// closed.
func (r *burstReader) pending() bool {
	r.ringMu.Lock()
	defer r.ringMu.Unlock()
	return r.closed || r.ring.AvailableBytes() > 0
}

// openBurstReader opens the ring buffer twice: a consumer that never
// blocks and a duplicate descriptor in Go's network poller to wait on.
func (d *Datapath) openBurstReader(fn func(Burst)) (*burstReader, error) {
	if err := d.maps.enter(); err != nil {
		return nil, err
	}
	defer d.maps.leave()
	ring, err := ringbuf.NewReader(d.objs.Bursts)
	if err != nil {
		return nil, fmt.Errorf("datapath: open burst ring buffer: %w", err)
	}
	ring.SetDeadline(pollOnly)
	fd, err := unix.FcntlInt(uintptr(d.objs.Bursts.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		ring.Close()
		return nil, fmt.Errorf("datapath: duplicate burst ring buffer: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		ring.Close()
		return nil, fmt.Errorf("datapath: burst ring buffer non-blocking: %w", err)
	}
	// A non-blocking descriptor joins the network poller.
	wake := os.NewFile(uintptr(fd), "m2ho-bursts")
	// The deadline fails unless the descriptor did join the poller.
	if err := wake.SetReadDeadline(time.Now().Add(burstFallbackDelay)); err != nil {
		wake.Close()
		ring.Close()
		return nil, fmt.Errorf("datapath: poll burst ring buffer: %w", err)
	}
	return &burstReader{ring: ring, fn: fn, log: d.log, wake: wake}, nil
}

// FlushBursts passes the bursts finished so far to the running ReadBursts'
// fn, on the calling goroutine, before it returns, and postpones
// ReadBursts' own fallback drain. Calling it at the pace bursts are needed
// replaces a wake-up per burst. Without a running ReadBursts it does
// nothing.
func (d *Datapath) FlushBursts() error {
	r := d.bursts.Load()
	if r == nil {
		return nil
	}
	if err := r.drain(); err != nil && !errors.Is(err, ringbuf.ErrClosed) {
		return err
	}
	return nil
}

// drain passes every burst in the ring to fn and pushes the fallback drain
// a full burstFallbackDelay away. It returns ringbuf.ErrClosed once the
// reader is closed.
func (r *burstReader) drain() error {
	r.drainMu.Lock()
	defer r.drainMu.Unlock()
	// Once closed, the descriptor refuses the deadline; next reports the
	// closing.
	_ = r.wake.SetReadDeadline(time.Now().Add(burstFallbackDelay))
	for {
		burst, ok, err := r.next()
		if err != nil || !ok {
			return err
		}
		r.fn(burst)
	}
}

// next takes the oldest burst out of the ring; ok is false when the ring
// is empty.
func (r *burstReader) next() (burst Burst, ok bool, err error) {
	r.ringMu.Lock()
	defer r.ringMu.Unlock()
	for {
		if r.closed {
			return Burst{}, false, ringbuf.ErrClosed
		}
		// Most flushes find the ring empty: two memory loads, where a
		// read costs a system call.
		if r.ring.AvailableBytes() == 0 {
			return Burst{}, false, nil
		}
		err := r.ring.ReadInto(&r.record)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return Burst{}, false, nil // only discarded records were left
		}
		if err != nil {
			return Burst{}, false, fmt.Errorf("datapath: read burst: %w", err)
		}
		if err := decodeBurst(r.record.RawSample, &r.event); err != nil {
			r.log.Warn("skipping malformed burst record", "error", err)
			continue
		}
		// One conversion, so that End-Start is exactly the kernel's
		// duration; a packet racing the burst swap on another CPU can
		// leave the end a hair before the start.
		r.event.EndNs = max(r.event.EndNs, r.event.StartNs)
		start := fromMonotonic(r.event.StartNs)
		return Burst{
			Start:   start,
			End:     start.Add(time.Duration(r.event.EndNs - r.event.StartNs)),
			Bytes:   r.event.Bytes,
			Packets: r.event.Packets,
		}, true, nil
	}
}

// close releases the ring; a drain in progress stops at its next burst.
func (r *burstReader) close() {
	r.ringMu.Lock()
	defer r.ringMu.Unlock()
	r.closed = true
	r.ring.Close()
}

// burstEventSize is the size of a burst record: four 64-bit fields.
const burstEventSize = 4 * 8

// decodeBurst reads a burst record field by field: a record arrives for
// every downlink burst, and reflection-based decoding cost more than the
// ring read itself.
func decodeBurst(raw []byte, event *m2hoBurstEvent) error {
	if len(raw) != burstEventSize {
		return fmt.Errorf("burst record of %d bytes, want %d", len(raw), burstEventSize)
	}
	e := binary.NativeEndian
	event.StartNs, event.EndNs = e.Uint64(raw[0:]), e.Uint64(raw[8:])
	event.Bytes, event.Packets = e.Uint64(raw[16:]), e.Uint64(raw[24:])
	return nil
}
