// Package topo creates and removes the testbed's network: namespaces
// server - emu - ue (- lan) joined by veth pairs, offloads off so packets
// stay MTU-sized. Names are unique per run and carry the creating process's
// id, so a later run can remove what a crashed one left behind.
package topo

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/nstest"
)

// NamePrefix starts every namespace the testbed creates.
const NamePrefix = "m2tb-"

// netnsDir is where iproute2 and netns keep named namespaces.
const netnsDir = "/run/netns"

// Interface names. They only need to be unique inside their namespace,
// which is private to the run.
const (
	ServerIface    = "srv0"  // server side, towards emu
	EmuServerIface = "e-srv" // emu side, towards server
	EmuUEIface     = "e-ue"  // emu side, towards ue
	UEIface        = "wwan0" // the ue's modem interface, towards emu
	UELANIface     = "ue-lan"
	LANIface       = "lan0"
)

// Addresses: server and ue share one subnet across the emulator, which
// relays frames like a wire; the LAN is routed by the ue.
var (
	ServerAddr = ipv4Net(10, 77, 0, 1)
	UEAddr     = ipv4Net(10, 77, 0, 2)
	UELANAddr  = ipv4Net(10, 78, 0, 1)
	LANAddr    = ipv4Net(10, 78, 0, 2)
)

// MTU of every testbed link.
const MTU = 1500

// ipv4Net is a host address in a /24.
func ipv4Net(a, b, c, d byte) *net.IPNet {
	return &net.IPNet{IP: net.IPv4(a, b, c, d).To4(), Mask: net.CIDRMask(24, 32)}
}

// Namespace is one named network namespace of the testbed.
type Namespace = nstest.NS

// Topology is one testbed network.
type Topology struct {
	ID              string
	Server, Emu, UE *Namespace
	LAN             *Namespace // nil without a LAN
	// ServerMAC and UEMAC are the two ends the emulator relays between.
	ServerMAC, UEMAC net.HardwareAddr
	// The traffic runs from SenderNamespace to ReceiverAddr in
	// ReceiverNamespace (the ue, or the lan client).
	SenderNamespace   *Namespace
	ReceiverNamespace *Namespace
	ReceiverAddr      net.IP
	// ModemIface is the ue's modem-side interface (m2hod --iface).
	ModemIface string

	namespaces         []*Namespace
	withLAN            bool
	createdByProcessID int
}

// Options shape a Topology.
type Options struct {
	// LAN adds a client behind the ue that receives the traffic.
	LAN bool
}

// Create builds a topology. On error everything created is removed.
func Create(opts Options) (t *Topology, err error) {
	suffix := make([]byte, 3)
	if _, err := rand.Read(suffix); err != nil {
		return nil, fmt.Errorf("random suffix: %w", err)
	}
	t = &Topology{
		ID:                 hex.EncodeToString(suffix),
		ModemIface:         UEIface,
		withLAN:            opts.LAN,
		createdByProcessID: os.Getpid(),
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Close())
			t = nil
		}
	}()
	roles := []string{"server", "emu", "ue"}
	if opts.LAN {
		roles = append(roles, "lan")
	}
	for _, role := range roles {
		ns, err := t.newNamespace(role)
		if err != nil {
			return t, err
		}
		switch role {
		case "server":
			t.Server = ns
		case "emu":
			t.Emu = ns
		case "ue":
			t.UE = ns
		case "lan":
			t.LAN = ns
		}
	}
	if err := t.wire(); err != nil {
		return t, err
	}
	t.SenderNamespace = t.Server
	t.ReceiverNamespace, t.ReceiverAddr = t.UE, UEAddr.IP
	if opts.LAN {
		t.ReceiverNamespace, t.ReceiverAddr = t.LAN, LANAddr.IP
	}
	return t, nil
}

// nsName is m2tb-<pid>-<id>-<role>: the pid lets CleanupStale know
// whether the creator is still alive.
func (t *Topology) nsName(role string) string {
	return fmt.Sprintf("%s%d-%s-%s", NamePrefix, t.createdByProcessID, t.ID, role)
}

func (t *Topology) newNamespace(role string) (*Namespace, error) {
	ns, err := nstest.CreateNamed(t.nsName(role))
	if err != nil {
		return nil, err
	}
	t.namespaces = append(t.namespaces, ns)
	// IPv6 would add router solicitations and DAD probes to the link.
	for _, key := range []string{"net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"} {
		if err := ns.SetSysctl(key, "1"); err != nil {
			return nil, err
		}
	}
	return ns, nil
}

// vethPair joins a and b with a veth pair, both ends up.
func vethPair(a *Namespace, aName string, b *Namespace, bName string) error {
	return nstest.Veth(nstest.VethEnd{NS: a, Ifname: aName}, nstest.VethEnd{NS: b, Ifname: bName})
}

