package handshakes

import (
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/nstest"
)

// smallReceiveBuffer makes a socket announce no window scaling need: with
// its receive buffer locked this small, Linux picks shift 0.
func smallReceiveBuffer(_, _ string, c syscall.RawConn) error {
	var sockErr error
	err := c.Control(func(fd uintptr) {
		sockErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 8192)
	})
	if err != nil {
		return err
	}
	return sockErr
}

type connection struct {
	local, remote netip.AddrPort
}

// connect opens a connection from client to a listener on server (a
// dual-stack one for an IPv4 server: its accepted socket is an IPv6 socket
// talking IPv4) and returns both ends as each socket sees them. The
// client's receive buffer is small; the server's is the default.
func connect(t *testing.T, ns *nstest.NS, client, server netip.Addr) (clientEnd, serverEnd connection) {
	t.Helper()
	require.NoError(t, ns.Do(func() error {
		listenAddr := netip.AddrPortFrom(server, 0).String()
		if server.Is4() {
			listenAddr = ":0"
		}
		ln, err := net.Listen("tcp", listenAddr)
		if err != nil {
			return err
		}
		t.Cleanup(func() { ln.Close() })
		port := ln.Addr().(*net.TCPAddr).AddrPort().Port()
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(client, 0)), Control: smallReceiveBuffer}
		c, err := d.Dial("tcp", netip.AddrPortFrom(server, port).String())
		if err != nil {
			return err
		}
		t.Cleanup(func() { c.Close() })
		s, err := ln.Accept()
		if err != nil {
			return err
		}
		t.Cleanup(func() { s.Close() })
		// an IPv6 socket talking IPv4 names its ends v4-mapped
		unmapped := func(a net.Addr) netip.AddrPort {
			ap := a.(*net.TCPAddr).AddrPort()
			return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		}
		end := func(conn net.Conn) connection {
			return connection{unmapped(conn.LocalAddr()), unmapped(conn.RemoteAddr())}
		}
		clientEnd, serverEnd = end(c), end(s)
		return nil
	}))
	return clientEnd, serverEnd
}

// byEnds indexes handshakes by their local and remote ends.
func byEnds(t *testing.T, hs []Handshake) map[connection]Handshake {
	t.Helper()
	m := make(map[connection]Handshake, len(hs))
	for _, h := range hs {
		_, dup := m[connection{h.Local, h.Remote}]
		assert.False(t, dup, "one handshake per connection end: %+v", h)
		m[connection{h.Local, h.Remote}] = h
	}
	return m
}

// TestScanOpenConnections opens real connections, IPv4 (one end an IPv6
// socket talking IPv4) and IPv6, whose two ends scale differently, and
// finds each end's own scale through sock_diag and, with conntrack
// following the namespace, the same through conntrack.
func TestScanOpenConnections(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.NewNS(t, "hs")
	ns.TrackConnections(t)
	// addresses that are not loopback ones, on the namespace's own lo: no
	// link to wait for, and they stay local
	for _, cidr := range []string{"10.99.0.1/32", "10.99.0.2/32", "fd99::1/128", "fd99::2/128"} {
		require.NoError(t, ns.AddAddr("lo", cidr))
	}
	v4Client, v4Server := connect(t, ns, netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.1"))
	v6Client, v6Server := connect(t, ns, netip.MustParseAddr("fd99::2"), netip.MustParseAddr("fd99::1"))
	// a loopback connection, left out
	connect(t, ns, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.1"))

	var sockets, tracked Found
	require.NoError(t, ns.Do(func() error {
		var err error
		if sockets, err = Sockets(); err != nil {
			return err
		}
		tracked, err = Conntrack()
		return err
	}))
	assert.Zero(t, sockets.Malformed)
	bySocket := byEnds(t, sockets.Handshakes)
	require.Len(t, bySocket, 4, "two ends of two connections: %+v", sockets.Handshakes)
	for _, client := range []connection{v4Client, v6Client} {
		h, ok := bySocket[client]
		if assert.True(t, ok, "client end %v", client) {
			assert.Zero(t, h.WScale, "the client's small buffer needs no scaling")
			assert.Positive(t, h.MSS)
			assert.Equal(t, FromSocket, h.Source)
		}
	}
	for _, server := range []connection{v4Server, v6Server} {
		h, ok := bySocket[server]
		if assert.True(t, ok, "server end %v", server) {
			assert.Positive(t, h.WScale, "the server's default buffer scales")
		}
	}

	assert.Zero(t, tracked.Malformed)
	assert.Zero(t, tracked.Unknown)
	byConntrack := byEnds(t, tracked.Handshakes)
	require.Len(t, byConntrack, 4)
	for ends, h := range bySocket {
		ct, ok := byConntrack[ends]
		if assert.True(t, ok, "conntrack has %v", ends) {
			assert.Equal(t, h.WScale, ct.WScale, "the scale sock_diag and conntrack give %v", ends)
			assert.Equal(t, FromConntrack, ct.Source)
		}
	}

	var both Found
	require.NoError(t, ns.Do(func() error {
		var err error
		both, err = Scan()
		return err
	}))
	assert.Len(t, both.Handshakes, 8, "both sources")
}
