// Package handshakes finds what the handshakes of open TCP connections
// settled: the window scale and MSS of the side that sends the ACKs out of
// the modem link. The datapath learns them from the SYNs it sees; a
// connection opened before it was attached needs them from the kernel
// instead, or its window cannot be clamped. Two sources answer: socket
// diagnostics (sock_diag) for the host's own sockets, and conntrack for the
// connections it forwards, such as a CPE's LAN clients behind NAT.
package handshakes

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Source names where a handshake was found.
type Source string

const (
	// FromSocket is the host's own socket, through sock_diag.
	FromSocket Source = "socket"
	// FromConntrack is a conntrack entry: a forwarded connection, or
	// one of the host's own when conntrack tracks those too.
	FromConntrack Source = "conntrack"
)

// Ends names a connection by its two ends as the host's ACKs carry it out
// of the modem link: Local is the host's side (for a connection forwarded
// through NAT, the address and port after translation), Remote the peer's.
type Ends struct {
	Local, Remote netip.AddrPort
}

// Handshake is one connection as the host's ACKs carry it out of the modem
// link.
type Handshake struct {
	// Local and Remote are the connection's ends, as in Ends.
	Local, Remote netip.AddrPort
	// WScale is the shift the ACK sender applies to the window it
	// advertises (0 when the handshake did not agree on scaling).
	WScale uint8
	// MSS is the MSS the ACK sender announced; 0 when the source does
	// not keep it (conntrack).
	MSS    uint16
	Source Source
}

// Ends returns the connection's ends.
func (h Handshake) Ends() Ends { return Ends{Local: h.Local, Remote: h.Remote} }

// Found is what a scan found.
type Found struct {
	// Handshakes are the settled handshakes found; ScanEach hands them
	// on as it reads them instead, and leaves this empty.
	Handshakes []Handshake
	// Pending names the connections still in their handshake, whose
	// scale is not settled yet. A SYN or SYN-ACK they send again shows
	// the programs their handshake; a connection whose handshake ends
	// without one is found by a later scan.
	Pending []Ends
	// Unknown counts connections whose handshake the source did not see
	// whole (conntrack picks up connections mid-stream); they are left
	// out.
	Unknown int
	// Malformed counts messages from the kernel that could not be read;
	// they are skipped.
	Malformed int
	// OffLink counts the handshakes, settled or under way, that the
	// scanner's onLink turned down and left out.
	OffLink int
}

// outcome is what one entry of a source tells of its connection.
type outcome int

const (
	// ignored: not an open TCP connection over a link (closing, other
	// protocols, loopback).
	ignored outcome = iota
	// settled: the handshake is over and its scale known.
	settled
	// underWay: the handshake is not over; only the ends are known.
	underWay
	// unknownScale: open, but the source did not see the handshake.
	unknownScale
)

// collector counts what the parsers read in one Found as they read it,
// and hands each settled handshake to visit: a busy router's conntrack
// table holds tens of thousands of entries, and nothing is copied or kept
// per entry on the way unless visit keeps it.
type collector struct {
	found  *Found
	onLink func(Ends) bool
	visit  func(Handshake)
}

// gathering is a collector that keeps the settled handshakes in
// found.Handshakes.
func gathering(found *Found, onLink func(Ends) bool) collector {
	return collector{found: found, onLink: onLink, visit: func(h Handshake) {
		found.Handshakes = append(found.Handshakes, h)
	}}
}

// record adds what a parser read from one entry: the handshakes of a
// settled connection, the ends of one under way, or the count of an
// entry it could not use.
func (c collector) record(o outcome, err error, hs ...Handshake) {
	f := c.found
	if err != nil {
		f.Malformed++
		return
	}
	switch o {
	case settled, underWay:
		for _, h := range hs {
			ends := h.Ends()
			switch {
			case c.onLink != nil && !c.onLink(ends):
				f.OffLink++
			case o == underWay:
				f.Pending = append(f.Pending, ends)
			default:
				c.visit(h)
			}
		}
	case unknownScale:
		f.Unknown++
	}
}

// Scanner asks both sources about the network namespace it was made in,
// from whichever thread calls it: its netlink sockets stay in that
// namespace. It is safe for concurrent use.
type Scanner struct {
	sockets map[int]*dumpSocket
	// socketErrs holds why a source's socket could not be opened
	// (conntrack's, on a kernel without nfnetlink); that source then
	// answers with the error.
	socketErrs map[int]error
	onLink     func(Ends) bool
}

// NewScanner opens the netlink sockets of both sources in the calling
// thread's network namespace. Without a sock_diag socket it fails;
// without conntrack's, the scanner answers for sockets alone.
//
// onLink, when set, says whether a connection's ACKs may leave through the
// link the handshakes are for; the scans leave out the connections it
// turns down (Found.OffLink). A conntrack entry yields a handshake for
// each of its two sides, of which at most one sends its ACKs out of the
// link: onLink keeps the other from taking room.
func NewScanner(onLink func(Ends) bool) (*Scanner, error) {
	s := &Scanner{sockets: map[int]*dumpSocket{}, socketErrs: map[int]error{}, onLink: onLink}
	for _, protocol := range []int{unix.NETLINK_INET_DIAG, unix.NETLINK_NETFILTER} {
		socket, err := openDumpSocket(protocol)
		if err != nil {
			s.socketErrs[protocol] = fmt.Errorf("netlink socket of protocol %d: %w", protocol, err)
			continue
		}
		s.sockets[protocol] = socket
	}
	if err := s.socketErrs[unix.NETLINK_INET_DIAG]; err != nil {
		s.Close()
		return nil, fmt.Errorf("handshakes: %w", err)
	}
	return s, nil
}

// Close closes the scanner's sockets.
func (s *Scanner) Close() {
	for _, socket := range s.sockets {
		socket.Close()
	}
}

// Scan asks both sources: conntrack, then sock_diag. A source that cannot
// answer (conntrack not in the kernel) costs only its own handshakes: Scan
// returns what the other found with the error.
func (s *Scanner) Scan() (Found, error) {
	var found Found
	err := s.scan(gathering(&found, s.onLink))
	return found, err
}

// ScanEach scans as Scan does, but hands each settled handshake to visit
// as it is read instead of gathering them in Found.Handshakes, which stays
// empty. A socket's handshake, which carries the MSS, comes after
// conntrack's for the same connection. A dump that the kernel interrupts
// is taken again, and visit may then see a handshake twice.
func (s *Scanner) ScanEach(visit func(Handshake)) (Found, error) {
	var found Found
	err := s.scan(collector{found: &found, onLink: s.onLink, visit: visit})
	return found, err
}

func (s *Scanner) scan(into collector) error {
	conntrackErr := s.conntrackInto(into)
	socketErr := s.socketsInto(into)
	return errors.Join(conntrackErr, socketErr)
}

// addrFrom reads an address field of family: four bytes for AF_INET
// (sock_diag keeps them at the start of a 16-byte field), 16 for AF_INET6.
func addrFrom(family uint8, b []byte) (netip.Addr, error) {
	switch {
	case family == afInet && len(b) >= 4:
		return netip.AddrFrom4([4]byte(b[:4])), nil
	case family == afInet6 && len(b) >= 16:
		return netip.AddrFrom16([16]byte(b[:16])).Unmap(), nil
	}
	return netip.Addr{}, fmt.Errorf("address of family %d in %d bytes", family, len(b))
}

// onLoopback says whether a connection never leaves the host.
func onLoopback(local, remote netip.AddrPort) bool {
	return local.Addr().IsLoopback() || remote.Addr().IsLoopback()
}
