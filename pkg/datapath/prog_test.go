package datapath

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gopacket/gopacket/layers"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nextPort gives every fixture flow its own ports, so flows of different
// cases never share state in one loaded datapath.
var nextPort atomic.Uint32

func freshPorts(s segment) segment {
	p := nextPort.Add(1)
	s.localPort = uint16(20000 + p%40000)
	s.remotePort = 443
	return s
}

func (s segment) l3Offset() int {
	if !s.ethernet {
		return 0
	}
	return 14 + 4*len(s.vlans)
}

const (
	hostISN = 1000
	peerISN = 5000000
	hostMSS = 1460
)

// hostSYN is the host's SYN of flow s, with initial sequence number seq
// and window scale wscale (< 0 leaves the option out).
func hostSYN(s segment, seq uint32, wscale int) segment {
	s.egress, s.syn, s.ackFlag = true, true, false
	s.seq, s.ack, s.window, s.payload = seq, 0, 64240, 0
	s.mss, s.wscale = hostMSS, wscale
	return s
}

// peerSYNACK is the peer's SYN-ACK of flow s to the host's SYN with
// sequence number hostSeq, with window scale wscale (< 0 leaves the
// option out).
func peerSYNACK(s segment, hostSeq uint32, wscale int) segment {
	s.egress, s.syn, s.ackFlag = false, true, true
	s.seq, s.ack, s.window, s.payload = peerISN, hostSeq+1, 65160, 0
	s.mss, s.wscale = 1400, wscale
	return s
}

// handshake runs the host's SYN (egress) and the peer's SYN-ACK (ingress)
// of flow s. hostWScale/peerWScale < 0 leave the option out.
func handshake(t testing.TB, d *Datapath, s segment, hostWScale, peerWScale int) {
	t.Helper()
	frame, _ := hostSYN(s, hostISN, hostWScale).build(t)
	verdict, out := d.egress(t, frame)
	require.Equal(t, int32(verdictPass), verdict)
	require.Equal(t, frame, out, "SYN must pass untouched")

	frame, _ = peerSYNACK(s, hostISN, peerWScale).build(t)
	verdict, out = d.ingress(t, frame)
	require.Equal(t, int32(verdictPass), verdict)
	require.Equal(t, frame, out)
}

// hostACK is an egress ACK of flow s after the handshake.
func hostACK(s segment, window uint16, payload int) segment {
	s.egress, s.syn, s.ackFlag = true, false, true
	s.seq, s.ack, s.window, s.payload = hostISN+1, peerISN+1, window, payload
	s.mss, s.wscale = 0, -1
	return s
}

// expectWindow runs seg through egress and checks that the output is the
// same segment with the given window (exact bytes) and a valid checksum.
func expectWindow(t *testing.T, d *Datapath, seg segment, want uint16) {
	t.Helper()
	frame, l4 := seg.build(t)
	verdict, out := d.egress(t, frame)
	assert.Equal(t, int32(verdictPass), verdict)
	wantSeg := seg
	wantSeg.window = want
	wantFrame, _ := wantSeg.build(t)
	assert.Equal(t, wantFrame, out, "output bytes")
	assert.True(t, tcpChecksumOK(out, l4, seg.ipv6, seg.l3Offset()), "output checksum")
	assert.Equal(t, want, tcpWindow(out, l4))
}

func ceilShift(v uint32, shift int) uint32 { return (v + 1<<shift - 1) >> shift }

func expectedClamp(own uint16, shift int, clampBytes uint32) uint16 {
	limit := max(clampBytes>>shift, ceilShift(hostMSS, shift))
	return uint16(min(uint32(own), limit))
}

type framing struct {
	name     string
	ipv6     bool
	ethernet bool
	vlans    []uint16
}

var framings = []framing{
	{"ipv4 raw", false, false, nil},
	{"ipv6 raw", true, false, nil},
	{"ipv4 ethernet", false, true, nil},
	{"ipv6 ethernet", true, true, nil},
	{"ipv4 vlan", false, true, []uint16{100}},
	{"ipv6 qinq", true, true, []uint16{200, 100}},
}

type optionSet struct {
	name       string
	timestamps bool
	sack       bool
}

var optionSets = []optionSet{{"no options", false, false}, {"timestamps", true, false}, {"timestamps sack", true, true}}

func datapathFor(t *testing.T, f framing) *Datapath {
	return loadDetached(t, !f.ethernet, 0)
}

