package handshakes

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// attr encodes one netlink attribute, padded to four bytes.
func attr(typ uint16, value ...[]byte) []byte {
	var body []byte
	for _, v := range value {
		body = append(body, v...)
	}
	b := make([]byte, nlaHeaderLen, nlaHeaderLen+len(body)+3)
	binary.NativeEndian.PutUint16(b, uint16(nlaHeaderLen+len(body)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, body...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// nested encodes an attribute holding others, with NLA_F_NESTED set as the
// kernel sets it.
func nested(typ uint16, children ...[]byte) []byte {
	return attr(typ|unix.NLA_F_NESTED, children...)
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

// tcpInfo builds a struct tcp_info of the kernel's length with the given
// options, shifts and advertised MSS.
func tcpInfo(options, sndScale, rcvScale uint8, advMSS uint32) []byte {
	info := make([]byte, 232)
	info[tcpInfoOptions] = options
	if littleEndian {
		info[tcpInfoScales] = sndScale | rcvScale<<4
	} else {
		info[tcpInfoScales] = sndScale<<4 | rcvScale
	}
	binary.NativeEndian.PutUint32(info[tcpInfoAdvMSS:], advMSS)
	return info
}

// diagMsg builds a struct inet_diag_msg and its attributes.
func diagMsg(local, remote netip.AddrPort, attrs ...[]byte) []byte {
	msg := make([]byte, inetDiagMsgLen)
	msg[diagFamily] = afInet6
	if local.Addr().Is4() {
		msg[diagFamily] = afInet
	}
	binary.BigEndian.PutUint16(msg[diagSport:], local.Port())
	binary.BigEndian.PutUint16(msg[diagDport:], remote.Port())
	put := func(off int, a netip.Addr) {
		if a.Is4() {
			b := a.As4()
			copy(msg[off:], b[:])
		} else {
			b := a.As16()
			copy(msg[off:], b[:])
		}
	}
	put(diagSrc, local.Addr())
	put(diagDst, remote.Addr())
	msg[diagState] = tcpEstablished
	for _, a := range attrs {
		msg = append(msg, a...)
	}
	return msg
}

var (
	hostV4   = netip.MustParseAddrPort("100.64.0.2:40000")
	peerV4   = netip.MustParseAddrPort("192.0.2.1:443")
	hostV6   = netip.MustParseAddrPort("[2001:db8::2]:40000")
	peerV6   = netip.MustParseAddrPort("[2001:db8:1::1]:443")
	mappedV4 = netip.AddrPortFrom(netip.AddrFrom16(hostV4.Addr().As16()), hostV4.Port())
	loopback = netip.MustParseAddrPort("127.0.0.1:8080")
)

// inState sets a struct inet_diag_msg's TCP state.
func inState(msg []byte, state uint8) []byte {
	msg[diagState] = state
	return msg
}

func TestParseSocket(t *testing.T) {
	scaled := attr(inetDiagInfo, tcpInfo(tcpiOptWScale|1, 9, 7, 1460))
	tests := []struct {
		name    string
		msg     []byte
		want    Handshake
		outcome outcome
		wantErr bool
	}{
		{name: "IPv4", msg: diagMsg(hostV4, peerV4, scaled),
			want: Handshake{Local: hostV4, Remote: peerV4, WScale: 7, MSS: 1460, Source: FromSocket}, outcome: settled},
		{name: "IPv6", msg: diagMsg(hostV6, peerV6, scaled),
			want: Handshake{Local: hostV6, Remote: peerV6, WScale: 7, MSS: 1460, Source: FromSocket}, outcome: settled},
		{name: "IPv6 socket talking IPv4", msg: diagMsg(mappedV4, netip.AddrPortFrom(netip.AddrFrom16(peerV4.Addr().As16()), 443), scaled),
			want: Handshake{Local: hostV4, Remote: peerV4, WScale: 7, MSS: 1460, Source: FromSocket}, outcome: settled},
		{name: "scaling not agreed: a shift left over is ignored", msg: diagMsg(hostV4, peerV4, attr(inetDiagInfo, tcpInfo(1, 0, 7, 1400))),
			want: Handshake{Local: hostV4, Remote: peerV4, WScale: 0, MSS: 1400, Source: FromSocket}, outcome: settled},
		{name: "other attributes around the info", msg: diagMsg(hostV4, peerV4, attr(1, []byte{1, 2, 3, 4, 5}), scaled, attr(8, []byte{0})),
			want: Handshake{Local: hostV4, Remote: peerV4, WScale: 7, MSS: 1460, Source: FromSocket}, outcome: settled},
		{name: "handshake under way: the ends alone", msg: inState(diagMsg(hostV4, peerV4, scaled), tcpSynSent),
			want: Handshake{Local: hostV4, Remote: peerV4, Source: FromSocket}, outcome: underWay},
		{name: "request socket: no info", msg: inState(diagMsg(hostV6, peerV6), tcpSynRecv),
			want: Handshake{Local: hostV6, Remote: peerV6, Source: FromSocket}, outcome: underWay},
		{name: "loopback", msg: diagMsg(loopback, netip.MustParseAddrPort("127.0.0.1:50000"), scaled), outcome: ignored},
		{name: "loopback under way", msg: inState(diagMsg(loopback, netip.MustParseAddrPort("127.0.0.1:50000")), tcpSynSent), outcome: ignored},
		{name: "short message", msg: diagMsg(hostV4, peerV4)[:inetDiagMsgLen-1], wantErr: true},
		{name: "no info", msg: diagMsg(hostV4, peerV4), wantErr: true},
		{name: "info too short", msg: diagMsg(hostV4, peerV4, attr(inetDiagInfo, make([]byte, tcpInfoMinLen-1))), wantErr: true},
		{name: "attribute past the end", msg: diagMsg(hostV4, peerV4, scaled)[:inetDiagMsgLen+40], wantErr: true},
		{name: "unknown family", msg: func() []byte { m := diagMsg(hostV4, peerV4, scaled); m[diagFamily] = 7; return m }(), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, o, err := parseSocket(tt.msg)
			if tt.wantErr {
				require.ErrorIs(t, err, errMalformed)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.outcome, o)
			if o != ignored {
				assert.Equal(t, tt.want, h)
			}
		})
	}
}

// ctEntry builds a conntrack message: the nfgenmsg header, both tuples and
// the TCP protocol info.
func ctEntry(family uint8, orig, reply [2]netip.AddrPort, proto uint8, tcp ...[]byte) []byte {
	tuple := func(typ uint16, src, dst netip.AddrPort) []byte {
		srcType, dstType := uint16(ctaIPv4Src), uint16(ctaIPv4Dst)
		srcBytes, dstBytes := src.Addr().AsSlice(), dst.Addr().AsSlice()
		if family == afInet6 {
			srcType, dstType = ctaIPv6Src, ctaIPv6Dst
		}
		return nested(typ,
			nested(ctaTupleIP, attr(srcType, srcBytes), attr(dstType, dstBytes)),
			nested(ctaTupleProto, attr(ctaProtoNum, []byte{proto}),
				attr(ctaProtoSport, be16(src.Port())), attr(ctaProtoDport, be16(dst.Port()))))
	}
	msg := []byte{family, unix.NFNETLINK_V0, 0, 0}
	msg = append(msg, tuple(ctaTupleOrig, orig[0], orig[1])...)
	msg = append(msg, tuple(ctaTupleReply, reply[0], reply[1])...)
	msg = append(msg, attr(3, []byte{0, 0, 0, 0x0e})...) // CTA_STATUS
	if len(tcp) > 0 {
		msg = append(msg, nested(ctaProtoinfo, nested(ctaProtoinfoTCP, tcp...))...)
	}
	return msg
}

// tcpInfoAttrs is a CTA_PROTOINFO_TCP's content.
func tcpInfoAttrs(state, scaleOrig, scaleReply, flagsOrig, flagsReply uint8) [][]byte {
	return [][]byte{
		attr(ctaTCPState, []byte{state}),
		attr(ctaTCPWScaleOrig, []byte{scaleOrig}),
		attr(ctaTCPWScaleReply, []byte{scaleReply}),
		attr(ctaTCPFlagsOrig, []byte{flagsOrig, 0}),
		attr(ctaTCPFlagsReply, []byte{flagsReply, 0}),
	}
}

func TestParseConntrack(t *testing.T) {
	// A LAN client behind NAT: 192.168.1.10:5000 -> 192.0.2.1:443 leaves
	// the modem as 100.64.0.2:40000.
	lanClient := netip.MustParseAddrPort("192.168.1.10:5000")
	natted := [2][2]netip.AddrPort{{lanClient, peerV4}, {peerV4, hostV4}}
	sackAndScale := uint8(ctTCPFlagWindowScale | 0x02)
	established := tcpInfoAttrs(tcpConntrackEstablished, 8, 7, sackAndScale, sackAndScale)
	tests := []struct {
		name    string
		msg     []byte
		want    entrySides
		outcome outcome
		wantErr bool
	}{
		{name: "NAT: the originator's ACKs leave translated", msg: ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP, established...),
			want: entrySides{
				{Local: hostV4, Remote: peerV4, WScale: 8, Source: FromConntrack},
				{Local: peerV4, Remote: lanClient, WScale: 7, Source: FromConntrack},
			}, outcome: settled},
		{name: "IPv6 without NAT", msg: ctEntry(afInet6, [2]netip.AddrPort{hostV6, peerV6}, [2]netip.AddrPort{peerV6, hostV6}, unix.IPPROTO_TCP, established...),
			want: entrySides{
				{Local: hostV6, Remote: peerV6, WScale: 8, Source: FromConntrack},
				{Local: peerV6, Remote: hostV6, WScale: 7, Source: FromConntrack},
			}, outcome: settled},
		{name: "FIN_WAIT still carries data", msg: ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP, tcpInfoAttrs(tcpConntrackFinWait, 8, 7, sackAndScale, sackAndScale)...),
			want: entrySides{
				{Local: hostV4, Remote: peerV4, WScale: 8, Source: FromConntrack},
				{Local: peerV4, Remote: lanClient, WScale: 7, Source: FromConntrack},
			}, outcome: settled},
		{name: "SYN sent: the ends alone", msg: ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP, tcpInfoAttrs(tcpConntrackSynSent, 8, 0, sackAndScale, 0)...),
			want: entrySides{
				{Local: hostV4, Remote: peerV4, Source: FromConntrack},
				{Local: peerV4, Remote: lanClient, Source: FromConntrack},
			}, outcome: underWay},
		{name: "SYN-ACK sent", msg: ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP, tcpInfoAttrs(tcpConntrackSynRecv, 8, 7, sackAndScale, sackAndScale)...),
			want: entrySides{
				{Local: hostV4, Remote: peerV4, Source: FromConntrack},
				{Local: peerV4, Remote: lanClient, Source: FromConntrack},
			}, outcome: underWay},
		// as the kernel marks a pickup: SACK permitted, liberal
		{name: "picked up mid-stream", msg: ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP, tcpInfoAttrs(tcpConntrackEstablished, 0, 0, 0x0a, 0x0a)...), outcome: unknownScale},
		{name: "one side offered no scale: no scaling", msg: ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP, tcpInfoAttrs(tcpConntrackEstablished, 0, 0, sackAndScale, 0x02)...),
			want: entrySides{
				{Local: hostV4, Remote: peerV4, Source: FromConntrack},
				{Local: peerV4, Remote: lanClient, Source: FromConntrack},
			}, outcome: settled},
		{name: "liberal, one offer missing", msg: ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP, tcpInfoAttrs(tcpConntrackEstablished, 0, 0, sackAndScale|ctTCPFlagBeLiberal, 0x02)...), outcome: unknownScale},
		{name: "liberal with both offers (flow offload)", msg: ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP, tcpInfoAttrs(tcpConntrackEstablished, 8, 7, sackAndScale|ctTCPFlagBeLiberal, sackAndScale|ctTCPFlagBeLiberal)...),
			want: entrySides{
				{Local: hostV4, Remote: peerV4, WScale: 8, Source: FromConntrack},
				{Local: peerV4, Remote: lanClient, WScale: 7, Source: FromConntrack},
			}, outcome: settled},
		{name: "TIME_WAIT", msg: ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP, tcpInfoAttrs(7, 8, 7, sackAndScale, sackAndScale)...)},
		{name: "UDP", msg: ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_UDP)},
		{name: "loopback", msg: ctEntry(afInet, [2]netip.AddrPort{loopback, loopback}, [2]netip.AddrPort{loopback, loopback}, unix.IPPROTO_TCP, established...)},
		{name: "TCP without protocol info", msg: ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP), wantErr: true},
		{name: "empty TCP state", msg: ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP, attr(ctaTCPState)), wantErr: true},
		{name: "no reply tuple", msg: func() []byte {
			m := ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP, established...)
			reply := 4 + int(binary.NativeEndian.Uint16(m[4:]))
			replyLen := int(binary.NativeEndian.Uint16(m[reply:]))
			return append(m[:reply:reply], m[reply+replyLen:]...)
		}(), wantErr: true},
		{name: "truncated", msg: ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP, established...)[:30], wantErr: true},
		{name: "short address", msg: func() []byte {
			m := ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP, established...)
			// first address attribute: nfgenmsg, tuple header, IP header
			binary.NativeEndian.PutUint16(m[4+4+4:], 4+2)
			return m
		}(), wantErr: true},
		{name: "no header", msg: []byte{2, 0}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, o, err := parseConntrack(tt.msg)
			if tt.wantErr {
				require.ErrorIs(t, err, errMalformed)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.outcome, o)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseIntoCounts(t *testing.T) {
	var f Found
	found := gathering(&f, nil)
	parseSocketInto(diagMsg(hostV4, peerV4, attr(inetDiagInfo, tcpInfo(tcpiOptWScale, 0, 7, 1460))), found)
	parseSocketInto([]byte{1, 2, 3}, found)
	parseSocketInto(diagMsg(loopback, loopback, attr(inetDiagInfo, tcpInfo(0, 0, 0, 1460))), found)
	parseConntrackInto([]byte{1}, found)
	parseConntrackInto(ctEntry(afInet, [2]netip.AddrPort{hostV4, peerV4}, [2]netip.AddrPort{peerV4, hostV4}, unix.IPPROTO_TCP,
		tcpInfoAttrs(tcpConntrackEstablished, 0, 0, ctTCPFlagBeLiberal, ctTCPFlagBeLiberal)...), found)
	parseSocketInto(inState(diagMsg(hostV6, peerV6), tcpSynSent), found)
	parseConntrackInto(ctEntry(afInet, [2]netip.AddrPort{hostV4, peerV4}, [2]netip.AddrPort{peerV4, hostV4}, unix.IPPROTO_TCP,
		tcpInfoAttrs(tcpConntrackSynSent, 0, 0, 0, 0)...), found)
	assert.Len(t, f.Handshakes, 1)
	assert.Equal(t, []Ends{{hostV6, peerV6}, {hostV4, peerV4}, {peerV4, hostV4}}, f.Pending)
	assert.Equal(t, 2, f.Malformed)
	assert.Equal(t, 1, f.Unknown)
	assert.Zero(t, f.OffLink)
}

// TestCollectorLeavesOutOffLink: of a NATted entry's two sides, the LAN
// client's, whose peer is on the LAN, is left out, settled or under way.
func TestCollectorLeavesOutOffLink(t *testing.T) {
	lanClient := netip.MustParseAddrPort("192.168.1.10:5000")
	lan := netip.MustParsePrefix("192.168.0.0/16")
	natted := [2][2]netip.AddrPort{{lanClient, peerV4}, {peerV4, hostV4}}
	scaled := uint8(ctTCPFlagWindowScale)
	var f Found
	into := gathering(&f, func(e Ends) bool { return !lan.Contains(e.Remote.Addr()) })
	parseConntrackInto(ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP,
		tcpInfoAttrs(tcpConntrackEstablished, 8, 7, scaled, scaled)...), into)
	parseConntrackInto(ctEntry(afInet, [2]netip.AddrPort{lanClient, peerV4}, [2]netip.AddrPort{peerV4, hostV4}, unix.IPPROTO_TCP,
		tcpInfoAttrs(tcpConntrackSynSent, 8, 0, scaled, 0)...), into)
	assert.Equal(t, []Handshake{{Local: hostV4, Remote: peerV4, WScale: 8, Source: FromConntrack}}, f.Handshakes)
	assert.Equal(t, []Ends{{hostV4, peerV4}}, f.Pending)
	assert.Equal(t, 2, f.OffLink)
}

