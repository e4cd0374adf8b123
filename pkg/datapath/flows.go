package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Flow is the state of one TCP connection through the interface, seen from
// the host (Local) towards the Internet peer (Remote).
type Flow struct {
	Local, Remote netip.AddrPort
	// WScaleKnown says the handshake was seen, so the window can be clamped;
	// WScale is then the shift of the host's advertised window.
	WScaleKnown bool
	WScale      uint8
	// MSS announced in the host's SYN (the RFC default when absent).
	MSS uint16
	// RxBytes and RxPackets count downlink TCP payload and packets as the
	// hook sees them (a GRO aggregate counts once).
	RxBytes, RxPackets uint64
	// HighestRxSeq is the end of the highest segment received (valid when
	// HaveRxSeq).
	HighestRxSeq uint32
	HaveRxSeq    bool
	// RTT aggregates from TSval/TSecr matching; zero without samples.
	RTTLatest, RTTMin, SRTT time.Duration
	RTTSamples              uint64
	// FirstSeen and LastSeen may lag by one kernel tick: egress reads the
	// coarse clock.
	FirstSeen, LastSeen time.Time
	// Epoch is the suppression epoch the flow last saw, SnapshotRxSeq its
	// highest received sequence when entering it, Released whether its
	// own ACKs have ended suppression in that epoch.
	Epoch         uint32
	SnapshotRxSeq uint32
	Released      bool
}

// flowBatch is how many flows one batch lookup returns at most: a table of
// thousands of flows takes a few system calls, and the buffers (about
// 38 KB) stay cheap to allocate per read.
const flowBatch = 256

// eachFlow visits every flow with batch lookups: one system call per batch
// of flows instead of two per flow, so the cost follows the number of live
// flows (the kernel still steps over the empty hash buckets, about 0.1 ms
// for the default 65,536). visit returns true to delete the entry.
// eachFlow returns how many entries it deleted.
func (d *Datapath) eachFlow(visit func(*m2hoFlowKey, *m2hoFlowState) bool) (int, error) {
	return d.walkFlows(flowBatch, visit)
}

// walkFlows is eachFlow reading up to batch flows per system call.
func (d *Datapath) walkFlows(batch int, visit func(*m2hoFlowKey, *m2hoFlowState) bool) (int, error) {
	keys := make([]m2hoFlowKey, batch)
	states := make([]m2hoFlowState, batch)
	var (
		cursor ebpf.MapBatchCursor
		doomed []m2hoFlowKey
	)
	for {
		n, err := d.objs.Flows.BatchLookup(&cursor, keys, states, nil)
		if errors.Is(err, unix.ENOSPC) {
			// A hash bucket holds more flows than the buffers: the
			// cursor still points at it, so retry with room for it.
			keys = make([]m2hoFlowKey, 2*len(keys))
			states = make([]m2hoFlowState, 2*len(states))
			continue
		}
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, fmt.Errorf("datapath: read flows: %w", err)
		}
		for i := range n {
			if visit(&keys[i], &states[i]) {
				doomed = append(doomed, keys[i])
			}
		}
		if err != nil { // ErrKeyNotExist: the walk is complete
			break
		}
	}
	// Deleting during the walk would move the cursor's bucket; delete after.
	return d.deleteFlows(doomed)
}

// deleteFlows deletes keys and returns how many it deleted. A key already
// gone (a concurrent eviction) is skipped: a batch delete stops at the
// first missing key, so the rest is retried after it.
func (d *Datapath) deleteFlows(keys []m2hoFlowKey) (int, error) {
	deleted := 0
	for len(keys) > 0 {
		n, err := d.objs.Flows.BatchDelete(keys, nil)
		deleted += n
		if err == nil {
			break
		}
		if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return deleted, fmt.Errorf("datapath: delete flows: %w", err)
		}
		keys = keys[n+1:]
	}
	return deleted, nil
}

// Flows returns a snapshot of every tracked flow.
func (d *Datapath) Flows() ([]Flow, error) {
	var flows []Flow
	clock := newClockAnchor()
	_, err := d.eachFlow(func(k *m2hoFlowKey, s *m2hoFlowState) bool {
		flows = append(flows, flowFromMap(k, s, clock))
		return false
	})
	return flows, err
}

func flowFromMap(k *m2hoFlowKey, s *m2hoFlowState, clock clockAnchor) Flow {
	has := func(f m2hoFlowFlags) bool { return s.Flags&uint32(f) != 0 }
	return Flow{
		Local:         netip.AddrPortFrom(netip.AddrFrom16(k.LocalAddr).Unmap(), k.LocalPort),
		Remote:        netip.AddrPortFrom(netip.AddrFrom16(k.RemoteAddr).Unmap(), k.RemotePort),
		WScaleKnown:   has(m2hoFlowFlagsFLOW_WSCALE_KNOWN),
		WScale:        s.Wscale,
		MSS:           s.Mss,
		RxBytes:       s.RxBytes,
		RxPackets:     s.RxPackets,
		HighestRxSeq:  s.HighestRxSeq,
		HaveRxSeq:     has(m2hoFlowFlagsFLOW_RX_SEQ_VALID),
		RTTLatest:     time.Duration(s.RttLatestNs),
		RTTMin:        time.Duration(s.RttMinNs),
		SRTT:          time.Duration(s.SrttNs),
		RTTSamples:    s.RttSamples,
		FirstSeen:     clock.wall(s.FirstSeenNs),
		LastSeen:      clock.wall(s.LastSeenNs),
		Epoch:         s.Epoch,
		SnapshotRxSeq: s.SnapshotRxSeq,
		Released:      has(m2hoFlowFlagsFLOW_RELEASED),
	}
}

// EvictIdle deletes the flows without a packet for longer than idle and
// returns how many it deleted. The flows map is bounded: without eviction,
// it fills up and new flows go untracked (Counters.MapFull).
func (d *Datapath) EvictIdle(idle time.Duration) (int, error) {
	if idle < 0 {
		return 0, fmt.Errorf("datapath: negative idle time %v", idle)
	}
	now := monotonicNow()
	cutoff := uint64(0)
	if uint64(idle) < now {
		cutoff = now - uint64(idle)
	}
	return d.eachFlow(func(_ *m2hoFlowKey, s *m2hoFlowState) bool {
		return s.LastSeenNs < cutoff
	})
}