func TestClampEveryWindowScale(t *testing.T) {
	const clampBytes = 20000
	for _, f := range framings {
		t.Run(f.name, func(t *testing.T) {
			d := datapathFor(t, f)
			require.NoError(t, d.SetClamp(clampBytes, time.Now().Add(time.Minute)))
			for shift := 0; shift <= 14; shift++ {
				for _, o := range optionSets {
					t.Run(fmt.Sprintf("wscale %d %s", shift, o.name), func(t *testing.T) {
						s := freshPorts(segment{ipv6: f.ipv6, ethernet: f.ethernet, vlans: f.vlans,
							timestamps: o.timestamps, tsval: 777, tsecr: 555, sack: o.sack})
						handshake(t, d, s, shift, 7)
						expectWindow(t, d, hostACK(s, 65535, 0), expectedClamp(65535, shift, clampBytes))
						// a data-bearing ACK is clamped the same way
						expectWindow(t, d, hostACK(s, 65535, 100), expectedClamp(65535, shift, clampBytes))
					})
				}
			}
			c, err := d.Counters()
			require.NoError(t, err)
			assert.Equal(t, uint64(15*len(optionSets)*2), c[m2hoCounterIdCNT_CLAMP_APPLIED])
			assert.Zero(t, c[m2hoCounterIdCNT_REWRITE_FAILED])
			assert.Zero(t, c[m2hoCounterIdCNT_MALFORMED])
		})
	}
}

func TestClampRules(t *testing.T) {
	deadline := time.Now().Add(time.Minute)
	tests := []struct {
		name       string
		hostWScale int
		peerWScale int
		freeze     bool
		clampBytes uint32
		own        uint16
		mutate     func(segment) segment
		want       func(own uint16) uint16
	}{
		{name: "own window below clamp is kept", hostWScale: 7, peerWScale: 7, clampBytes: 1 << 20, own: 100,
			want: func(own uint16) uint16 { return own }},
		{name: "clamp below one MSS floors at the MSS", hostWScale: 7, peerWScale: 7, clampBytes: 100, own: 5000,
			want: func(uint16) uint16 { return uint16(ceilShift(hostMSS, 7)) }},
		{name: "zero clamp floors at the MSS", hostWScale: 0, peerWScale: 0, clampBytes: 0, own: 60000,
			want: func(uint16) uint16 { return hostMSS }},
		{name: "freeze advertises zero", hostWScale: 7, peerWScale: 7, freeze: true, own: 5000,
			want: func(uint16) uint16 { return 0 }},
		{name: "peer without window scale disables the host's", hostWScale: 7, peerWScale: -1, clampBytes: 30000, own: 65535,
			want: func(uint16) uint16 { return 30000 }},
		{name: "host without window scale", hostWScale: -1, peerWScale: 7, clampBytes: 30000, own: 65535,
			want: func(uint16) uint16 { return 30000 }},
		{name: "FIN-ACK is clamped", hostWScale: 2, peerWScale: 2, clampBytes: 4000, own: 65535,
			mutate: func(s segment) segment { s.fin = true; return s },
			want:   func(uint16) uint16 { return 1000 }},
		{name: "RST is never rewritten", hostWScale: 2, peerWScale: 2, clampBytes: 4000, own: 65535,
			mutate: func(s segment) segment { s.rst = true; return s },
			want:   func(own uint16) uint16 { return own }},
		{name: "SYN-ACK is never rewritten", hostWScale: 2, peerWScale: 2, clampBytes: 4000, own: 65535,
			mutate: func(s segment) segment { s.syn = true; s.wscale = 2; return s },
			want:   func(own uint16) uint16 { return own }},
	}
	for _, f := range framings[:4] {
		t.Run(f.name, func(t *testing.T) {
			d := datapathFor(t, f)
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					if tc.freeze {
						require.NoError(t, d.SetFreeze(deadline))
					} else {
						require.NoError(t, d.SetClamp(tc.clampBytes, deadline))
					}
					s := freshPorts(segment{ipv6: f.ipv6, ethernet: f.ethernet, vlans: f.vlans, timestamps: true, tsval: 9})
					handshake(t, d, s, tc.hostWScale, tc.peerWScale)
					ack := hostACK(s, tc.own, 0)
					if tc.mutate != nil {
						ack = tc.mutate(ack)
					}
					expectWindow(t, d, ack, tc.want(tc.own))
				})
			}
		})
	}
}

