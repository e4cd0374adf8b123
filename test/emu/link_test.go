package emu

import (
	"net"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/scenario"
)

const ms = time.Millisecond

// tcpFrame builds an Ethernet/IPv4/TCP frame with payload bytes of data
// (or an IPv6 one when v6 is set).
func tcpFrame(t *testing.T, seq, ack uint32, payload int, v6 bool) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	tcp := &layers.TCP{SrcPort: 5201, DstPort: 40000, Seq: seq, Ack: ack, ACK: true, DataOffset: 5, Window: 1000}
	var net3 gopacket.SerializableLayer
	if v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolTCP, HopLimit: 64, SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("fd00::2")}
		require.NoError(t, tcp.SetNetworkLayerForChecksum(ip))
		net3 = ip
	} else {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: net.IPv4(10, 0, 0, 1), DstIP: net.IPv4(10, 0, 0, 2)}
		require.NoError(t, tcp.SetNetworkLayerForChecksum(ip))
		net3 = ip
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	require.NoError(t, gopacket.SerializeLayers(buf, opts, eth, net3, tcp, gopacket.Payload(make([]byte, payload))))
	return buf.Bytes()
}

func TestParseFrame(t *testing.T) {
	arp := make([]byte, 42)
	arp[12], arp[13] = 0x08, 0x06
	v4 := tcpFrame(t, 1000, 77, 1448, false)
	truncated := append([]byte(nil), v4[:30]...)
	tests := []struct {
		name       string
		frame      []byte
		downlink   bool
		wantIP     bool
		wantTCP    bool
		wantSize   int
		wantSeq    uint32
		wantPay    int
		wantUEPort uint16
	}{
		{name: "ipv4 downlink", frame: v4, downlink: true, wantIP: true, wantTCP: true, wantSize: 1488, wantSeq: 1000, wantPay: 1448, wantUEPort: 40000},
		{name: "ipv4 read as uplink swaps ends", frame: v4, downlink: false, wantIP: true, wantTCP: true, wantSize: 1488, wantSeq: 1000, wantPay: 1448, wantUEPort: 5201},
		{name: "ipv6", frame: tcpFrame(t, 5, 6, 100, true), downlink: true, wantIP: true, wantTCP: true, wantSize: 160, wantSeq: 5, wantPay: 100, wantUEPort: 40000},
		{name: "arp is not ip", frame: arp, wantIP: false},
		{name: "truncated ip header", frame: truncated, wantIP: false},
		{name: "runt", frame: []byte{1, 2, 3}, wantIP: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			size, isIP, tcp := ParseFrame(tt.frame, tt.downlink)
			assert.Equal(t, tt.wantIP, isIP)
			assert.Equal(t, tt.wantTCP, tcp.Valid)
			if !tt.wantTCP {
				return
			}
			assert.Equal(t, tt.wantSize, size)
			assert.Equal(t, tt.wantSeq, tcp.Seq)
			assert.Equal(t, tt.wantPay, tcp.Payload)
			assert.Equal(t, tt.wantUEPort, tcp.Flow.UEPort)
		})
	}
}

// linkRun drives a Link in virtual time and records what it does.
type linkRun struct {
	link       *Link
	events     []diag.Event
	deliveries []delivery
	epoch      time.Time
}

func newLinkRun(t *testing.T, sc *scenario.Scenario) *linkRun {
	t.Helper()
	raw, err := sc.Marshal()
	require.NoError(t, err)
	parsed, err := scenario.Parse(raw)
	require.NoError(t, err)
	r := &linkRun{epoch: time.Unix(1_700_000_000, 0)}
	r.link, err = NewLink(parsed, r.epoch,
		func(ev diag.Event) { r.events = append(r.events, ev) },
		func(p *Packet, at time.Duration) { r.deliveries = append(r.deliveries, delivery{p, at}) })
	require.NoError(t, err)
	return r
}

