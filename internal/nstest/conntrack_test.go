package nstest

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func addrPort(ip net.IP, port uint16) netip.AddrPort {
	addr, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(addr.Unmap(), port)
}

func TestAddConntrackEntries(t *testing.T) {
	RequireRoot(t)
	ns := NewNS(t, "ct")
	ns.TrackConnections(t)
	client, server, natted := netip.MustParseAddrPort("192.168.1.10:5000"), netip.MustParseAddrPort("203.0.113.1:443"),
		netip.MustParseAddrPort("100.64.0.2:40000")
	client6, server6 := netip.MustParseAddrPort("[2001:db8:2::10]:5000"), netip.MustParseAddrPort("[2001:db8:99::1]:443")
	require.NoError(t, ns.AddConntrackEntries([]ConntrackEntry{
		{Orig: [2]netip.AddrPort{client, server}, Reply: [2]netip.AddrPort{server, natted}, WScaleOrig: 7, WScaleReply: 9},
		{Orig: [2]netip.AddrPort{client6, server6}, Reply: [2]netip.AddrPort{server6, client6}, WScaleOrig: 14},
	}))

	for _, tt := range []struct {
		family                      netlink.InetFamily
		origSrc, replySrc, replyDst netip.AddrPort
	}{
		{unix.AF_INET, client, server, natted},
		{unix.AF_INET6, client6, server6, client6},
	} {
		var flows []*netlink.ConntrackFlow
		require.NoError(t, ns.Do(func() error {
			var err error
			flows, err = netlink.ConntrackTableList(netlink.ConntrackTable, tt.family)
			return err
		}))
		require.Len(t, flows, 1)
		f := flows[0]
		assert.Equal(t, uint8(unix.IPPROTO_TCP), f.Forward.Protocol)
		assert.Equal(t, tt.origSrc, addrPort(f.Forward.SrcIP, f.Forward.SrcPort))
		assert.Equal(t, tt.replySrc, addrPort(f.Reverse.SrcIP, f.Reverse.SrcPort))
		assert.Equal(t, tt.replyDst, addrPort(f.Reverse.DstIP, f.Reverse.DstPort))
		assert.Positive(t, f.TimeOut)
	}

	err := ns.AddConntrackEntries([]ConntrackEntry{{Orig: [2]netip.AddrPort{client, server6}, Reply: [2]netip.AddrPort{server6, client}}})
	assert.ErrorContains(t, err, "mixes address families")
	err = ns.AddConntrackEntries([]ConntrackEntry{{Orig: [2]netip.AddrPort{client, server}, Reply: [2]netip.AddrPort{server, natted}}})
	assert.ErrorIs(t, err, unix.EEXIST, "the entry is there already")
}