func TestClampInboundConnection(t *testing.T) {
	d := loadDetached(t, true, 0)
	require.NoError(t, d.SetClamp(8192, time.Now().Add(time.Minute)))
	s := freshPorts(segment{timestamps: true})
	// peer's SYN arrives, the host answers with a SYN-ACK offering shift 3
	syn := s
	syn.syn, syn.seq, syn.window, syn.mss, syn.wscale = true, peerISN, 64240, 1400, 8
	frame, _ := syn.build(t)
	d.ingress(t, frame)
	synAck := s
	synAck.egress, synAck.syn, synAck.ackFlag = true, true, true
	synAck.seq, synAck.ack, synAck.window, synAck.mss, synAck.wscale = hostISN, peerISN+1, 65160, hostMSS, 3
	frame, _ = synAck.build(t)
	_, out := d.egress(t, frame)
	assert.Equal(t, frame, out, "SYN-ACK untouched")
	expectWindow(t, d, hostACK(s, 60000, 0), 8192>>3)
}

func TestClampSkipsFlowsWithoutHandshake(t *testing.T) {
	d := loadDetached(t, false, 0)
	require.NoError(t, d.SetClamp(1000, time.Now().Add(time.Minute)))
	s := freshPorts(segment{ethernet: true})
	expectWindow(t, d, hostACK(s, 50000, 0), 50000)
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_NO_WSCALE])
	assert.Zero(t, c[m2hoCounterIdCNT_CLAMP_APPLIED])
	assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_FLOW_CREATED])
}

func TestClampOffAndCleared(t *testing.T) {
	d := loadDetached(t, true, 0)
	s := freshPorts(segment{})
	handshake(t, d, s, 5, 5)
	expectWindow(t, d, hostACK(s, 50000, 0), 50000)
	require.NoError(t, d.SetClamp(1<<16, time.Now().Add(time.Minute)))
	expectWindow(t, d, hostACK(s, 50000, 0), 2048)
	require.NoError(t, d.ClearClamp())
	expectWindow(t, d, hostACK(s, 50000, 0), 50000)
}

func TestPolicyDeadlinesEnforcedInBPF(t *testing.T) {
	d := loadDetached(t, true, 0)
	s := freshPorts(segment{})
	handshake(t, d, s, 5, 5)
	deadline := time.Now().Add(50 * time.Millisecond)
	require.NoError(t, d.SetClamp(1<<16, deadline))
	expectWindow(t, d, hostACK(s, 50000, 0), 2048)
	// egress's coarse clock lags by up to two ticks: 20 ms at HZ=100
	time.Sleep(time.Until(deadline) + 25*time.Millisecond)
	expectWindow(t, d, hostACK(s, 50000, 0), 50000)
	expectWindow(t, d, hostACK(s, 50000, 0), 50000)
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_CLAMP_EXPIRED], "an expiry is counted once")

	assert.ErrorIs(t, d.SetClamp(1000, time.Now().Add(-time.Second)), ErrDeadline)
	_, err = d.StartSuppression(time.Time{})
	assert.ErrorIs(t, err, ErrDeadline)
}

// TestPolicyExpiryCountedOncePerDeadline checks the expiry counts against
// policy writes racing the packets: the packet runs inside updatePolicy's
// change, between its read and its write, as a packet on another CPU may.
func TestPolicyExpiryCountedOncePerDeadline(t *testing.T) {
	d := loadDetached(t, true, 0)
	s := freshPorts(segment{})
	handshake(t, d, s, 5, 5)
	clampExpired := func() uint64 {
		c, err := d.Counters()
		require.NoError(t, err)
		return c[m2hoCounterIdCNT_CLAMP_EXPIRED]
	}
	expire := func() {
		deadline := time.Now().Add(50 * time.Millisecond)
		require.NoError(t, d.SetClamp(1<<16, deadline))
		// egress's coarse clock lags by up to two ticks: 20 ms at HZ=100
		time.Sleep(time.Until(deadline) + 25*time.Millisecond)
	}

	expire()
	_, err := d.updatePolicy(func(p *m2hoPolicy) {
		expectWindow(t, d, hostACK(s, 50000, 0), 50000) // sees the clamp expire
		p.Epoch++
		p.SuppressMode = uint32(m2hoSuppressModeSUPPRESS_HANDOVER)
		p.SuppressDeadlineNs = toMonotonic(time.Now().Add(time.Minute))
	})
	require.NoError(t, err)
	expectWindow(t, d, hostACK(s, 50000, 0), 50000)
	assert.Equal(t, uint64(1), clampExpired(), "a write-back of the policy read before the expiry")

	expire()
	expectWindow(t, d, hostACK(s, 50000, 0), 50000)
	assert.Equal(t, uint64(2), clampExpired(), "the next clamp's own expiry")

	// A packet reading ClearClamp's write halfway sees the old mode with
	// the new zero deadline: that clamp is being cleared, not expiring.
	require.NoError(t, d.SetClamp(1<<16, time.Now().Add(time.Minute)))
	_, err = d.updatePolicy(func(p *m2hoPolicy) { p.ClampDeadlineNs = 0 })
	require.NoError(t, err)
	expectWindow(t, d, hostACK(s, 50000, 0), 50000)
	assert.Equal(t, uint64(2), clampExpired(), "a half-written clear")
}

