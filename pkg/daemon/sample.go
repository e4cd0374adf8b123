package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/m2ho/m2ho/pkg/datapath"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/metrics"
)

// rttSampleInterval paces the reads of the flow table for RTT samples. A
// read costs in proportion to the tracked flows (about 1 ms for a thousand)
// and is the costliest read of the daemon; ten samples a second per flow
// keep the smoothed and minimum RTTs of Eq. 2 current.
const rttSampleInterval = 100 * time.Millisecond

// flowKey identifies a flow between two walks.
type flowKey struct{ local, remote netip.AddrPort }

// rttSampler finds the RTT samples the datapath took since the previous
// walk of the flow table on the same path (serving cell, as numbered by
// Estimator.Path).
type rttSampler struct {
	seen, next map[flowKey]uint64
	// path is the path on which the counts in seen were taken.
	path uint64
}

func newRTTSampler() *rttSampler {
	return &rttSampler{seen: make(map[flowKey]uint64), next: make(map[flowKey]uint64)}
}

// observe passes to onRTT the latest RTT of every flow that measured one
// since the previous walk. Between two walks only the latest sample of a
// flow is kept, which is enough for a smoothed and a minimum RTT.
//
// A walk on a new path only takes the sample counts. The datapath keeps a
// flow's latest sample and a count, not when the sample was taken, so a
// sample counted since the last walk on the old path may have been
// measured before the handover; fed to the new cell's estimate, a faster
// old path (mmWave before sub-6) would become its RTT_min for 10 s and
// hold Eq. 2's window at a fraction of the new bandwidth-delay product.
// The daemon wakes the sampler when the path changes, so these counts are
// those at the change, give or take what the new cell delivered within a
// wake-up, usually nothing as the handover interrupts the downlink.
func (s *rttSampler) observe(path uint64, flows []datapath.Flow, onRTT func(time.Duration)) {
	clear(s.next)
	rebase := path != s.path
	for _, f := range flows {
		key := flowKey{f.Local, f.Remote}
		// A count below the last one is a new connection on the key of
		// an evicted flow, whose samples are new too.
		if !rebase && f.RTTLatest > 0 && f.RTTSamples != s.seen[key] {
			onRTT(f.RTTLatest)
		}
		s.next[key] = f.RTTSamples
	}
	s.seen, s.next = s.next, s.seen
	s.path = path
}

// walkRTTs reads the flow table and feeds the estimator the RTT samples
// taken since the previous walk, stamped now, and the bytes that arrived
// below their flows' highest sequence meanwhile. The path is read before
// the flows: if the serving cell changes during the walk, AddRTT drops
// what the walk read, which may be the old cell's.
func (d *Daemon) walkRTTs(now time.Time, rtts *rttSampler, losses *lossSampler) error {
	path := d.est.Path()
	flows, err := d.dp.Flows()
	if err != nil {
		return err
	}
	rtts.observe(path, flows, func(rtt time.Duration) { d.est.AddRTT(path, now, rtt) })
	d.est.AddRetransmitted(now, losses.observe(flows))
	return nil
}

// flowProgress is a flow's received payload and highest sequence at a
// walk.
type flowProgress struct {
	rxBytes uint64
	highest uint32
}

// lossSampler finds the payload that arrived below the highest sequence
// of its flow between two walks: payload received beyond what the
// sequence advanced, that is retransmissions filling holes (and data a
// handover reordered).
type lossSampler struct {
	last, next map[flowKey]flowProgress
}

func newLossSampler() *lossSampler {
	return &lossSampler{last: make(map[flowKey]flowProgress), next: make(map[flowKey]flowProgress)}
}

// observe returns the payload bytes the flows received below their
// highest sequence since the previous walk. A flow seen for the first
// time, or whose byte count went down (a new connection on the key of an
// evicted one), counts from this walk on.
func (s *lossSampler) observe(flows []datapath.Flow) uint64 {
	clear(s.next)
	var below uint64
	for _, f := range flows {
		if !f.HaveRxSeq {
			continue
		}
		key := flowKey{f.Local, f.Remote}
		now := flowProgress{rxBytes: f.RxBytes, highest: f.HighestRxSeq}
		if before, ok := s.last[key]; ok && now.rxBytes >= before.rxBytes {
			received := now.rxBytes - before.rxBytes
			if advanced := uint64(now.highest - before.highest); received > advanced {
				below += received - advanced
			}
		}
		s.next[key] = now
	}
	s.last, s.next = s.next, s.last
	return below
}

