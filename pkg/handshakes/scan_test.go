package handshakes

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

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
// talking IPv4) and returns both ends as each socket sees them, and the
// client's socket. The client's receive buffer is small; the server's is
// the default.
func connect(t *testing.T, ns *nstest.NS, client, server netip.Addr) (clientEnd, serverEnd connection, clientConn net.Conn) {
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
		clientEnd, serverEnd, clientConn = end(c), end(s), c
		return nil
	}))
	return clientEnd, serverEnd, clientConn
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

// scannerIn makes a scanner of ns's connections, with onLink as its
// filter (nil: none).
func scannerIn(t *testing.T, ns *nstest.NS, onLink func(Ends) bool) *Scanner {
	t.Helper()
	var scanner *Scanner
	require.NoError(t, ns.Do(func() error {
		var err error
		scanner, err = NewScanner(onLink)
		return err
	}))
	t.Cleanup(scanner.Close)
	return scanner
}

// conntrackOf lists what scanner finds in conntrack alone, filtered as its
// scans are.
func conntrackOf(scanner *Scanner) (Found, error) {
	var found Found
	err := scanner.conntrackInto(gathering(&found, scanner.onLink))
	return found, err
}

// TestScanOpenConnections opens real connections, IPv4 (one end an IPv6
// socket talking IPv4) and IPv6, whose two ends scale differently, and
// finds each end's own scale through sock_diag and, with conntrack
// following the namespace, the same through conntrack. The scanner, made
// in the namespace, is called from outside it.
func TestScanOpenConnections(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.NewNS(t, "hs")
	ns.TrackConnections(t)
	// addresses that are not loopback ones, on the namespace's own lo: no
	// link to wait for, and they stay local
	for _, cidr := range []string{"10.99.0.1/32", "10.99.0.2/32", "fd99::1/128", "fd99::2/128"} {
		require.NoError(t, ns.AddAddr("lo", cidr))
	}
	v4Client, v4Server, _ := connect(t, ns, netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.1"))
	v6Client, v6Server, _ := connect(t, ns, netip.MustParseAddr("fd99::2"), netip.MustParseAddr("fd99::1"))
	// a loopback connection, left out
	connect(t, ns, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.1"))

	scanner := scannerIn(t, ns, nil)
	sockets, err := scanner.Sockets()
	require.NoError(t, err)
	tracked, err := conntrackOf(scanner)
	require.NoError(t, err)
	assert.Zero(t, sockets.Malformed)
	assert.Empty(t, sockets.Pending)
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
	assert.Empty(t, tracked.Pending)
	byConntrack := byEnds(t, tracked.Handshakes)
	require.Len(t, byConntrack, 4)
	for ends, h := range bySocket {
		ct, ok := byConntrack[ends]
		if assert.True(t, ok, "conntrack has %v", ends) {
			assert.Equal(t, h.WScale, ct.WScale, "the scale sock_diag and conntrack give %v", ends)
			assert.Equal(t, FromConntrack, ct.Source)
		}
	}

	both, err := scanner.Scan()
	require.NoError(t, err)
	assert.Len(t, both.Handshakes, 8, "both sources")
	var visited []Handshake
	each, err := scanner.ScanEach(func(h Handshake) { visited = append(visited, h) })
	require.NoError(t, err)
	assert.Empty(t, each.Handshakes)
	assert.ElementsMatch(t, both.Handshakes, visited)
	// the socket's handshake, with its MSS, comes last and stands
	last := map[connection]Source{}
	for _, h := range visited {
		last[connection{h.Local, h.Remote}] = h.Source
	}
	for ends, source := range last {
		assert.Equal(t, FromSocket, source, "the last handshake of %v", ends)
	}

	// the client ends' ACKs go to the servers; a scanner that places the
	// servers elsewhere leaves them out
	servers := map[netip.Addr]bool{v4Server.local.Addr(): true, v6Server.local.Addr(): true}
	placing := scannerIn(t, ns, func(e Ends) bool { return !servers[e.Remote.Addr()] })
	placed, err := placing.Scan()
	require.NoError(t, err)
	assert.Equal(t, 4, placed.OffLink, "the client ends, from both sources")
	require.Len(t, placed.Handshakes, 4)
	for _, h := range placed.Handshakes {
		assert.Contains(t, []connection{v4Server, v6Server}, connection{h.Local, h.Remote})
	}
}

// TestScanConntrackUnscaledAndPickedUp: conntrack settles a connection
// whose handshake agreed on no scaling at scale 0, as sock_diag does, and
// leaves out as Unknown one it picked up mid-stream.
func TestScanConntrackUnscaledAndPickedUp(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.NewNS(t, "hs")
	for _, cidr := range []string{"10.99.0.1/32", "10.99.0.2/32", "10.99.0.3/32"} {
		require.NoError(t, ns.AddAddr("lo", cidr))
	}
	server := netip.MustParseAddr("10.99.0.1")
	// opened before conntrack follows the namespace: picked up with its
	// first packet after
	_, _, pickedUp := connect(t, ns, netip.MustParseAddr("10.99.0.2"), server)
	ns.TrackConnections(t)
	_, err := pickedUp.Write([]byte("picked up"))
	require.NoError(t, err)
	require.NoError(t, ns.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/tcp_window_scaling", []byte("0"), 0o644)
	}))
	unscaledClient, unscaledServer, _ := connect(t, ns, netip.MustParseAddr("10.99.0.3"), server)

	scanner := scannerIn(t, ns, nil)
	var tracked Found
	// the written bytes reach conntrack a moment after the write returns
	require.Eventually(t, func() bool {
		tracked, err = conntrackOf(scanner)
		return err == nil && tracked.Unknown == 1
	}, 5*time.Second, 10*time.Millisecond, "the picked-up connection counts as Unknown: %+v", tracked)
	byConntrack := byEnds(t, tracked.Handshakes)
	require.Len(t, byConntrack, 2, "the unscaled connection's two ends alone: %+v", tracked.Handshakes)
	for _, end := range []connection{unscaledClient, unscaledServer} {
		h, ok := byConntrack[end]
		if assert.True(t, ok, "conntrack has %v", end) {
			assert.Zero(t, h.WScale)
		}
	}
	sockets, err := scanner.Sockets()
	require.NoError(t, err)
	bySocket := byEnds(t, sockets.Handshakes)
	for _, end := range []connection{unscaledClient, unscaledServer} {
		h, ok := bySocket[end]
		if assert.True(t, ok, "sock_diag has %v", end) {
			assert.Zero(t, h.WScale)
		}
	}
}