// TestPassUntouched feeds packets the programs must not change: each is
// checked in both directions for a pass verdict, identical output and the
// counter that explains why.
func TestPassUntouched(t *testing.T) {
	valid := func(f framing) segment {
		return segment{ipv6: f.ipv6, ethernet: f.ethernet, vlans: f.vlans, localPort: 1, remotePort: 2, ackFlag: true, window: 100, wscale: -1}
	}
	truncate := func(n int) func([]byte) []byte {
		return func(b []byte) []byte { return b[:len(b)-n] }
	}
	tests := []struct {
		name    string
		framing framing
		seg     segment
		edit    func([]byte) []byte
		counter func(Counters) uint64
	}{
		{"ipv4 truncated tcp header", framings[0], valid(framings[0]), truncate(10), func(c Counters) uint64 { return c[m2hoCounterIdCNT_MALFORMED] }},
		{"ipv6 truncated tcp header", framings[3], valid(framings[3]), truncate(10), func(c Counters) uint64 { return c[m2hoCounterIdCNT_MALFORMED] }},
		{"ipv4 total length beyond packet", framings[2], valid(framings[2]), func(b []byte) []byte { b[14+3] += 40; return b }, func(c Counters) uint64 { return c[m2hoCounterIdCNT_MALFORMED] }},
		{"ipv4 header length too short", framings[0], valid(framings[0]), func(b []byte) []byte { b[0] = 0x44; return b }, func(c Counters) uint64 { return c[m2hoCounterIdCNT_MALFORMED] }},
		{"tcp data offset too short", framings[0], valid(framings[0]), func(b []byte) []byte { b[20+12] = 0x40; return b }, func(c Counters) uint64 { return c[m2hoCounterIdCNT_MALFORMED] }},
		{"tcp data offset past packet", framings[1], valid(framings[1]), func(b []byte) []byte { b[40+12] = 0xf0; return b }, func(c Counters) uint64 { return c[m2hoCounterIdCNT_MALFORMED] }},
		{"ipv4 fragment", framings[0], valid(framings[0]), func(b []byte) []byte { b[6] = 0x20; return b }, func(c Counters) uint64 { return c[m2hoCounterIdCNT_FRAGMENT] }},
		{"ipv4 later fragment", framings[2], valid(framings[2]), func(b []byte) []byte { b[14+7] = 0x10; return b }, func(c Counters) uint64 { return c[m2hoCounterIdCNT_FRAGMENT] }},
		{"ipv6 fragment header", framings[1], segment{ipv6: true, ackFlag: true, ipv6Ext: []uint8{uint8(layers.IPProtocolIPv6Fragment)}}, nil, func(c Counters) uint64 { return c[m2hoCounterIdCNT_FRAGMENT] }},
		{"udp", framings[0], valid(framings[0]), func(b []byte) []byte { b[9] = 17; return b }, func(c Counters) uint64 { return c[m2hoCounterIdCNT_NOT_TCP] }},
		{"ipv6 no next header", framings[1], valid(framings[1]), func(b []byte) []byte { b[6] = 59; return b }, func(c Counters) uint64 { return c[m2hoCounterIdCNT_NOT_TCP] }},
		{"arp", framings[2], valid(framings[2]), func(b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b }, func(c Counters) uint64 { return c[m2hoCounterIdCNT_NOT_IP] }},
		{"raw ip version 5", framings[0], valid(framings[0]), func(b []byte) []byte { b[0] = 0x55; return b }, func(c Counters) uint64 { return c[m2hoCounterIdCNT_NOT_IP] }},
		{"garbage", framings[2], valid(framings[2]), func(b []byte) []byte {
			for i := range b {
				b[i] = byte(i*37 + 11)
			}
			return b
		}, func(c Counters) uint64 { return c[m2hoCounterIdCNT_NOT_IP] }},
		// a length field of 0 is the packet's length only in a GSO packet
		{"ipv4 total length zero", framings[0], valid(framings[0]), func(b []byte) []byte { valid(framings[0]).clearIPLength(b); return b }, func(c Counters) uint64 { return c[m2hoCounterIdCNT_MALFORMED] }},
		{"ipv6 payload length zero", framings[3], valid(framings[3]), func(b []byte) []byte { valid(framings[3]).clearIPLength(b); return b }, func(c Counters) uint64 { return c[m2hoCounterIdCNT_MALFORMED] }},
		{"vlan truncated tcp header", framings[4], valid(framings[4]), truncate(6), func(c Counters) uint64 { return c[m2hoCounterIdCNT_MALFORMED] }},
		{"qinq truncated tcp header", framings[5], valid(framings[5]), truncate(6), func(c Counters) uint64 { return c[m2hoCounterIdCNT_MALFORMED] }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := datapathFor(t, tc.framing)
			require.NoError(t, d.SetClamp(0, time.Now().Add(time.Minute)))
			_, err := d.StartSuppression(time.Now().Add(time.Minute))
			require.NoError(t, err)
			frame, _ := tc.seg.build(t)
			if tc.edit != nil {
				frame = tc.edit(frame)
			}
			for _, prog := range []func(testing.TB, []byte) (int32, []byte){d.egress, d.ingress} {
				verdict, out := prog(t, append([]byte(nil), frame...))
				assert.Equal(t, int32(verdictPass), verdict)
				assert.Equal(t, frame, out)
			}
			c, err := d.Counters()
			require.NoError(t, err)
			assert.Equal(t, uint64(2), tc.counter(c))
			assert.Zero(t, c[m2hoCounterIdCNT_FLOW_CREATED])
			assert.Zero(t, c[m2hoCounterIdCNT_CLAMP_APPLIED])
		})
	}
}

