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
	// FirstSeen and LastSeen may lag by up to two kernel ticks: egress
	// reads the coarse clock.
	FirstSeen, LastSeen time.Time
	// Epoch is the suppression epoch the flow last saw, SnapshotRxSeq its
	// highest received sequence when entering it, Released whether its
	// own ACKs have ended suppression in that epoch.
	Epoch         uint32
	SnapshotRxSeq uint32
	Released      bool
	// Closed says the connection ended: a RST either way, or the host
	// acknowledged the peer's FIN. EvictIdle keeps such flows for less
	// time, and SuppressionPending does not wait for them.
	Closed bool
}

// flowBatch is how many flows one batch lookup of the flow index returns at
// most: a table of thousands of flows takes a few system calls, and the
// buffers (about 11 KB) stay cheap to allocate per read.
const flowBatch = 256

// eachFlow visits every flow: batch lookups of the flow index (one system
// call per batch of flows, so the cost follows the number of live flows,
// plus the kernel's step over the empty hash buckets, about 0.1 ms for the
// default 65,536), and the entries read from the memory-mapped table.
// visit returns true to delete the flow. eachFlow returns the flows it
// deleted.
func (d *Datapath) eachFlow(visit func(*m2hoFlowKey, *m2hoFlowState) bool) ([]doomedFlow, error) {
	if err := d.maps.enter(); err != nil {
		return nil, err
	}
	defer d.maps.leave()
	return d.walkFlows(flowBatch, visit)
}

// walkFlows is eachFlow reading up to batch index entries per system call.
func (d *Datapath) walkFlows(batch int, visit func(*m2hoFlowKey, *m2hoFlowState) bool) ([]doomedFlow, error) {
	keys := make([]m2hoFlowKey, batch)
	slots := make([]uint32, batch)
	var (
		cursor ebpf.MapBatchCursor
		doomed []doomedFlow
		strays []indexEntry
		entry  m2hoFlowEntry
	)
	for {
		n, err := d.objs.FlowIndex.BatchLookup(&cursor, keys, slots, nil)
		if errors.Is(err, unix.ENOSPC) {
			// A hash bucket holds more flows than the buffers: the
			// cursor still points at it, so retry with room for it.
			keys = make([]m2hoFlowKey, 2*len(keys))
			slots = make([]uint32, 2*len(slots))
			continue
		}
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, fmt.Errorf("datapath: read flows: %w", err)
		}
		for i := range n {
			// A slot being created, or retired or reused since the
			// index was read, belongs to no listed flow; an entry
			// left behind by a process that died while deleting
			// its flow never will (see deleteFlows).
			if !d.table.live(slots[i], &keys[i], &entry) {
				strays = append(strays, indexEntry{key: keys[i], slot: slots[i]})
				continue
			}
			if visit(&keys[i], &entry.State) {
				doomed = append(doomed, doomedFlow{key: keys[i], slot: slots[i], state: entry.State})
			}
		}
		if err != nil { // ErrKeyNotExist: the walk is complete
			break
		}
	}
	// Deleting during the walk would move the cursor's bucket; delete after.
	return d.deleteFlows(doomed, strays)
}

// indexEntry is an entry of the flow index: a flow's key and its slot.
type indexEntry struct {
	key  m2hoFlowKey
	slot uint32
}

// doomedFlow is a flow to delete: its index key, its slot, and its state
// when it was chosen.
type doomedFlow struct {
	key   m2hoFlowKey
	slot  uint32
	state m2hoFlowState
}

// deleteFlows deletes flows and returns those it deleted. It retires a
// slot first, so that the packet path stops finding it, then removes the
// index entry. A packet of the flow in between finds no slot and an index
// entry naming a retired one: it goes untracked, and the next packet
// creates the flow afresh. Once every program run that may have found a
// deleted flow has ended, its slot is freed: a packet under way on another
// CPU would otherwise write into the next flow to take the slot. A flow
// deleted meanwhile, whose slot or index entry may already belong to a new
// flow, is left alone, and so is one that moved since it was chosen: a
// packet refreshed it (its last-seen time), or the host opened a new
// connection on its ports (its first-seen time).
//
// strays are index entries that named a slot not holding their flow when
// read. deleteFlows removes those that still do after the same wait: a
// creation under way, which enters its index entry before its slot's tag
// within one program run, has ended by then, so what is left is an entry
// whose deletion a process did not finish, and would otherwise keep its
// key's packets untracked for good.
func (d *Datapath) deleteFlows(flows []doomedFlow, strays []indexEntry) ([]doomedFlow, error) {
	if len(flows) == 0 && len(strays) == 0 {
		return nil, nil
	}
	// Deletions take turns, so that the checks below hold until the slot
	// is retired: the packet path never retires or takes a live slot.
	d.deleteMu.Lock()
	defer d.deleteMu.Unlock()
	deleted, err := d.retireFlows(flows)
	if len(deleted) == 0 && len(strays) == 0 {
		return nil, err
	}
	waitForProgramRuns()
	for _, f := range deleted {
		d.table.release(f.slot)
	}
	removed, strayErr := d.removeStrays(strays)
	if removed > 0 {
		d.log.Info("removed index entries of flows whose deletion a process left unfinished", "entries", removed)
	}
	return deleted, errors.Join(err, strayErr)
}

