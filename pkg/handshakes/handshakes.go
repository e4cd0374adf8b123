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

// Handshake is one connection as the host's ACKs carry it out of the modem
// link.
type Handshake struct {
	// Local is the host's side (for a connection forwarded through NAT,
	// the address and port after translation), Remote the peer's.
	Local, Remote netip.AddrPort
	// WScale is the shift the ACK sender applies to the window it
	// advertises (0 when the handshake did not agree on scaling).
	WScale uint8
	// MSS is the MSS the ACK sender announced; 0 when the source does
	// not keep it (conntrack).
	MSS    uint16
	Source Source
}

// Found is what a scan found.
type Found struct {
	Handshakes []Handshake
	// Unknown counts connections whose handshake the source did not see
	// whole (conntrack picks up connections mid-stream); they are left
	// out.
	Unknown int
	// Malformed counts messages from the kernel that could not be read;
	// they are skipped.
	Malformed int
}

func (f *Found) add(other Found) {
	f.Handshakes = append(f.Handshakes, other.Handshakes...)
	f.Unknown += other.Unknown
	f.Malformed += other.Malformed
}

// Scan asks both sources, in the calling thread's network namespace. A
// source that cannot answer (conntrack not in the kernel) costs only its
// own handshakes: Scan returns what the other found with the error.
func Scan() (Found, error) {
	var found Found
	sockets, socketErr := Sockets()
	found.add(sockets)
	tracked, conntrackErr := Conntrack()
	found.add(tracked)
	return found, errors.Join(socketErr, conntrackErr)
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