// sampleLoop feeds the estimator until ctx ends: the interface's received
// bytes and the finished downlink bursts every sampleInterval, RTT samples
// at most every rttSampleInterval while traffic flows (and at once when
// the serving cell changed), and it evicts idle flows every evictInterval.
// The byte count is the datapath's own ingress counter: one map lookup,
// right in whatever network namespace the daemon joined, where sysfs would
// still show the host's interfaces. It fails only if its ticker does.
func (d *Daemon) sampleLoop(ctx context.Context) error {
	rtts, losses := newRTTSampler(), newLossSampler()
	interval := pollInterval
	ticker, err := newAlignedTicker(interval)
	if err != nil {
		return err
	}
	defer ticker.Stop()
	var lastBytes, walkedBytes uint64
	lastChange, lastWalk, lastEvict := time.Now(), time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-d.sampleWake:
		}
		// The time of the read, not of the tick: a tick that waited
		// behind a wake-up would carry an earlier time than the sample
		// before it.
		now := time.Now()
		// The datapath wakes the burst reader only while a policy is in
		// force; otherwise finished bursts wait for this pace.
		if err := d.dp.FlushBursts(); err != nil {
			d.logger.Debug("reading bursts failed", "err", err)
		}
		rx, err := d.dp.IngressBytes()
		if err != nil {
			d.logger.Debug("reading the ingress byte count failed", "err", err)
			continue
		}
		d.est.AddBytes(now, rx)
		if rx != lastBytes {
			lastBytes, lastChange = rx, now
		}
		// A change of serving cell walks at once, whatever the pace, to
		// take the sample counts at the change (see rttSampler.observe).
		if d.est.Path() != rtts.path || (rx != walkedBytes && now.Sub(lastWalk) >= rttSampleInterval) {
			walkedBytes, lastWalk = rx, now
			if err := d.walkRTTs(now, rtts, losses); err != nil {
				d.logger.Debug("reading flows failed", "err", err)
			}
		}
		if evictDue(d.sampleFast.Load(), now.Sub(lastEvict)) {
			lastEvict = now
			if n, err := d.dp.EvictIdle(flowIdle, closedFlowIdle); err != nil {
				d.logger.Warn("evicting idle flows failed", "err", err)
			} else if n > 0 {
				d.logger.Debug("evicted idle flows", "count", n)
			}
		}
		if want := sampleInterval(d.sampleFast.Load(), now.Sub(lastChange) > quietAfter); want != interval {
			interval = want
			if err := ticker.Reset(interval); err != nil {
				return err
			}
		}
	}
}

// evictDue says whether the sampler evicts idle flows now, sinceLast after
// the last eviction: every evictInterval, but not while fine samples are
// needed (fast), since an eviction that deletes flows waits for the
// programs' runs under way (see datapath.EvictIdle), longer than a sample
// interval.
func evictDue(fast bool, sinceLast time.Duration) bool {
	return !fast && sinceLast >= evictInterval
}

// sampleInterval paces the byte sampling: pollInterval when fine samples
// are needed (see setSampleFast), idleInterval while traffic flows, so
// that a bandwidth estimate is ready when a handover is predicted, and
// quietInterval on a silent link.
func sampleInterval(fast, quiet bool) time.Duration {
	switch {
	case fast:
		return pollInterval
	case quiet:
		return quietInterval
	default:
		return idleInterval
	}
}

// estimatorBurst converts a datapath burst.
func estimatorBurst(b datapath.Burst) estimator.Burst {
	return estimator.Burst{Start: b.Start, End: b.End, Bytes: b.Bytes, Packets: b.Packets}
}

// datapathSnapshot reads the datapath for a scrape. It runs on the HTTP
// goroutine; the datapath's reads are safe for concurrent use.
func (d *Daemon) datapathSnapshot() (metrics.DatapathSnapshot, error) {
	c, err := d.dp.Counters()
	if err != nil {
		return metrics.DatapathSnapshot{}, fmt.Errorf("counters: %w", err)
	}
	flows, err := d.dp.Flows()
	if err != nil {
		return metrics.DatapathSnapshot{}, fmt.Errorf("flows: %w", err)
	}
	rtt, err := d.dp.RTTHistogram()
	if err != nil {
		return metrics.DatapathSnapshot{}, fmt.Errorf("rtt histogram: %w", err)
	}
	snap := metrics.DatapathSnapshot{
		Attached: d.dp.AttachMode() != datapath.AttachNone,
		Events:   make([]diag.Counter, 0, len(c)),
		Flows:    len(flows),
		RTT:      metrics.DurationHistogram{Upper: make([]time.Duration, len(rtt)), Counts: rtt},
	}
	for name, v := range c.All() {
		snap.Events = append(snap.Events, diag.Counter{Label: name, Value: v})
	}
	for i := range rtt {
		_, snap.RTT.Upper[i] = datapath.RTTBucketBounds(i)
	}
	return snap, nil
}