// arrive offers a TCP segment of 1448 payload bytes (1488 IP bytes).
func (r *linkRun) arrive(t *testing.T, seq uint32, at time.Duration) {
	frame := tcpFrame(t, seq, 1, 1448, false)
	size, _, tcp := ParseFrame(frame, true)
	r.link.Advance(at)
	r.link.Arrive(&Packet{Frame: frame, Size: size, TCP: tcp}, at)
}

// ack has the UE send a pure ACK of ackNo at at on the flow arrive
// offers.
func (r *linkRun) ack(t *testing.T, ackNo uint32, at time.Duration) {
	frame := tcpFrame(t, 1, ackNo, 0, false)
	_, _, down := ParseFrame(frame, true)
	// The ACK travels UE to server: its flow is named downlink-wise.
	_, _, up := ParseFrame(frame, false)
	up.Flow = down.Flow
	r.link.UplinkRelease(at, up)
}

func (r *linkRun) types() []diag.Type {
	var out []diag.Type
	for _, ev := range r.events {
		if ev.Type != diag.TypeRBAlloc {
			out = append(out, ev.Type)
		}
	}
	return out
}

func twoCells(mbps float64, buffer int, delay time.Duration) []scenario.Cell {
	return []scenario.Cell{
		{Name: "a", RAT: diag.RATNR, Band: diag.BandSub6, PCI: 1, ARFCN: 640000, Capacity: scenario.CapacitySpec{ConstantMbps: mbps}, BufferBytes: buffer, DelayDown: delay, DelayUp: delay},
		{Name: "b", RAT: diag.RATNR, Band: diag.BandSub6, PCI: 2, ARFCN: 640000, Capacity: scenario.CapacitySpec{ConstantMbps: mbps}, BufferBytes: buffer, DelayDown: delay, DelayUp: delay},
	}
}

func TestLinkSchedulerRateAndBursts(t *testing.T) {
	tests := []struct {
		name       string
		mbps       float64
		delay      time.Duration
		packets    int
		wantFirst  time.Duration
		wantSpread time.Duration // between first and last delivery
	}{
		// 12 Mbit/s is 750 bytes per 0.5 ms slot: one 1500-byte packet
		// every two slots.
		{name: "12 Mbit/s", mbps: 12, packets: 10, wantFirst: 1 * ms, wantSpread: 9 * ms},
		// 120 Mbit/s is 7500 bytes per slot: bursts of five packets.
		{name: "120 Mbit/s bursts", mbps: 120, packets: 10, wantFirst: 500 * time.Microsecond, wantSpread: 500 * time.Microsecond},
		{name: "one-way delay first", mbps: 120, delay: 10 * ms, packets: 1, wantFirst: 10*ms + 500*time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newLinkRun(t, &scenario.Scenario{Name: "rate", Duration: time.Second, Cells: twoCells(tt.mbps, 1<<20, tt.delay), InitialCell: "a"})
			for i := range tt.packets {
				r.arrive(t, uint32(i*1448), 0)
			}
			r.link.Advance(100 * ms)
			require.Len(t, r.deliveries, tt.packets)
			assert.Equal(t, tt.wantFirst, r.deliveries[0].at)
			assert.Equal(t, tt.wantSpread, r.deliveries[tt.packets-1].at-r.deliveries[0].at)
			for i, d := range r.deliveries {
				assert.Equal(t, uint32(i*1448), d.p.TCP.Seq, "in order")
			}
		})
	}
}

func TestLinkRBAllocReportsScheduledSlots(t *testing.T) {
	r := newLinkRun(t, &scenario.Scenario{Name: "rb", Duration: time.Second, Cells: twoCells(120, 1<<20, 0), InitialCell: "a"})
	// 12 packets: two full slots, then a partial one.
	for i := range 12 {
		r.arrive(t, uint32(i*1448), 0)
	}
	r.link.Advance(50 * ms)
	var slots []diag.Slot
	for _, ev := range r.events {
		require.Equal(t, diag.TypeRBAlloc, ev.Type)
		assert.Equal(t, 500*time.Microsecond, ev.SlotDuration)
		slots = append(slots, ev.Slots...)
	}
	require.GreaterOrEqual(t, len(slots), 3)
	assert.Equal(t, diag.Slot{Given: 106, Total: 106}, slots[0])
	assert.Equal(t, diag.Slot{Given: 106, Total: 106}, slots[1])
	// 12 packets of 1488 bytes leave 2856 bytes for the third slot of
	// 7500: 38% of 106 RBs, rounded up.
	assert.Equal(t, diag.Slot{Given: 41, Total: 106}, slots[2])
	for _, s := range slots[3:] {
		assert.Zero(t, s.Given)
	}
}