// TestHeadersWalked checks that IPv4 options and IPv6 extension headers are
// skipped to reach TCP.
func TestHeadersWalked(t *testing.T) {
	tests := []struct {
		name string
		seg  segment
	}{
		{"ipv4 options", segment{ipv4Options: true}},
		{"ipv6 hop-by-hop", segment{ipv6: true, ipv6Ext: []uint8{0}}},
		{"ipv6 hop-by-hop routing destination", segment{ipv6: true, ipv6Ext: []uint8{0, 43, 60}}},
		{"ipv6 authentication header", segment{ipv6: true, ipv6Ext: []uint8{60, 51}}},
		{"ipv6 ethernet destination options", segment{ipv6: true, ethernet: true, ipv6Ext: []uint8{60}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := loadDetached(t, !tc.seg.ethernet, 0)
			require.NoError(t, d.SetClamp(4096, time.Now().Add(time.Minute)))
			s := freshPorts(tc.seg)
			handshake(t, d, s, 4, 4)
			expectWindow(t, d, hostACK(s, 4000, 0), 256)
		})
	}
}

// TestBigTCPLengthFromPacket checks GSO packets whose IP length field is
// 0, as BIG TCP sends and receives them above 64 KB: the length is the
// packet's, so a data segment counts all of its payload on ingress, and
// on egress its TSval is stamped. The packets leave untouched.
func TestBigTCPLengthFromPacket(t *testing.T) {
	const payload = 1200
	tests := []struct {
		name string
		seg  segment
	}{
		{"ipv4 raw", segment{}},
		{"ipv4 vlan", segment{ethernet: true, vlans: []uint16{100}}},
		{"ipv6 raw", segment{ipv6: true}},
		{"ipv6 ethernet", segment{ipv6: true, ethernet: true}},
		// what the stack sent before it dropped the jumbo payload option
		{"ipv6 hop-by-hop", segment{ipv6: true, ipv6Ext: []uint8{0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := loadDetached(t, !tc.seg.ethernet, 0)
			s := freshPorts(tc.seg)
			s.timestamps = true
			handshake(t, d, s, 7, 7)
			before, err := d.Counters()
			require.NoError(t, err)

			data := peerData(s, 0, payload)
			data.tsval, data.tsecr = 500, 100
			sent := hostACK(s, 1000, payload)
			sent.tsval, sent.tsecr = 101, 500
			for _, step := range []struct {
				seg segment
				run func(testing.TB, []byte) (int32, []byte)
			}{{data, d.ingressGSO}, {sent, d.egressGSO}} {
				frame, _ := step.seg.build(t)
				step.seg.clearIPLength(frame)
				verdict, out := step.run(t, append([]byte(nil), frame...))
				assert.Equal(t, int32(verdictPass), verdict)
				assert.Equal(t, frame, out)
			}

			after, err := d.Counters()
			require.NoError(t, err)
			assert.Zero(t, after[m2hoCounterIdCNT_MALFORMED])
			assert.Equal(t, uint64(1), after[m2hoCounterIdCNT_TS_STAMPED]-before[m2hoCounterIdCNT_TS_STAMPED], "the data segment's TSval")
			flows, err := d.Flows()
			require.NoError(t, err)
			require.Len(t, flows, 1)
			assert.Equal(t, uint64(payload), flows[0].RxBytes)
			assert.Equal(t, uint32(peerISN+1+payload), flows[0].HighestRxSeq)
		})
	}
}

// TestEgressClockFollowsTime checks the per-CPU copy of the coarse clock
// that egress reads: flows created a few ticks apart carry creation times
// as far apart, within the clock's lag of two ticks.
func TestEgressClockFollowsTime(t *testing.T) {
	d := loadDetached(t, true, 0)
	const apart = 50 * time.Millisecond
	first, second := freshPorts(segment{}), freshPorts(segment{})
	handshake(t, d, first, 7, 7)
	time.Sleep(apart)
	handshake(t, d, second, 7, 7)

	flows, err := d.Flows()
	require.NoError(t, err)
	require.Len(t, flows, 2)
	created := map[uint16]time.Time{}
	for _, f := range flows {
		created[f.Local.Port()] = f.FirstSeen
	}
	elapsed := created[second.localPort].Sub(created[first.localPort])
	// two ticks at HZ=100
	assert.InDelta(t, apart.Seconds(), elapsed.Seconds(), (20 * time.Millisecond).Seconds())
	assert.WithinDuration(t, time.Now(), created[second.localPort], time.Second)
}

// TestFlowTableLoadedSize checks the loaded table against its sizing: as
// many buckets as the programs' mask reaches, no more, which is the memory
// TestFlowTableMemory pins.
func TestFlowTableLoadedSize(t *testing.T) {
	for _, maxFlows := range []uint32{4, 1000, DefaultMaxFlows} {
		t.Run(fmt.Sprint(maxFlows), func(t *testing.T) {
			d := loadDetached(t, true, maxFlows)
			want := flowTableBuckets(maxFlows)
			assert.Equal(t, want, d.objs.FlowTable.MaxEntries())
			assert.Len(t, d.table.buckets, int(want))
			info, err := d.objs.FlowTable.Info()
			require.NoError(t, err)
			memlock, ok := info.Memlock()
			if assert.True(t, ok, "the kernel reports the map's memory") {
				tableBytes := uint64(want) * uint64(unsafe.Sizeof(m2hoFlowBucket{}))
				assert.InDelta(t, tableBytes, memlock, float64(tableBytes)/50+8192, "table memory")
			}
		})
	}
}

// TestFlowFoundAtEverySlot places a flow at each slot position of its
// bucket, by marking the slots before it claimed in both buckets of the
// smallest table, and checks that the flow's packets find it: the search
// tests tags two at a time, so both halves of every pair must match.
func TestFlowFoundAtEverySlot(t *testing.T) {
	for position := range uint32(flowBucketSlots) {
		t.Run(fmt.Sprint(position), func(t *testing.T) {
			d := loadDetached(t, true, 4)
			require.Equal(t, uint32(2), flowTableBuckets(4), "two buckets")
			for bucket := range uint32(2) {
				for n := range position {
					tag, _ := d.table.slot(bucket*flowBucketSlots + n)
					atomic.StoreUint32(tag, uint32(m2hoFlowTagFLOW_TAG_CLAIMED))
				}
			}
			s := freshPorts(segment{timestamps: true})
			handshake(t, d, s, 7, 7)
			key := fixtureFlowKey(s.localPort, s.remotePort)
			slot, _ := flowSlot(t, d, key)
			require.Equal(t, position, slot%flowBucketSlots)
			// without its index entry, a flow the search misses would be
			// created afresh instead of being taken from the index
			require.NoError(t, d.objs.FlowIndex.Delete(&key))

			frame, _ := peerData(s, 0, 1000).build(t)
			d.ingress(t, frame)
			c, err := d.Counters()
			require.NoError(t, err)
			assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_FLOW_CREATED])
			assert.Zero(t, c[m2hoCounterIdCNT_UNTRACKED])
			_, entry := d.table.slot(slot)
			assert.Equal(t, uint64(1000), entry.State.RxBytes)
		})
	}
}

