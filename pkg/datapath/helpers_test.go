package datapath

import (
	"encoding/binary"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/nstest"
)

// loadDetached loads the programs without attaching them.
func loadDetached(tb testing.TB, rawIP bool, maxFlows uint32) *Datapath {
	tb.Helper()
	return loadDetachedWithGap(tb, rawIP, maxFlows, DefaultBurstGap)
}

func loadDetachedWithGap(tb testing.TB, rawIP bool, maxFlows uint32, burstGap time.Duration) *Datapath {
	tb.Helper()
	d, err := tryLoadDetached(tb, rawIP, maxFlows, burstGap, "")
	require.NoError(tb, err)
	return d
}

// tryLoadDetached loads the programs without attaching them, with their
// flow state pinned in pinDir when set, and closes them after the test.
func tryLoadDetached(tb testing.TB, rawIP bool, maxFlows uint32, burstGap time.Duration, pinDir string) (*Datapath, error) {
	tb.Helper()
	nstest.RequireRoot(tb)
	if maxFlows == 0 {
		maxFlows = DefaultMaxFlows
	}
	d, err := loadDatapath(rawIP, burstGap, maxFlows, pinDir, slog.New(slog.DiscardHandler), "test")
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { _ = d.Close() })
	return d, nil
}

// trackedFlow returns the first tracked flow that match accepts.
func trackedFlow(d *Datapath, match func(Flow) bool) (Flow, bool, error) {
	flows, err := d.Flows()
	if err != nil {
		return Flow{}, false, err
	}
	for _, f := range flows {
		if match(f) {
			return f, true, nil
		}
	}
	return Flow{}, false, nil
}

// Verdicts as the programs return them: TC_ACT_UNSPEC lets the packet go
// on (TCX_NEXT), TC_ACT_SHOT drops it.
const (
	verdictPass = -1
	verdictDrop = 2
)

// runProg runs prog once on frame and returns the verdict and output bytes.
func runProg(tb testing.TB, prog *ebpf.Program, frame []byte) (int32, []byte) {
	tb.Helper()
	return runProgContext(tb, prog, frame, nil)
}

// runProgGSO runs prog once on frame as a GSO packet of segments of
// gsoSize bytes.
func runProgGSO(tb testing.TB, prog *ebpf.Program, frame []byte, gsoSize uint32) (int32, []byte) {
	tb.Helper()
	return runProgContext(tb, prog, frame, gsoContext(tb, gsoSize))
}

// runProgContext is runProg with the __sk_buff skbCtx (nil: the kernel's
// default).
func runProgContext(tb testing.TB, prog *ebpf.Program, frame []byte, skbCtx any) (int32, []byte) {
	tb.Helper()
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256), Context: skbCtx}
	ret, err := prog.Run(opts)
	require.NoError(tb, err)
	return int32(ret), opts.DataOut
}

// gsoContext is a struct __sk_buff whose only set field is gso_size, laid
// out as the running kernel's, from the kernel's BTF.
func gsoContext(tb testing.TB, gsoSize uint32) []byte {
	tb.Helper()
	spec, err := btf.LoadKernelSpec()
	require.NoError(tb, err)
	var skb *btf.Struct
	require.NoError(tb, spec.TypeByName("__sk_buff", &skb))
	i := slices.IndexFunc(skb.Members, func(m btf.Member) bool { return m.Name == "gso_size" })
	require.NotEqual(tb, -1, i, "struct __sk_buff has no gso_size")
	skbCtx := make([]byte, skb.Size)
	binary.NativeEndian.PutUint32(skbCtx[skb.Members[i].Offset.Bytes():], gsoSize)
	return skbCtx
}

func (d *Datapath) egress(tb testing.TB, frame []byte) (int32, []byte) {
	tb.Helper()
	return runProg(tb, d.objs.M2hoEgress, frame)
}

func (d *Datapath) ingress(tb testing.TB, frame []byte) (int32, []byte) {
	tb.Helper()
	return runProg(tb, d.objs.M2hoIngress, frame)
}

// gsoFixtureSize is the segment size of the fixtures' GSO packets.
const gsoFixtureSize = 1000

func (d *Datapath) egressGSO(tb testing.TB, frame []byte) (int32, []byte) {
	tb.Helper()
	return runProgGSO(tb, d.objs.M2hoEgress, frame, gsoFixtureSize)
}

func (d *Datapath) ingressGSO(tb testing.TB, frame []byte) (int32, []byte) {
	tb.Helper()
	return runProgGSO(tb, d.objs.M2hoIngress, frame, gsoFixtureSize)
}

var (
	localV4  = net.IPv4(10, 0, 0, 2).To4()
	remoteV4 = net.IPv4(192, 0, 2, 1).To4()
	localV6  = net.ParseIP("2001:db8::2")
	remoteV6 = net.ParseIP("2001:db8:1::1")
)

