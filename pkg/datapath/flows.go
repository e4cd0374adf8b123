package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
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

// eachFlow visits every flow; visit returns true to delete the entry.
func (d *Datapath) eachFlow(visit func(*m2hoFlowKey, *m2hoFlowState) (bool, error)) error {
	var (
		key    m2hoFlowKey
		state  m2hoFlowState
		doomed []m2hoFlowKey
	)
	iter := d.objs.Flows.Iterate()
	for iter.Next(&key, &state) {
		remove, err := visit(&key, &state)
		if err != nil {
			return err
		}
		if remove {
			doomed = append(doomed, key)
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("datapath: iterate flows: %w", err)
	}
	// Deleting while iterating a hash map restarts the walk; delete after.
	for i := range doomed {
		if err := d.objs.Flows.Delete(&doomed[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("datapath: delete flow: %w", err)
		}
	}
	return nil
}

// Flows returns a snapshot of every tracked flow.
func (d *Datapath) Flows() ([]Flow, error) {
	var flows []Flow
	err := d.eachFlow(func(k *m2hoFlowKey, s *m2hoFlowState) (bool, error) {
		flows = append(flows, flowFromMap(k, s))
		return false, nil
	})
	return flows, err
}

func flowFromMap(k *m2hoFlowKey, s *m2hoFlowState) Flow {
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
		FirstSeen:     fromMonotonic(s.FirstSeenNs),
		LastSeen:      fromMonotonic(s.LastSeenNs),
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
	evicted := 0
	err := d.eachFlow(func(_ *m2hoFlowKey, s *m2hoFlowState) (bool, error) {
		if s.LastSeenNs < cutoff {
			evicted++
			return true, nil
		}
		return false, nil
	})
	return evicted, err
}