func TestWalkAttrs(t *testing.T) {
	tests := []struct {
		name    string
		b       []byte
		types   []uint16
		wantErr bool
	}{
		{name: "empty", b: nil},
		{name: "two, the first padded", b: append(attr(1, []byte{9}), attr(2|unix.NLA_F_NESTED)...), types: []uint16{1, 2}},
		{name: "last one unpadded", b: attr(3, []byte{1, 2, 3, 4, 5})[:9], types: []uint16{3}},
		{name: "length below the header", b: []byte{2, 0, 1, 0}, wantErr: true},
		{name: "length past the end", b: []byte{16, 0, 1, 0, 0}, wantErr: true},
		{name: "bytes left over", b: append(attr(1), 0, 0), types: []uint16{1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var types []uint16
			err := walkAttrs(tt.b, func(typ uint16, _ []byte) error {
				types = append(types, typ)
				return nil
			})
			if tt.wantErr {
				assert.ErrorIs(t, err, errMalformed)
			} else {
				assert.NoError(t, err)
			}
			assert.Equal(t, tt.types, types)
		})
	}
}

// The parsers meet whatever the kernel sends; no input may panic them or
// come back both accepted and in error.
func FuzzParseSocket(f *testing.F) {
	f.Add(diagMsg(hostV4, peerV4, attr(inetDiagInfo, tcpInfo(tcpiOptWScale, 0, 7, 1460))))
	f.Add(diagMsg(hostV6, peerV6, attr(1, []byte{1}), attr(inetDiagInfo, tcpInfo(0, 0, 0, 1220))))
	f.Add(inState(diagMsg(hostV4, peerV4), tcpSynRecv))
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, o, err := parseSocket(msg)
		if err != nil {
			assert.Equal(t, ignored, o)
			assert.ErrorIs(t, err, errMalformed)
			return
		}
		if o != ignored {
			assert.LessOrEqual(t, h.WScale, uint8(15))
			assert.True(t, h.Local.IsValid() && h.Remote.IsValid())
		}
	})
}