// retireFlows retires the slots of flows still as they were chosen and
// removes their index entries; it returns those it retired.
func (d *Datapath) retireFlows(flows []doomedFlow) ([]doomedFlow, error) {
	var entry m2hoFlowEntry
	var retired []doomedFlow
	for _, f := range flows {
		slot, indexed, err := d.indexedSlot(&f.key)
		if err != nil {
			return retired, err
		}
		if !indexed || slot != f.slot || !d.table.live(f.slot, &f.key, &entry) {
			continue
		}
		if entry.State.LastSeenNs != f.state.LastSeenNs || entry.State.FirstSeenNs != f.state.FirstSeenNs {
			continue
		}
		d.table.retire(f.slot)
		retired = append(retired, f)
		if err := d.objs.FlowIndex.Delete(&f.key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return retired, fmt.Errorf("datapath: delete flow: %w", err)
		}
	}
	return retired, nil
}

// removeStrays deletes the index entries of strays that still name the
// same slot, which still does not hold their flow, and returns how many
// it deleted. Only deleteFlows, which holds deleteMu, deletes index
// entries, and the packet path never replaces one: an entry found again
// is the one read before.
func (d *Datapath) removeStrays(strays []indexEntry) (int, error) {
	var entry m2hoFlowEntry
	removed := 0
	for _, s := range strays {
		slot, indexed, err := d.indexedSlot(&s.key)
		if err != nil {
			return removed, err
		}
		if !indexed || slot != s.slot || d.table.live(slot, &s.key, &entry) {
			continue
		}
		if err := d.objs.FlowIndex.Delete(&s.key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return removed, fmt.Errorf("datapath: delete stray flow index entry: %w", err)
		}
		removed++
	}
	return removed, nil
}

// indexedSlot returns the slot the flow index names for key; indexed is
// false when the index holds no entry for it.
func (d *Datapath) indexedSlot(key *m2hoFlowKey) (slot uint32, indexed bool, err error) {
	err = d.objs.FlowIndex.Lookup(key, &slot)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("datapath: look up flow: %w", err)
	}
	return slot, true, nil
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

// flowKeyOf is the key the programs give a flow: IPv4 addresses mapped
// into IPv6, as struct flow_key stores them.
func flowKeyOf(local, remote netip.AddrPort) m2hoFlowKey {
	return m2hoFlowKey{
		LocalAddr:  local.Addr().As16(),
		RemoteAddr: remote.Addr().As16(),
		LocalPort:  local.Port(),
		RemotePort: remote.Port(),
	}
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
		Closed:        has(m2hoFlowFlagsFLOW_CLOSED),
	}
}

// EvictIdle deletes the flows without a packet for longer than idle, and
// the closed ones (Flow.Closed) without a packet for longer than
// closedIdle, and returns how many it deleted. When it deletes any, it
// returns only after every run of the programs under way has ended, so
// that it can free their slots: an RCU grace period, 8 to 28 ms on a
// 2-CPU VM at HZ=250 (see waitForProgramRuns). The flow table is bounded:
// without eviction, it fills up and new flows go untracked
// (Counters.MapFull). An idle open flow leaves its handshake behind in the
// store of adopted ones (see handshakeBatch), so that its clamp still
// works if its connection resumes. A closed flow needs only a short stay,
// for the last packets of its connection; one that is evicted and then
// sees such a packet is tracked afresh, without a handshake, which only
// its clamp needed. So does a flow that never received a segment with a
// sequence number to count (a connection whose peer never answered, or
// one half-opened by forged SYNs to a listening port), which holds
// nothing to protect and leaves no handshake behind: a flood of such
// flows must neither keep the table full nor push the handshakes of real
// connections out of their store.
func (d *Datapath) EvictIdle(idle, closedIdle time.Duration) (int, error) {
	if idle < 0 || closedIdle < 0 {
		return 0, fmt.Errorf("datapath: negative idle time %v or %v", idle, closedIdle)
	}
	now := monotonicNow()
	cutoff := func(idle time.Duration) uint64 { return now - min(now, uint64(idle)) }
	openCutoff, closedCutoff := cutoff(idle), cutoff(closedIdle)
	evicted, err := d.eachFlow(func(_ *m2hoFlowKey, s *m2hoFlowState) bool {
		if !openWithData(s) {
			return s.LastSeenNs < closedCutoff
		}
		return s.LastSeenNs < openCutoff
	})
	// An idle connection may resume, and the flow its packets then create
	// can learn its window scale from no SYN: the handshake is kept for
	// the clamp to adopt. A clamped ACK that comes before it is stored
	// goes unclamped, and the next finds it.
	kept := d.adoption()
	for _, f := range evicted {
		if openWithData(&f.state) && f.state.Flags&uint32(m2hoFlowFlagsFLOW_WSCALE_KNOWN) != 0 {
			kept.add(&f.key, f.state.Mss, f.state.Wscale)
		}
	}
	_, storeErr := kept.done()
	return len(evicted), errors.Join(err, storeErr)
}

// openWithData says whether a flow's connection is open and has received
// a segment with a sequence number to count.
func openWithData(s *m2hoFlowState) bool {
	return s.Flags&uint32(m2hoFlowFlagsFLOW_CLOSED) == 0 && s.Flags&uint32(m2hoFlowFlagsFLOW_RX_SEQ_VALID) != 0
}
