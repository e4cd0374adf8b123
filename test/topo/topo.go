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
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
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
type Namespace struct {
	Name   string
	handle netns.NsHandle
	nl     *netlink.Handle
}

// Do runs fn on an OS thread inside the namespace. Sockets fn opens stay
// in the namespace after it returns.
func (n *Namespace) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("current namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(n.handle); err != nil {
			errc <- fmt.Errorf("entering %s: %w", n.Name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// The thread stays locked and dies with the goroutine, so a
			// thread left in the wrong namespace is never reused.
			errc <- errors.Join(ferr, fmt.Errorf("leaving %s: %w", n.Name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Start starts cmd inside the namespace and returns a channel that gets
// its Wait result. The command is started from an OS thread of its own
// that stays in the namespace until the command exits, so that a
// Pdeathsig in cmd.SysProcAttr (sent when the starting thread ends) fires
// when this process dies, not when the runtime retires a reused thread.
func (n *Namespace) Start(cmd *exec.Cmd) (<-chan error, error) {
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine.
		runtime.LockOSThread()
		if err := netns.Set(n.handle); err != nil {
			started <- fmt.Errorf("entering %s: %w", n.Name, err)
			return
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// Command prepares a program to run inside the namespace the way
// "ip netns exec" runs it (iproute2, installed by make deps): in a mount
// namespace of its own with /sys remounted, so that /sys/class/net shows
// this namespace's interfaces (m2hod reads their statistics there), which
// entering the network namespace alone does not give.
func (n *Namespace) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// SetSysctl writes a sysctl of the namespace (key with dots).
func (n *Namespace) SetSysctl(key, value string) error {
	return n.Do(func() error {
		path := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
		}
		return nil
	})
}

// Netlink is a netlink handle bound to the namespace.
func (n *Namespace) Netlink() *netlink.Handle { return n.nl }

func (n *Namespace) close() {
	if n.nl != nil {
		n.nl.Close()
	}
	n.handle.Close()
}

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
	name := t.nsName(role)
	ns := &Namespace{Name: name}
	errc := make(chan error, 1)
	go func() {
		// NewNamed moves the calling thread into the new namespace; the
		// thread is locked and exits with the goroutine, never reused.
		runtime.LockOSThread()
		h, err := netns.NewNamed(name)
		if err != nil {
			errc <- fmt.Errorf("creating namespace %s: %w", name, err)
			return
		}
		ns.handle = h
		errc <- nil
	}()
	if err := <-errc; err != nil {
		return nil, err
	}
	t.namespaces = append(t.namespaces, ns)
	nl, err := netlink.NewHandleAt(ns.handle)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", name, err)
	}
	ns.nl = nl
	lo, err := nl.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("loopback of %s: %w", name, err)
	}
	if err := nl.LinkSetUp(lo); err != nil {
		return nil, fmt.Errorf("loopback of %s up: %w", name, err)
	}
	// IPv6 would add router solicitations and DAD probes to the link.
	for _, key := range []string{"net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"} {
		if err := ns.SetSysctl(key, "1"); err != nil {
			return nil, err
		}
	}
	return ns, nil
}

// vethPair creates a veth pair with one end in a and one in b.
func vethPair(a *Namespace, aName string, b *Namespace, bName string) error {
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: aName, MTU: MTU},
		PeerName:      bName,
		PeerNamespace: netlink.NsFd(int(b.handle)),
	}
	if err := a.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s/%s: %w", aName, bName, err)
	}
	return nil
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
	link, err := ns.nl.LinkByName(iface)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", iface, ns.Name, err)
	}
	if addr != nil {
		if err := ns.nl.AddrAdd(link, &netlink.Addr{IPNet: addr}); err != nil {
			return fmt.Errorf("address %s on %s: %w", addr, iface, err)
		}
	}
	if err := ns.Do(func() error { return disableOffloads(iface) }); err != nil {
		return err
	}
	if err := ns.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("%s up: %w", iface, err)
	}
	return nil
}

func hardwareAddr(ns *Namespace, iface string) (net.HardwareAddr, error) {
	link, err := ns.nl.LinkByName(iface)
	if err != nil {
		return nil, fmt.Errorf("%s in %s: %w", iface, ns.Name, err)
	}
	return link.Attrs().HardwareAddr, nil
}

func addNeighbor(ns *Namespace, iface string, ip net.IP, mac net.HardwareAddr) error {
	link, err := ns.nl.LinkByName(iface)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", iface, ns.Name, err)
	}
	err = ns.nl.NeighAdd(&netlink.Neigh{
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
	if err := ns.nl.RouteAdd(&netlink.Route{Dst: dst, Gw: gw}); err != nil {
		return fmt.Errorf("route %v via %s in %s: %w", dst, gw, ns.Name, err)
	}
	return nil
}

// Close removes every namespace of the topology; their interfaces go with
// them. Safe to call more than once.
func (t *Topology) Close() error {
	var errs []error
	for _, ns := range t.namespaces {
		ns.close()
		if err := netns.DeleteNamed(ns.Name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", ns.Name, err))
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