func TestLinkDroptailBuffer(t *testing.T) {
	tests := []struct {
		name      string
		buffer    int
		offered   int
		wantDrops uint64
	}{
		{name: "fits", buffer: 15000, offered: 10, wantDrops: 0},
		{name: "three fit", buffer: 4500, offered: 5, wantDrops: 2},
		{name: "byte limit not packet limit", buffer: 4400, offered: 5, wantDrops: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newLinkRun(t, &scenario.Scenario{Name: "buf", Duration: time.Second, Cells: twoCells(1, tt.buffer, 0), InitialCell: "a"})
			for i := range tt.offered {
				r.arrive(t, uint32(i*1448), 0)
			}
			r.link.Advance(time.Millisecond)
			assert.Equal(t, tt.wantDrops, r.link.Truth().Totals.BufferDrops)
		})
	}
}

func TestLinkScaleFactorScalesCapacityAndBuffer(t *testing.T) {
	r := newLinkRun(t, &scenario.Scenario{Name: "scale", Duration: time.Second, Scale: 0.1, Cells: twoCells(120, 45000, 0), InitialCell: "a"})
	for i := range 5 {
		r.arrive(t, uint32(i*1448), 0)
	}
	r.link.Advance(100 * ms)
	// Buffer 4500 bytes after scaling: three packets fit; 12 Mbit/s: 1 ms
	// per packet.
	assert.Equal(t, uint64(2), r.link.Truth().Totals.BufferDrops)
	require.Len(t, r.deliveries, 3)
	assert.Equal(t, 2*ms, r.deliveries[2].at-r.deliveries[0].at)
}

func handoverScenario(release *scenario.ContextRelease, targetBuffer int) *scenario.Scenario {
	return &scenario.Scenario{
		Name: "ho", Duration: 2 * time.Second, Cells: twoCells(12, 1<<20, 0), InitialCell: "a",
		Timeline: []scenario.Event{{
			At: 500 * ms, Type: scenario.TypeHandover, Kind: diag.HOPCell, Source: "a", Target: "b",
			MeasEvent: diag.EventA3, MeasLead: 180 * ms, CommandLead: 30 * ms, Interruption: 27 * ms,
			ContextRelease: release, TargetBufferBytes: targetBuffer,
		}},
	}
}

func TestLinkHandoverInterruptionAndForwarding(t *testing.T) {
	r := newLinkRun(t, handoverScenario(nil, 0))
	// 20 packets at 495 ms: the source serves a few before execution at
	// 500 ms, the rest are forwarded and wait out the interruption.
	for i := range 20 {
		r.arrive(t, uint32(i*1448), 495*ms)
	}
	r.link.Advance(2 * time.Second)
	require.Len(t, r.deliveries, 20)
	ho := r.link.Truth().Handovers[0]
	assert.Equal(t, 15, ho.Forwarded)
	assert.Zero(t, ho.OverflowDrops)
	for _, d := range r.deliveries {
		assert.False(t, d.at > 500*ms && d.at <= 527*ms, "delivery at %v inside the interruption", d.at)
	}
	assert.Equal(t, []diag.Type{diag.TypeMeasReport, diag.TypeHOCommand, diag.TypeHOComplete}, r.types())
	for _, ev := range r.events {
		switch ev.Type {
		case diag.TypeMeasReport:
			assert.Equal(t, r.epoch.Add(320*ms), ev.Time)
			assert.Equal(t, uint16(2), ev.Neighbor.PCI)
		case diag.TypeHOCommand:
			assert.Equal(t, r.epoch.Add(470*ms), ev.Time)
		case diag.TypeHOComplete:
			assert.Equal(t, r.epoch.Add(527*ms), ev.Time)
			assert.Equal(t, uint16(2), ev.Cell.PCI)
		}
	}
}