func (t *Topology) wire() error {
	if err := vethPair(t.Emu, EmuServerIface, t.Server, ServerIface); err != nil {
		return err
	}
	if err := vethPair(t.Emu, EmuUEIface, t.UE, UEIface); err != nil {
		return err
	}
	// Only the emulator may move packets across emu.
	if err := t.Emu.SetSysctl("net.ipv4.ip_forward", "0"); err != nil {
		return err
	}
	type end struct {
		ns    *Namespace
		iface string
		addr  *net.IPNet
	}
	ends := []end{
		{t.Server, ServerIface, ServerAddr},
		{t.Emu, EmuServerIface, nil},
		{t.Emu, EmuUEIface, nil},
		{t.UE, UEIface, UEAddr},
	}
	if t.withLAN {
		if err := vethPair(t.UE, UELANIface, t.LAN, LANIface); err != nil {
			return err
		}
		ends = append(ends, end{t.UE, UELANIface, UELANAddr}, end{t.LAN, LANIface, LANAddr})
	}
	for _, e := range ends {
		if err := configure(e.ns, e.iface, e.addr); err != nil {
			return err
		}
	}
	var err error
	if t.ServerMAC, err = hardwareAddr(t.Server, ServerIface); err != nil {
		return err
	}
	if t.UEMAC, err = hardwareAddr(t.UE, UEIface); err != nil {
		return err
	}
	// Static neighbours: no ARP exchange has to cross the emulated radio.
	if err := addNeighbor(t.Server, ServerIface, UEAddr.IP, t.UEMAC); err != nil {
		return err
	}
	if err := addNeighbor(t.UE, UEIface, ServerAddr.IP, t.ServerMAC); err != nil {
		return err
	}
	if t.withLAN {
		if err := t.UE.SetSysctl("net.ipv4.ip_forward", "1"); err != nil {
			return err
		}
		if err := addRoute(t.LAN, nil, UELANAddr.IP); err != nil {
			return err
		}
		lanNet := &net.IPNet{IP: LANAddr.IP.Mask(LANAddr.Mask), Mask: LANAddr.Mask}
		if err := addRoute(t.Server, lanNet, UEAddr.IP); err != nil {
			return err
		}
	}
	return nil
}

func configure(ns *Namespace, iface string, addr *net.IPNet) error {
	link, err := ns.Netlink().LinkByName(iface)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", iface, ns.Name, err)
	}
	if addr != nil {
		if err := ns.Netlink().AddrAdd(link, &netlink.Addr{IPNet: addr}); err != nil {
			return fmt.Errorf("address %s on %s: %w", addr, iface, err)
		}
	}
	// The emulator must see MTU-sized packets with complete checksums:
	// the frames it relays are re-injected and no longer carry the
	// sender's checksum-offload state.
	offloads := append(slices.Clone(nstest.SegmentationOffloads), nstest.OffloadSG, nstest.OffloadTxChecksum)
	if err := ns.Do(func() error { return nstest.SetOffloads(iface, false, offloads...) }); err != nil {
		return err
	}
	if err := ns.Netlink().LinkSetUp(link); err != nil {
		return fmt.Errorf("%s up: %w", iface, err)
	}
	return nil
}

func hardwareAddr(ns *Namespace, iface string) (net.HardwareAddr, error) {
	link, err := ns.Netlink().LinkByName(iface)
	if err != nil {
		return nil, fmt.Errorf("%s in %s: %w", iface, ns.Name, err)
	}
	return link.Attrs().HardwareAddr, nil
}

func addNeighbor(ns *Namespace, iface string, ip net.IP, mac net.HardwareAddr) error {
	link, err := ns.Netlink().LinkByName(iface)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", iface, ns.Name, err)
	}
	err = ns.Netlink().NeighAdd(&netlink.Neigh{
		LinkIndex: link.Attrs().Index, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
		IP: ip, HardwareAddr: mac,
	})
	if err != nil {
		return fmt.Errorf("neighbour %s on %s: %w", ip, iface, err)
	}
	return nil
}

// addRoute adds a route to dst (nil: default) via gw.
func addRoute(ns *Namespace, dst *net.IPNet, gw net.IP) error {
	if err := ns.Netlink().RouteAdd(&netlink.Route{Dst: dst, Gw: gw}); err != nil {
		return fmt.Errorf("route %v via %s in %s: %w", dst, gw, ns.Name, err)
	}
	return nil
}

// Close removes every namespace of the topology; their interfaces go with
// them. Safe to call more than once.
func (t *Topology) Close() error {
	var errs []error
	for _, ns := range t.namespaces {
		if err := ns.Delete(); err != nil {
			errs = append(errs, err)
		}
	}
	t.namespaces = nil
	return errors.Join(errs...)
}

// Namespaces lists the names of the topology's namespaces.
func (t *Topology) Namespaces() []string {
	out := make([]string, len(t.namespaces))
	for i, ns := range t.namespaces {
		out[i] = ns.Name
	}
	return out
}

// CleanupStale removes testbed namespaces whose creating process is gone
// (a crashed or killed run), and returns their names.
func CleanupStale() ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		pid, ok := creatorPID(e.Name())
		if !ok || processAlive(pid) {
			continue
		}
		if err := netns.DeleteNamed(e.Name()); err != nil {
			errs = append(errs, fmt.Errorf("deleting stale %s: %w", e.Name(), err))
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}

func creatorPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, NamePrefix)
	if !ok {
		return 0, false
	}
	pidText, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(pidText)
	return pid, err == nil && pid > 0
}

func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
