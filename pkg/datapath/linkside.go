package datapath

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/m2ho/m2ho/pkg/handshakes"
)

// offLinkPeers are the peers a connection cannot reach through the modem
// interface: the host's own addresses, and the networks other interfaces
// are connected to (a CPE's LAN, a container bridge). A connection with
// such a peer sends its ACKs to that interface. The other side of a
// conntrack entry for a LAN client's download has the LAN client as its
// peer: without this, it takes a place in the handshake store as large as
// the useful side's.
type offLinkPeers struct {
	host     map[netip.Addr]bool
	networks []netip.Prefix
}

// linkSide tells, from the addresses of the host's interfaces, whether a
// connection's ACKs may leave through the interface the programs are on.
// It runs in the datapath's network namespace. Peers that routes send
// through other interfaces are not told apart: on a host with several
// uplinks, any of them may carry a connection, and the programs' store
// keeps a handshake that turns out to be elsewhere at the cost of its
// place.
func (d *Datapath) linkSide() (func(handshakes.Ends) bool, error) {
	d.attachMu.Lock()
	ifindex := d.ifindex
	d.attachMu.Unlock()
	return linkSideOf(ifindex)
}

// linkSideOf is linkSide for the interface at ifindex of the calling
// thread's network namespace.
func linkSideOf(ifindex int) (func(handshakes.Ends) bool, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("datapath: list the host's addresses: %w", err)
	}
	return offLinkPeersOf(addrs, ifindex).onLink, nil
}

// offLinkPeersOf reads the off-link peers from the host's addresses, the
// modem interface's at ifindex among them.
func offLinkPeersOf(addrs []netlink.Addr, ifindex int) offLinkPeers {
	p := offLinkPeers{host: make(map[netip.Addr]bool, len(addrs))}
	for _, a := range addrs {
		local, ok := addrOf(a.IPNet)
		if !ok {
			continue
		}
		p.host[local.Addr()] = true
		if a.LinkIndex == ifindex {
			continue
		}
		network := local
		if peer, ok := addrOf(a.Peer); ok {
			// a point-to-point address reaches its peer's network
			network = peer
		}
		// a link-local network is on every interface: its peers
		// cannot be placed by address
		if network.Bits() == 0 || network.Addr().IsLinkLocalUnicast() {
			continue
		}
		p.networks = append(p.networks, network.Masked())
	}
	return p
}

func addrOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	addr, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	addr = addr.Unmap()
	ones, bits := n.Mask.Size()
	if bits != addr.BitLen() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(addr, ones), true
}

// onLink says whether a connection's ACKs may leave through the modem
// interface: its peer is neither the host nor on another interface's
// network.
func (p offLinkPeers) onLink(e handshakes.Ends) bool {
	peer := e.Remote.Addr()
	if p.host[peer] {
		return false
	}
	for _, network := range p.networks {
		if network.Contains(peer) {
			return false
		}
	}
	return true
}