func TestLinkTargetBufferOverflow(t *testing.T) {
	// The target grants 6000 bytes (4 packets) during the handover.
	r := newLinkRun(t, handoverScenario(nil, 6000))
	for i := range 20 {
		r.arrive(t, uint32(i*1448), 495*ms)
	}
	// More arrive during the interruption.
	for i := 20; i < 25; i++ {
		r.arrive(t, uint32(i*1448), 510*ms)
	}
	r.link.Advance(2 * time.Second)
	ho := r.link.Truth().Handovers[0]
	assert.Equal(t, 4, ho.Forwarded)
	assert.Equal(t, 11+5, ho.OverflowDrops)
	assert.Len(t, r.deliveries, 25-16)
}

// TestLinkContextReleaseForwardsOrDiscards: the packets a context release
// holds back reach the UE after the interruption through the target, or,
// when the source discards them (the paper's finding 2), never; the
// duplicate ACKs asking for them are reordering in the first case and
// loss in the second.
func TestLinkContextReleaseForwardsOrDiscards(t *testing.T) {
	tests := []struct {
		name          string
		discard       bool
		wantSeqs      []uint32
		wantForwarded int
		wantDiscarded int
		wantCause     string
		wantHandover  int
	}{
		// Packet 0 went out before the command, 1-3 are held, 4-9
		// released at once, then 1-3 after the interruption.
		{name: "forwarded", wantSeqs: []uint32{0, 4, 5, 6, 7, 8, 9, 1, 2, 3}, wantForwarded: 3,
			wantCause: DupAckReorder, wantHandover: 0},
		{name: "discarded at the source", discard: true, wantSeqs: []uint32{0, 4, 5, 6, 7, 8, 9}, wantDiscarded: 3,
			wantCause: DupAckLoss, wantHandover: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newLinkRun(t, handoverScenario(&scenario.ContextRelease{HeldPackets: 3, Discard: tt.discard}, 0))
			// Queued just before the command at 470 ms.
			for i := range 10 {
				r.arrive(t, uint32(i*1448), 469*ms)
			}
			r.link.Advance(471 * ms)
			// The UE asks for packet 1 again with each released packet,
			// before execution.
			for i := range 4 {
				r.ack(t, 1448, 472*ms+time.Duration(i)*ms)
			}
			r.link.Advance(2 * time.Second)
			var seqs []uint32
			for _, d := range r.deliveries {
				seqs = append(seqs, d.p.TCP.Seq/1448)
			}
			assert.Equal(t, tt.wantSeqs, seqs)
			truth := r.link.Truth()
			ho := truth.Handovers[0]
			assert.True(t, ho.Reordered)
			assert.Equal(t, 6, ho.Released)
			assert.Equal(t, tt.wantForwarded, ho.Forwarded)
			assert.Equal(t, tt.wantDiscarded, ho.Discarded)
			assert.Equal(t, uint64(tt.wantDiscarded), truth.Totals.BufferDrops)
			assert.Zero(t, ho.OverflowDrops)
			require.Len(t, ho.Held, 3)
			for i, h := range ho.Held {
				assert.Equal(t, uint32((i+1)*1448), h.Seq)
				assert.Equal(t, tt.discard, h.Dropped)
				if tt.discard {
					assert.Zero(t, h.DeliveredAt, "a discarded packet is never delivered")
				} else {
					assert.Greater(t, h.DeliveredAt, 527*ms, "delivered once the target serves")
				}
			}
			require.Len(t, truth.DupAcks, 3)
			require.NotEmpty(t, truth.GeneratedDupAcks, "the receiver model answers the released packets")
			for _, d := range append(truth.DupAcks, truth.GeneratedDupAcks...) {
				assert.Equal(t, tt.wantCause, d.Cause)
				assert.Equal(t, tt.wantHandover, d.Handover)
			}
		})
	}
}

