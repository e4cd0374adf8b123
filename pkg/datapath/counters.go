package datapath

import "fmt"

// Counters are the BPF programs' event counts since load, summed over CPUs.
type Counters struct {
	EgressPackets     uint64 // packets seen on egress
	IngressPackets    uint64 // packets seen on ingress
	NotIP             uint64 // neither IPv4 nor IPv6: passed
	NotTCP            uint64 // IP but not TCP: passed
	Malformed         uint64 // truncated or inconsistent headers: passed
	Fragments         uint64 // IP fragments: passed
	FlowsCreated      uint64 // flows entered in the flow table
	MapFull           uint64 // flow table full: flow left untracked
	Untracked         uint64 // segments of flows not in the map: passed
	NoWScale          uint64 // clamp skipped: handshake not seen
	WScaleAdopted     uint64 // flows whose unseen handshake was adopted from a scan
	ClampApplied      uint64 // windows rewritten (clamp or freeze)
	ClampNotNeeded    uint64 // own window already within the clamp
	RewriteFailed     uint64 // window rewrite helper failed: passed
	DupACKsSuppressed uint64 // duplicate ACKs dropped
	FlowsReleased     uint64 // flows released by their own ACK
	FlowsClosed       uint64 // connections ended: a RST, or the peer's FIN acknowledged
	SeqImplausible    uint64 // ingress segments too far from their flow's highest sequence: not counted toward it
	// DupACKHoldExpired counts duplicate ACKs let through during
	// suppression because their flow's acknowledgement had stood still
	// for the hold (below the sender's minimum RTO).
	DupACKHoldExpired uint64
	ClampExpired      uint64 // clamp policies that hit their deadline
	SuppressExpired   uint64 // suppressions that hit their deadline
	Snapshots         uint64 // per-flow epoch snapshots
	TSStamped         uint64 // egress TSvals recorded
	TSUnstamped       uint64 // new egress TSvals not recorded: all of the flow's stamps await their echo
	RTTSamples        uint64 // ingress TSecr matches
	Bursts            uint64 // downlink bursts reported
	BurstsLost        uint64 // bursts dropped: ring buffer full
	// IngressBytes is the cumulative IP length of every packet received on
	// the interface, whatever its protocol (link header excluded; a packet
	// that is not IP counts whole). It is read from the programs' own
	// counters, so it is right in whatever network namespace the caller
	// runs.
	IngressBytes uint64
}

// field returns the Counters field holding BPF counter id, or nil for ids
// this version does not know.
func (c *Counters) field(id m2hoCounterId) *uint64 {
	switch id {
	case m2hoCounterIdCNT_EGRESS_PACKETS:
		return &c.EgressPackets
	case m2hoCounterIdCNT_INGRESS_PACKETS:
		return &c.IngressPackets
	case m2hoCounterIdCNT_NOT_IP:
		return &c.NotIP
	case m2hoCounterIdCNT_NOT_TCP:
		return &c.NotTCP
	case m2hoCounterIdCNT_MALFORMED:
		return &c.Malformed
	case m2hoCounterIdCNT_FRAGMENT:
		return &c.Fragments
	case m2hoCounterIdCNT_FLOW_CREATED:
		return &c.FlowsCreated
	case m2hoCounterIdCNT_MAP_FULL:
		return &c.MapFull
	case m2hoCounterIdCNT_UNTRACKED:
		return &c.Untracked
	case m2hoCounterIdCNT_NO_WSCALE:
		return &c.NoWScale
	case m2hoCounterIdCNT_WSCALE_ADOPTED:
		return &c.WScaleAdopted
	case m2hoCounterIdCNT_CLAMP_APPLIED:
		return &c.ClampApplied
	case m2hoCounterIdCNT_CLAMP_NOT_NEEDED:
		return &c.ClampNotNeeded
	case m2hoCounterIdCNT_REWRITE_FAILED:
		return &c.RewriteFailed
	case m2hoCounterIdCNT_DUPACK_SUPPRESSED:
		return &c.DupACKsSuppressed
	case m2hoCounterIdCNT_FLOW_RELEASED:
		return &c.FlowsReleased
	case m2hoCounterIdCNT_FLOW_CLOSED:
		return &c.FlowsClosed
	case m2hoCounterIdCNT_SEQ_IMPLAUSIBLE:
		return &c.SeqImplausible
	case m2hoCounterIdCNT_DUPACK_HOLD_EXPIRED:
		return &c.DupACKHoldExpired
	case m2hoCounterIdCNT_CLAMP_EXPIRED:
		return &c.ClampExpired
	case m2hoCounterIdCNT_SUPPRESS_EXPIRED:
		return &c.SuppressExpired
	case m2hoCounterIdCNT_SNAPSHOTS:
		return &c.Snapshots
	case m2hoCounterIdCNT_TS_STAMPED:
		return &c.TSStamped
	case m2hoCounterIdCNT_TS_UNSTAMPED:
		return &c.TSUnstamped
	case m2hoCounterIdCNT_RTT_SAMPLES:
		return &c.RTTSamples
	case m2hoCounterIdCNT_BURSTS:
		return &c.Bursts
	case m2hoCounterIdCNT_BURST_LOST:
		return &c.BurstsLost
	case m2hoCounterIdCNT_INGRESS_BYTES:
		return &c.IngressBytes
	}
	return nil
}

// onlyEntry is the key of the single entry of the counters and rtt_hist
// maps: one per-CPU value holds all the counters, or the whole histogram,
// so that a single lookup reads them.
var onlyEntry uint32

// Counters reads every counter, summed over CPUs, in one map lookup.
func (d *Datapath) Counters() (Counters, error) {
	var c Counters
	if err := d.maps.enter(); err != nil {
		return c, err
	}
	defer d.maps.leave()
	var perCPU []m2hoCpuState
	if err := d.objs.CpuStateMap.Lookup(&onlyEntry, &perCPU); err != nil {
		return c, fmt.Errorf("datapath: read counters: %w", err)
	}
	for id := range m2hoCounterIdCNT_MAX {
		f := c.field(id)
		if f == nil {
			continue
		}
		for cpu := range perCPU {
			*f += perCPU[cpu].Counters[id]
		}
	}
	return c, nil
}