// segment describes a TCP segment for the fixtures.
type segment struct {
	ipv6     bool
	ethernet bool     // Ethernet framing, raw IP otherwise
	vlans    []uint16 // 802.1Q / 802.1ad tags, outermost first (Ethernet only)
	egress   bool     // from the host to the peer; ingress otherwise

	localPort, remotePort uint16
	seq, ack              uint32
	syn, ackFlag          bool
	fin, rst, psh         bool
	window                uint16
	payload               int

	mss        uint16 // 0: no MSS option
	wscale     int    // <0: no window scale option
	timestamps bool
	tsval      uint32
	tsecr      uint32
	sack       bool // a SACK block (after the timestamps)
	// leadingOptions go before all the options above
	leadingOptions []layers.TCPOption

	ipv4Options bool    // IPv4: 8 bytes of options (NOP, timestamp-free)
	ipv6Ext     []uint8 // IPv6: extension header types before TCP
}

// ipv6ExtLen is the length of an extension header the builder inserts:
// 8 bytes, but 24 for an authentication header (12 and a 96-bit ICV),
// whose length field counts 4-byte units less 2 where the others count
// 8-byte units less 1: the two rules give different lengths for it.
func ipv6ExtLen(t uint8) int {
	if t == uint8(layers.IPProtocolAH) {
		return 24
	}
	return 8
}

// build serialises the segment with a valid TCP checksum. It returns the
// frame and the offset of the TCP header in it.
func (s segment) build(tb testing.TB) ([]byte, int) {
	tb.Helper()
	src, dst := localV4, remoteV4
	if s.ipv6 {
		src, dst = localV6, remoteV6
	}
	sport, dport := s.localPort, s.remotePort
	if !s.egress {
		src, dst = dst, src
		sport, dport = dport, sport
	}
	tcp := &layers.TCP{
		SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport),
		Seq: s.seq, Ack: s.ack, Window: s.window,
		SYN: s.syn, ACK: s.ackFlag, FIN: s.fin, RST: s.rst, PSH: s.psh,
	}
	tcp.Options = append(tcp.Options, s.leadingOptions...)
	if s.mss != 0 {
		tcp.Options = append(tcp.Options, layers.TCPOption{OptionType: layers.TCPOptionKindMSS, OptionLength: 4,
			OptionData: binary.BigEndian.AppendUint16(nil, s.mss)})
	}
	if s.sack && s.syn {
		tcp.Options = append(tcp.Options, layers.TCPOption{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2})
	}
	if s.timestamps {
		data := binary.BigEndian.AppendUint32(nil, s.tsval)
		tcp.Options = append(tcp.Options,
			layers.TCPOption{OptionType: layers.TCPOptionKindNop},
			layers.TCPOption{OptionType: layers.TCPOptionKindNop},
			layers.TCPOption{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10,
				OptionData: binary.BigEndian.AppendUint32(data, s.tsecr)})
	}
	if s.wscale >= 0 {
		tcp.Options = append(tcp.Options,
			layers.TCPOption{OptionType: layers.TCPOptionKindNop},
			layers.TCPOption{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{byte(s.wscale)}})
	}
	if s.sack && !s.syn {
		block := binary.BigEndian.AppendUint32(nil, s.ack+1000)
		tcp.Options = append(tcp.Options,
			layers.TCPOption{OptionType: layers.TCPOptionKindNop},
			layers.TCPOption{OptionType: layers.TCPOptionKindNop},
			layers.TCPOption{OptionType: layers.TCPOptionKindSACK, OptionLength: 10,
				OptionData: binary.BigEndian.AppendUint32(block, s.ack+2000)})
	}
	payload := make([]byte, s.payload)
	for i := range payload {
		payload[i] = byte(i * 7)
	}

	var l3 []gopacket.SerializableLayer
	var ethType layers.EthernetType
	if s.ipv6 {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: src, DstIP: dst}
		require.NoError(tb, tcp.SetNetworkLayerForChecksum(ip))
		l3 = append(l3, ip)
		ethType = layers.EthernetTypeIPv6
	} else {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src, DstIP: dst, Flags: layers.IPv4DontFragment}
		if s.ipv4Options {
			ip.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 1},
				{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
		}
		require.NoError(tb, tcp.SetNetworkLayerForChecksum(ip))
		l3 = append(l3, ip)
		ethType = layers.EthernetTypeIPv4
	}
	buf := gopacket.NewSerializeBuffer()
	all := append(l3, tcp, gopacket.Payload(payload))
	require.NoError(tb, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, all...))
	packet := append([]byte(nil), buf.Bytes()...)

	if s.ipv6 && len(s.ipv6Ext) > 0 {
		packet = insertIPv6Ext(packet, s.ipv6Ext)
	}
	l4 := 20
	if s.ipv6 {
		l4 = 40
		for _, t := range s.ipv6Ext {
			l4 += ipv6ExtLen(t)
		}
	} else if s.ipv4Options {
		l4 = 28
	}
	if !s.ethernet {
		return packet, l4
	}
	var l2 []byte
	l2 = append(l2, 0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2)
	for i, vid := range s.vlans {
		tpid := uint16(0x8100)
		if i == 0 && len(s.vlans) > 1 {
			tpid = 0x88a8
		}
		l2 = binary.BigEndian.AppendUint16(l2, tpid)
		l2 = binary.BigEndian.AppendUint16(l2, vid)
	}
	l2 = binary.BigEndian.AppendUint16(l2, uint16(ethType))
	return append(l2, packet...), len(l2) + l4
}