// TestHostSYNOnKnownPorts checks what a host SYN or SYN-ACK does to the
// flow its ports already have. A copy of the handshake segment the flow
// began with (same sequence number: a retransmission, which the host may
// send after the peer's answer passed the hook, should the stack drop that
// answer) changes nothing: the peer may answer it with a bare ACK, which
// would never teach the scale again, and the connection would go unclamped
// for good. Any other sequence number, or any after the connection ended,
// opens a new connection, which starts afresh.
func TestHostSYNOnKnownPorts(t *testing.T) {
	const clampBytes = 20000
	tests := []struct {
		name string
		// seq of the second handshake segment; synAck makes both the
		// host's SYN-ACK of an inbound connection
		seq    uint32
		synAck bool
		// the second segment's scale, and the peer's answer to it (< 0:
		// no answer)
		wscale, answerWScale int
		// closeFirst ends the first connection with the peer's RST
		closeFirst  bool
		wantKnown   bool
		wantScale   uint8
		wantRxBytes uint64
	}{
		{name: "retransmitted SYN, no answer", seq: hostISN, wscale: 7, answerWScale: -1,
			wantKnown: true, wantScale: 7, wantRxBytes: 1000},
		{name: "retransmitted SYN-ACK", seq: hostISN, synAck: true, wscale: 7, answerWScale: -1,
			wantKnown: true, wantScale: 7, wantRxBytes: 1000},
		{name: "new connection, not yet answered", seq: hostISN + 100000, wscale: 2, answerWScale: -1,
			wantKnown: false, wantRxBytes: 0},
		{name: "new connection, answered", seq: hostISN + 100000, wscale: 2, answerWScale: 7,
			wantKnown: true, wantScale: 2, wantRxBytes: 0},
		{name: "new inbound connection", seq: hostISN + 100000, synAck: true, wscale: 2, answerWScale: -1,
			wantKnown: true, wantScale: 2, wantRxBytes: 0},
		{name: "same sequence after a RST", seq: hostISN, closeFirst: true, wscale: 2, answerWScale: 7,
			wantKnown: true, wantScale: 2, wantRxBytes: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := loadDetached(t, true, 0)
			require.NoError(t, d.SetClamp(clampBytes, time.Now().Add(time.Minute)))
			s := freshPorts(segment{timestamps: true, tsval: 5})
			open := func(seq uint32, wscale int) {
				t.Helper()
				seg := hostSYN(s, seq, wscale)
				if tc.synAck {
					seg.ackFlag, seg.ack = true, peerISN+1
				}
				require.Equal(t, int32(verdictPass), verdictOf(t, d, seg, true))
			}
			open(hostISN, 7)
			if !tc.synAck {
				require.Equal(t, int32(verdictPass), verdictOf(t, d, peerSYNACK(s, hostISN, 7), false))
			}
			require.Equal(t, int32(verdictPass), verdictOf(t, d, peerData(s, 0, 1000), false))
			if tc.closeFirst {
				require.Equal(t, int32(verdictPass), verdictOf(t, d, withFlags(peerData(s, 1000, 0), false, true), false))
			}

			open(tc.seq, tc.wscale)
			if tc.answerWScale >= 0 {
				require.Equal(t, int32(verdictPass), verdictOf(t, d, peerSYNACK(s, tc.seq, tc.answerWScale), false))
			}

			f := flowOf(t, d, s)
			assert.Equal(t, tc.wantKnown, f.WScaleKnown)
			assert.Equal(t, tc.wantRxBytes, f.RxBytes)
			if tc.wantKnown {
				assert.Equal(t, tc.wantScale, f.WScale)
				expectWindow(t, d, hostACK(s, 65535, 0), expectedClamp(65535, int(tc.wantScale), clampBytes))
			}
		})
	}
}