func TestLinkContextReleaseHoldsNextPacketsWhenQueueEmpty(t *testing.T) {
	r := newLinkRun(t, handoverScenario(&scenario.ContextRelease{HeldPackets: 2}, 0))
	// Nothing queued at the command (470 ms): the next two packets the
	// source schedules are the held ones.
	for i := range 6 {
		r.arrive(t, uint32(i*1448), 471*ms+time.Duration(i)*ms)
	}
	r.link.Advance(2 * time.Second)
	var seqs []uint32
	for _, d := range r.deliveries {
		seqs = append(seqs, d.p.TCP.Seq/1448)
	}
	assert.Equal(t, []uint32{2, 3, 4, 5, 0, 1}, seqs)
	ho := r.link.Truth().Handovers[0]
	assert.Equal(t, 4, ho.Released)
	require.Len(t, ho.Held, 2)
	assert.Greater(t, ho.Held[1].DeliveredAt, 527*ms)
}

func TestLinkClassifiesDuplicateAcks(t *testing.T) {
	r := newLinkRun(t, handoverScenario(&scenario.ContextRelease{HeldPackets: 2}, 0))
	for i := range 10 {
		r.arrive(t, uint32(i*1448), 469*ms)
	}
	r.link.Advance(471 * ms)
	// The UE acknowledges packet 0, then repeats it for each released
	// out-of-order packet: duplicates caused by the reordering.
	for i := range 4 {
		r.ack(t, 1448, 472*ms+time.Duration(i)*ms)
	}
	r.link.Advance(time.Second)
	// A duplicate long after the held packets arrived is a loss signal.
	r.ack(t, 50000, 900*ms)
	r.ack(t, 50000, 901*ms)
	dups := r.link.Truth().DupAcks
	require.Len(t, dups, 4)
	for _, d := range dups[:3] {
		assert.Equal(t, DupAckReorder, d.Cause)
		assert.Equal(t, 0, d.Handover)
	}
	assert.Equal(t, DupAckLoss, dups[3].Cause)
	assert.Equal(t, -1, dups[3].Handover)
}

func TestLinkHeldPacketDroppedByTargetIsALoss(t *testing.T) {
	// Two held packets, and a target buffer of one packet: the second
	// held packet is dropped at execution and never arrives.
	r := newLinkRun(t, handoverScenario(&scenario.ContextRelease{HeldPackets: 2}, 1500))
	for i := range 10 {
		r.arrive(t, uint32(i*1448), 469*ms)
	}
	r.link.Advance(2 * time.Second)
	ho := r.link.Truth().Handovers[0]
	require.Len(t, ho.Held, 2)
	assert.False(t, ho.Held[0].Dropped)
	assert.Positive(t, ho.Held[0].DeliveredAt)
	assert.True(t, ho.Held[1].Dropped)
	assert.Zero(t, ho.Held[1].DeliveredAt)

	r.ack(t, 2*1448, 1900*ms)
	r.ack(t, 2*1448, 1901*ms)
	dups := r.link.Truth().DupAcks
	require.Len(t, dups, 1)
	assert.Equal(t, DupAckLoss, dups[0].Cause, "the segment asked for is lost, not on its way")
}

func TestLinkUplinkHeldDuringInterruption(t *testing.T) {
	r := newLinkRun(t, &scenario.Scenario{
		Name: "ul", Duration: 2 * time.Second, Cells: twoCells(12, 1<<20, 10*ms), InitialCell: "a",
		Timeline: []scenario.Event{{At: 500 * ms, Type: scenario.TypeHandover, Source: "a", Target: "b", Interruption: 27 * ms}},
	})
	tests := []struct {
		name string
		at   time.Duration
		want time.Duration
	}{
		{name: "before", at: 100 * ms, want: 110 * ms},
		{name: "during waits for the end", at: 510 * ms, want: 537 * ms},
		{name: "after", at: 600 * ms, want: 610 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r.link.Advance(tt.at)
			assert.Equal(t, tt.want, r.link.UplinkRelease(tt.at, TCPHeader{}))
		})
	}
}