// TestScanHandshakesUnderWay holds a connection in its handshake, its
// SYN-ACK dropped, and finds both its ends pending: the client's socket
// in SYN_SENT, the listener's request socket, and the conntrack entry.
func TestScanHandshakesUnderWay(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.NewNS(t, "hs")
	ns.TrackConnections(t)
	const serverPort = 7777
	client := netip.MustParseAddrPort("10.99.0.2:40001")
	server := netip.AddrPortFrom(netip.MustParseAddr("10.99.0.1"), serverPort)
	for _, a := range []netip.AddrPort{client, server} {
		require.NoError(t, ns.AddAddr("lo", netip.PrefixFrom(a.Addr(), 32).String()))
	}
	ns.Nft(t, "add table inet m2ho_hold; "+
		"add chain inet m2ho_hold in { type filter hook input priority 0; }; "+
		fmt.Sprintf("add rule inet m2ho_hold in tcp sport %d tcp flags & (syn | ack) == syn | ack drop", serverPort))
	require.NoError(t, ns.Do(func() error {
		ln, err := net.Listen("tcp4", server.String())
		if err != nil {
			return err
		}
		t.Cleanup(func() { ln.Close() })
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: client.Addr().As4(), Port: int(client.Port())}); err != nil {
			return err
		}
		if err := unix.Connect(fd, &unix.SockaddrInet4{Addr: server.Addr().As4(), Port: serverPort}); !errors.Is(err, unix.EINPROGRESS) {
			return fmt.Errorf("non-blocking connect: %w", err)
		}
		return nil
	}))

	scanner := scannerIn(t, ns, nil)
	clientSide, serverSide := Ends{client, server}, Ends{server, client}
	// the listener takes the SYN a moment after the connect returns
	var found Found
	require.Eventually(t, func() bool {
		var err error
		found, err = scanner.Scan()
		return err == nil && len(found.Pending) == 4
	}, 5*time.Second, 10*time.Millisecond, "pending: %+v", found.Pending)
	assert.ElementsMatch(t, []Ends{clientSide, serverSide, clientSide, serverSide}, found.Pending,
		"each end from sock_diag, both candidates from conntrack")
	assert.Empty(t, found.Handshakes)
	assert.Zero(t, found.Malformed)
}