func FuzzParseConntrack(f *testing.F) {
	flags := uint8(ctTCPFlagWindowScale)
	f.Add(ctEntry(afInet, [2]netip.AddrPort{hostV4, peerV4}, [2]netip.AddrPort{peerV4, hostV4}, unix.IPPROTO_TCP,
		tcpInfoAttrs(tcpConntrackEstablished, 7, 7, flags, flags)...))
	f.Add(ctEntry(afInet6, [2]netip.AddrPort{hostV6, peerV6}, [2]netip.AddrPort{peerV6, hostV6}, unix.IPPROTO_TCP,
		tcpInfoAttrs(tcpConntrackEstablished, 14, 2, flags, flags)...))
	f.Add(ctEntry(afInet, [2]netip.AddrPort{hostV4, peerV4}, [2]netip.AddrPort{peerV4, hostV4}, unix.IPPROTO_TCP,
		tcpInfoAttrs(tcpConntrackSynSent, 7, 0, flags, 0)...))
	f.Fuzz(func(t *testing.T, msg []byte) {
		sides, o, err := parseConntrack(msg)
		if err != nil {
			assert.Zero(t, sides)
			assert.ErrorIs(t, err, errMalformed)
			return
		}
		switch o {
		case settled, underWay:
			for _, h := range sides {
				assert.True(t, h.Local.IsValid() && h.Remote.IsValid())
			}
		default:
			assert.Zero(t, sides)
		}
	})
}