func TestLinkRLFDiscardsAndReestablishes(t *testing.T) {
	r := newLinkRun(t, &scenario.Scenario{
		Name: "rlf", Duration: 2 * time.Second, Cells: twoCells(12, 1<<20, 0), InitialCell: "a",
		Timeline: []scenario.Event{{At: 500 * ms, Type: scenario.TypeRLF, Target: "b", Interruption: 138 * ms}},
	})
	for i := range 10 {
		r.arrive(t, uint32(i*1448), 499*ms)
	}
	r.arrive(t, 99*1448, 600*ms)
	r.link.Advance(2 * time.Second)
	ho := r.link.Truth().Handovers[0]
	assert.Equal(t, ProcedureRLF, ho.Procedure)
	assert.Equal(t, 9, ho.Discarded)
	require.Len(t, r.deliveries, 2)
	assert.Greater(t, r.deliveries[1].at, 638*ms)
	assert.Equal(t, []diag.Type{diag.TypeHOFailure, diag.TypeHOComplete}, r.types())
	for _, ev := range r.events {
		if ev.Type == diag.TypeHOFailure {
			assert.Equal(t, diag.CauseRLF, ev.Cause)
		}
	}
}

func TestLinkReportsWithoutHandover(t *testing.T) {
	r := newLinkRun(t, &scenario.Scenario{
		Name: "rep", Duration: 2 * time.Second, Cells: twoCells(12, 1<<20, 0), InitialCell: "a",
		Timeline: []scenario.Event{{At: 300 * ms, Type: scenario.TypeReport, Reports: []scenario.Report{
			{Event: diag.EventA2}, {After: 400 * ms, Event: diag.EventA1},
		}}},
	})
	r.link.Advance(2 * time.Second)
	require.Len(t, r.events, 2)
	assert.Equal(t, diag.EventA2, r.events[0].Meas)
	assert.Equal(t, r.epoch.Add(300*ms), r.events[0].Time)
	assert.Equal(t, diag.EventA1, r.events[1].Meas)
	assert.Equal(t, r.epoch.Add(700*ms), r.events[1].Time)
	assert.Len(t, r.link.Truth().Reports, 2)
	assert.Empty(t, r.link.Truth().Handovers)
}

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	for i := 1; i <= 100; i++ {
		h.Observe(time.Duration(i) * time.Microsecond)
	}
	h.Observe(-time.Second)
	h.Observe(time.Second)
	tests := []struct {
		q    float64
		want time.Duration
	}{
		{q: 0.5, want: 51 * time.Microsecond},
		{q: 0.99, want: 100 * time.Microsecond},
		{q: 1, want: 100 * ms},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, h.Quantile(tt.q), "q=%v", tt.q)
	}
	assert.Equal(t, uint64(102), h.Count())
	assert.Equal(t, time.Second, h.Max())
}