// clearIPLength sets the IP length field of frame, built from s, to 0, as
// BIG TCP does in GSO packets above 64 KB.
func (s segment) clearIPLength(frame []byte) {
	field := s.l3Offset() + 2 // IPv4 total length
	if s.ipv6 {
		field = s.l3Offset() + 4 // IPv6 payload length
	}
	frame[field], frame[field+1] = 0, 0
}

// insertIPv6Ext inserts one extension header per type between the IPv6
// header and TCP. The TCP checksum does not cover them.
func insertIPv6Ext(packet []byte, types []uint8) []byte {
	out := append([]byte(nil), packet[:40]...)
	out[6] = types[0]
	for i, t := range types {
		next := uint8(layers.IPProtocolTCP)
		if i+1 < len(types) {
			next = types[i+1]
		}
		ext := make([]byte, ipv6ExtLen(t))
		ext[0] = next
		switch t {
		case uint8(layers.IPProtocolAH):
			ext[1] = uint8(len(ext)/4 - 2)
		case uint8(layers.IPProtocolIPv6Fragment):
			// offset 0, more fragments
			ext[3] = 1
		default:
			ext[1] = uint8(len(ext)/8 - 1)
			if t != uint8(layers.IPProtocolIPv6Routing) {
				ext[2], ext[3] = 1, 4 // PadN filling the header
			}
		}
		out = append(out, ext...)
	}
	out = append(out, packet[40:]...)
	binary.BigEndian.PutUint16(out[4:6], uint16(len(out)-40))
	return out
}

// tcpChecksumOK verifies the TCP checksum of the frame independently of the
// builder, walking the headers again. l4 is the TCP header offset.
func tcpChecksumOK(frame []byte, l4 int, ipv6 bool, l3 int) bool {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	var lengthField, segLen int
	if ipv6 {
		lengthField = int(binary.BigEndian.Uint16(frame[l3+4:]))
		segLen = l3 + 40 + lengthField - l4
		add(frame[l3+8 : l3+40])
	} else {
		lengthField = int(binary.BigEndian.Uint16(frame[l3+2:]))
		segLen = l3 + lengthField - l4
		add(frame[l3+12 : l3+20])
	}
	if lengthField == 0 {
		// BIG TCP: the segment runs to the end of the frame
		segLen = len(frame) - l4
	}
	sum += uint32(layers.IPProtocolTCP) + uint32(segLen)
	add(frame[l4 : l4+segLen])
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum == 0xffff
}

// Offsets in the TCP header of the window and, right after it, the
// checksum.
const tcpWindowOffset, tcpChecksumOffset = 14, 16

func tcpWindow(frame []byte, l4 int) uint16 {
	return binary.BigEndian.Uint16(frame[l4+tcpWindowOffset:])
}

// syntheticFlows returns n distinct flows between the fixture addresses,
// with a known window scale, none of them the fixtures' own flow.
func syntheticFlows(n int) ([]m2hoFlowKey, []m2hoFlowState) {
	keys := make([]m2hoFlowKey, n)
	states := make([]m2hoFlowState, n)
	for i := range keys {
		keys[i] = fixtureFlowKey(uint16(i), 444+uint16(i>>16))
		states[i].Flags = uint32(m2hoFlowFlagsFLOW_WSCALE_KNOWN)
	}
	return keys, states
}

// fixtureFlowKey is the key of an IPv4 flow between the fixture addresses.
func fixtureFlowKey(localPort, remotePort uint16) m2hoFlowKey {
	return flowKeyOf(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, 2}), localPort),
		netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, 1}), remotePort))
}

// insertFlows tracks one flow per key, created by the egress program from
// the host's SYN as in traffic, and then gives it states[i].
func insertFlows(tb testing.TB, d *Datapath, keys []m2hoFlowKey, states []m2hoFlowState) {
	tb.Helper()
	for i, key := range keys {
		frame, _ := segment{egress: true, syn: true, localPort: key.LocalPort, remotePort: key.RemotePort}.build(tb)
		d.egress(tb, frame)
		setFlowState(tb, d, key, states[i])
	}
}

// flowSlot returns the slot number of a tracked flow and its entry.
func flowSlot(tb testing.TB, d *Datapath, key m2hoFlowKey) (uint32, m2hoFlowEntry) {
	tb.Helper()
	var (
		slot  uint32
		entry m2hoFlowEntry
	)
	require.NoError(tb, d.objs.FlowIndex.Lookup(&key, &slot))
	require.True(tb, d.table.live(slot, &key, &entry), "slot %d", slot)
	return slot, entry
}

// setFlowState overwrites the state of a tracked flow.
func setFlowState(tb testing.TB, d *Datapath, key m2hoFlowKey, state m2hoFlowState) {
	tb.Helper()
	slot, _ := flowSlot(tb, d, key)
	_, entry := d.table.slot(slot)
	entry.State = state
}