// BenchmarkParseConntrack reads the conntrack entries of a busy CPE router,
// as each scan does at start and after the modem interface came back: one
// NATted, established TCP entry after another, each handshake handed on as
// it is read (ScanEach, as the datapath scans). "every_side" hands on both
// handshakes of each entry; "link_side" only the one whose ACKs go out to
// the Internet, turning down the side of the LAN client, as the datapath's
// scanner does.
func BenchmarkParseConntrack(b *testing.B) {
	lanClient := netip.MustParseAddrPort("192.168.1.10:5000")
	natted := [2][2]netip.AddrPort{{lanClient, peerV4}, {peerV4, hostV4}}
	scaled := uint8(ctTCPFlagWindowScale)
	msg := ctEntry(afInet, natted[0], natted[1], unix.IPPROTO_TCP,
		tcpInfoAttrs(tcpConntrackEstablished, 8, 7, scaled, scaled)...)
	lan := netip.MustParsePrefix("192.168.0.0/16")
	const entries = 65536
	for _, bc := range []struct {
		name   string
		onLink func(Ends) bool
		kept   int
	}{
		{name: "every_side", kept: 2 * entries},
		{name: "link_side", onLink: func(e Ends) bool { return !lan.Contains(e.Remote.Addr()) }, kept: entries},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var found Found
				kept := 0
				into := collector{found: &found, onLink: bc.onLink, visit: func(Handshake) { kept++ }}
				for range entries {
					parseConntrackInto(msg, into)
				}
				if kept != bc.kept || kept+found.OffLink != 2*entries {
					b.Fatalf("%d handshakes kept, %d off the link, from %d entries", kept, found.OffLink, entries)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*entries), "ns/entry")
		})
	}
}