// Advance applies a timeline action at the first slot boundary at or after
// its time, so NextWake has to name that boundary: an earlier time wakes
// the scheduler to no work.
func TestLinkNextWakeIsTheSlotBoundaryOfAnAction(t *testing.T) {
	us := time.Microsecond
	tests := []struct {
		name     string
		slot     time.Duration
		reportAt time.Duration
		now      time.Duration
		want     time.Duration
	}{
		{name: "off the sub-6 grid", slot: 500 * us, reportAt: 100*ms + 200*us, now: 100*ms + 300*us, want: 100*ms + 500*us},
		{name: "on the sub-6 grid", slot: 500 * us, reportAt: 100*ms + 500*us, now: 100*ms + 300*us, want: 100*ms + 500*us},
		{name: "off the grid, asked before the action", slot: 500 * us, reportAt: 100*ms + 200*us, now: 50 * ms, want: 100*ms + 500*us},
		{name: "off the mmWave grid", slot: 125 * us, reportAt: 100*ms + 200*us, now: 100*ms + 210*us, want: 100*ms + 250*us},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cells := twoCells(12, 1<<20, 0)
			cells[0].Slot, cells[1].Slot = tt.slot, tt.slot
			r := newLinkRun(t, &scenario.Scenario{
				Name: "wake", Duration: time.Second, Cells: cells, InitialCell: "a",
				Timeline: []scenario.Event{{At: tt.reportAt, Type: scenario.TypeReport, Reports: []scenario.Report{{Event: diag.EventA2}}}},
			})
			r.link.Advance(tt.now)
			wake, ok := r.link.NextWake()
			require.True(t, ok)
			assert.Equal(t, tt.want, wake)
			r.link.Advance(wake)
			assert.Len(t, r.events, 1, "the report is applied at the wake-up")
		})
	}
}

// schedulerRun drives a link the way Emulator.schedule does, in virtual
// time: Advance to now, then sleep until NextWake when the link is busy,
// or at most idlePoll when it is idle, while packets arrive in between.
// A wake-up that is not after now does not sleep: the real scheduler
// loops at once, taking the emulator's lock on a real-time thread. spins
// counts those, wakeups every iteration.
func schedulerRun(t *testing.T, r *linkRun, arrivals []time.Duration, until time.Duration) (wakeups, spins int) {
	t.Helper()
	// What one iteration of the real loop costs when it does not sleep.
	const iteration = 10 * time.Microsecond
	now, seq := time.Duration(0), uint32(0)
	for now < until {
		wakeups++
		r.link.Advance(now)
		wake, ok := r.link.NextWake()
		if !r.link.Busy() {
			if poll := now + idlePoll; !ok || wake > poll {
				wake = poll
			}
		}
		if wake <= now {
			spins++
			wake = now + iteration
		}
		// The readers hand packets in while the scheduler sleeps.
		for len(arrivals) > 0 && arrivals[0] < wake {
			frame := tcpFrame(t, seq, 1, 1448, false)
			size, _, tcp := ParseFrame(frame, true)
			r.link.Arrive(&Packet{Frame: frame, Size: size, TCP: tcp}, max(arrivals[0], now))
			arrivals, seq = arrivals[1:], seq+1448
		}
		now = wake
	}
	return wakeups, spins
}

// Report, command, execution and completion off the slot grid (as
// generated scenarios have them), with packets queued around the command
// and arriving during the interruption: the scheduler never wakes to a
// wake-up time that has already passed.
func TestSchedulerDoesNotSpinThroughAHandover(t *testing.T) {
	us := time.Microsecond
	r := newLinkRun(t, &scenario.Scenario{
		Name: "spin", Duration: 2 * time.Second, Cells: twoCells(12, 1<<20, 5*ms), InitialCell: "a",
		Timeline: []scenario.Event{{
			At: 500*ms + 200*us, Type: scenario.TypeHandover, Source: "a", Target: "b",
			MeasLead: 180*ms + 100*us, CommandLead: 30*ms + 300*us, Interruption: 27*ms + 100*us,
		}},
	})
	var arrivals []time.Duration
	for i := range 20 {
		arrivals = append(arrivals, 460*ms+time.Duration(i)*300*us)
	}
	for i := range 10 {
		arrivals = append(arrivals, 505*ms+time.Duration(i)*ms)
	}
	wakeups, spins := schedulerRun(t, r, arrivals, 700*ms)
	assert.Zero(t, spins, "wake-ups that found their time already past")
	// The handover did happen, with the traffic through it.
	assert.Equal(t, []diag.Type{diag.TypeMeasReport, diag.TypeHOCommand, diag.TypeHOComplete}, r.types())
	assert.Len(t, r.deliveries, 30)
	// Idle, the scheduler polls once a millisecond: about 700 wake-ups,
	// plus one per busy slot.
	assert.Less(t, wakeups, 800)
}
