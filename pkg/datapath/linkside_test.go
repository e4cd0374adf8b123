package datapath

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/m2ho/m2ho/internal/logbuf"
	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/handshakes"
)

func TestOffLinkPeers(t *testing.T) {
	const modem, lan, ppp, lo = 2, 3, 4, 1
	addr := func(ifindex int, cidr string) netlink.Addr {
		ip, network, err := net.ParseCIDR(cidr)
		require.NoError(t, err)
		network.IP = ip
		return netlink.Addr{LinkIndex: ifindex, IPNet: network}
	}
	pointToPoint := addr(ppp, "10.0.0.1/32")
	pointToPoint.Peer = addr(ppp, "10.0.0.2/32").IPNet
	peers := offLinkPeersOf([]netlink.Addr{
		addr(lo, "127.0.0.1/8"),
		addr(modem, "100.64.0.2/30"), addr(modem, "2001:db8:1::2/64"), addr(modem, "fe80::1/64"),
		addr(lan, "192.168.1.1/24"), addr(lan, "2001:db8:2::1/64"), addr(lan, "fe80::2/64"),
		pointToPoint,
	}, modem)
	tests := []struct {
		peer   string
		onLink bool
	}{
		{"192.0.2.1", true},
		{"2001:db8:99::1", true},
		{"192.168.1.10", false},       // a LAN client
		{"2001:db8:2::10", false},     // an IPv6 LAN client, routed without NAT
		{"100.64.0.2", false},         // the host's own modem address
		{"192.168.1.1", false},        // the host's own LAN address
		{"100.64.0.1", true},          // the modem's side of its own network
		{"2001:db8:1::1", true},       // likewise in IPv6
		{"fe80::5", true},             // link-local: on any interface
		{"10.0.0.2", false},           // the far end of a point-to-point link
		{"10.0.0.3", true},            // beyond it only by a route
		{"::ffff:192.168.1.10", true}, // handshakes come unmapped; a mapped address is no LAN client's
	}
	for _, tt := range tests {
		t.Run(tt.peer, func(t *testing.T) {
			ends := handshakes.Ends{
				Local:  netip.MustParseAddrPort("100.64.0.2:40000"),
				Remote: netip.AddrPortFrom(netip.MustParseAddr(tt.peer), 443),
			}
			assert.Equal(t, tt.onLink, peers.onLink(ends))
		})
	}
}

// busyRouter is a CPE router's namespace, ue, whose conntrack table holds
// one established download for each of its LAN clients, all NATted out of
// its modem interface veth0 to two servers on the Internet.
type busyRouter struct {
	ue *nstest.NS
	// linkSide are the connections as their ACKs leave veth0.
	linkSide []handshakes.Ends
}

func newBusyRouter(tb testing.TB, clients int) busyRouter {
	tb.Helper()
	_, ue := nstest.ServerUEPair(tb)
	nstest.Pair(tb, ue, nstest.NewNS(tb, "lan"), nstest.Link{AIfname: "lan0", BIfname: "eth0",
		AAddrs: []string{"192.168.0.1/16"}, BAddrs: []string{"192.168.0.2/16"}})
	ue.TrackConnections(tb)
	r := busyRouter{ue: ue}
	wan := netip.MustParseAddr(nstest.UEAddr)
	entries := make([]nstest.ConntrackEntry, clients)
	for i := range entries {
		client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)}), 50000)
		server := netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + i>>15)}), 443)
		natted := netip.AddrPortFrom(wan, uint16(1024+i&0x7fff))
		entries[i] = nstest.ConntrackEntry{
			Orig: [2]netip.AddrPort{client, server}, Reply: [2]netip.AddrPort{server, natted},
			WScaleOrig: 7, WScaleReply: 9,
		}
		r.linkSide = append(r.linkSide, handshakes.Ends{Local: natted, Remote: server})
	}
	require.NoError(tb, ue.AddConntrackEntries(entries))
	return r
}

// TestAdoptBusyRouter attaches to the modem interface of a router whose
// conntrack table holds 65,536 NATted downloads, as many as the handshake
// store holds. Each entry has two sides; only the LAN client's, with its
// ACKs out of the modem, takes a place in the store, so that every
// download's handshake is there for the clamp. With both sides stored, the
// store makes room by forgetting, and half the downloads would stay
// unclamped.
func TestAdoptBusyRouter(t *testing.T) {
	const clients = DefaultMaxFlows
	r := newBusyRouter(t, clients)
	var logs logbuf.Buffer
	started := time.Now()
	dp := openIn(t, r.ue, Options{Iface: "veth0", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Logf("Open took %v with %d conntrack entries", time.Since(started), clients)
	assert.Contains(t, logs.String(), fmt.Sprintf("stored=%d sockets=0 conntrack=%d off_link=%d", clients, clients, clients))

	missing := 0
	var hint m2hoHandshakeHint
	for _, ends := range r.linkSide {
		key := flowKeyOf(ends.Local, ends.Remote)
		if err := dp.objs.HandshakeHints.Lookup(&key, &hint); err != nil {
			missing++
			continue
		}
		assert.Equal(t, m2hoHandshakeHint{Mss: 1500 - 40, Wscale: 7}, hint, "the LAN client's scale, the link's MSS")
	}
	assert.Zero(t, missing, "downloads without their handshake in the store")
}
