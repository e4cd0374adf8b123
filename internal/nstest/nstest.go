// Package nstest builds small network topologies for tests: named network
// namespaces joined by veth pairs, with addresses, routes and sysctls.
//
// Every namespace gets a unique name (prefix plus a random suffix), so tests
// running concurrently on one machine never collide, and everything a test
// creates is removed through t.Cleanup. Interfaces live only inside the
// namespaces created here, so their names (for example "veth0") need not be
// unique on the host.
//
// Namespaces are created as named namespaces (/run/netns/NAME), so external
// tools can run inside them with NS.Command ("ip netns exec NAME ...").
package nstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/nsexec"
)

// maxPrefixLen keeps namespace names short enough to read in `ip netns list`.
const maxPrefixLen = 16

// RequireRoot skips the test when the process is not root, or when the
// tests run with -short (make test-unit), which keeps to the tests that
// need nothing but Go: namespaces, veth pairs, BPF programs, realtime
// threads and privileged socket options all need root.
func RequireRoot(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs root: skipped with -short")
	}
	if os.Geteuid() != 0 {
		tb.Skip("needs root: namespaces, BPF or privileged sockets")
	}
}

// BuildM2hod builds the daemon into dir and returns its path: the tests
// that run m2hod in namespaces run the binary operators install, built
// from the tree under test.
func BuildM2hod(dir string) (string, error) {
	bin := filepath.Join(dir, "m2hod")
	build := exec.Command("go", "build", "-o", bin, "github.com/m2ho/m2ho/cmd/m2hod")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building m2hod: %w", err)
	}
	return bin, nil
}

// MountBPFFS mounts a BPF filesystem of the test's own on a temporary
// directory and returns it; the mount goes with the test, and with it
// whatever the test left pinned. It stays visible to commands run under
// "ip netns exec", whose fresh /sys has no /sys/fs/bpf.
func MountBPFFS(tb testing.TB) (string, error) {
	tb.Helper()
	dir := tb.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return "", fmt.Errorf("mount a BPF filesystem on %s: %w", dir, err)
	}
	tb.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			tb.Errorf("unmount the BPF filesystem on %s: %v", dir, err)
		}
	})
	return dir, nil
}

// UniqueSuffix returns 6 random hex digits, for names that must not collide
// with those of concurrently running tests.
func UniqueSuffix() string {
	var b [3]byte
	// crypto/rand.Read never returns an error: it aborts the program itself
	// if the kernel's random source fails.
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// NS is a named network namespace owned by one test.
type NS struct {
	// Name is the namespace name under /run/netns, e.g. "m2ho-ue-3fa9c1".
	Name   string
	handle netns.NsHandle
	nl     *netlink.Handle
}

// NewNS creates a namespace named "m2ho-<prefix>-<random>", brings its
// loopback up and removes the namespace when the test ends.
func NewNS(tb testing.TB, prefix string) *NS {
	tb.Helper()
	ns, err := CreateNS(prefix)
	if err != nil {
		tb.Fatalf("nstest: %v", err)
	}
	tb.Cleanup(func() {
		if err := ns.Delete(); err != nil {
			tb.Errorf("nstest: %v", err)
		}
	})
	return ns
}

// CreateNS is NewNS without a testing.TB, for long-lived testbeds. The
// caller must call Delete.
func CreateNS(prefix string) (*NS, error) {
	if len(prefix) > maxPrefixLen {
		prefix = prefix[:maxPrefixLen]
	}
	ns, err := CreateNamed(fmt.Sprintf("m2ho-%s-%s", prefix, UniqueSuffix()))
	if err != nil {
		return nil, err
	}
	// Interfaces created or moved here skip duplicate address detection.
	// Until its link-local address has passed it, an interface sends no
	// neighbour solicitation for a packet it forwards (it has no source
	// address for one), so forwarded IPv6 would wait up to two seconds
	// and, when the third solicitation still comes too early, fail.
	for _, key := range []string{"net.ipv6.conf.default.accept_dad", "net.ipv6.conf.all.accept_dad"} {
		if err := ns.SetSysctl(key, "0"); err != nil {
			_ = ns.Delete()
			return nil, err
		}
	}
	return ns, nil
}

// CreateNamed creates the network namespace name (/run/netns/name) with
// its loopback up, for callers that choose their own names (the testbed
// puts its process id in them, to remove what a crashed run left). The
// caller must call Delete.
func CreateNamed(name string) (*NS, error) {
	handle, err := newNamedKeepingThread(name)
	if err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", name, err)
	}
	nl, err := netlink.NewHandleAt(handle)
	if err != nil {
		handle.Close()
		_ = netns.DeleteNamed(name)
		return nil, fmt.Errorf("netlink handle in %s: %w", name, err)
	}
	ns := &NS{Name: name, handle: handle, nl: nl}
	if err := ns.LinkUp("lo"); err != nil {
		_ = ns.Delete()
		return nil, err
	}
	return ns, nil
}

// newNamedKeepingThread creates a named namespace. netns.NewNamed moves the
// calling thread into the new namespace, so the thread is locked, moved back
// afterwards, and left locked (and therefore discarded by the Go runtime)
// if moving back fails.
func newNamedKeepingThread(name string) (netns.NsHandle, error) {
	runtime.LockOSThread()
	origin, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return netns.None(), fmt.Errorf("current namespace: %w", err)
	}
	defer origin.Close()
	handle, createErr := netns.NewNamed(name)
	if err := netns.Set(origin); err != nil {
		return netns.None(), fmt.Errorf("return to original namespace: %w", err)
	}
	runtime.UnlockOSThread()
	if createErr != nil {
		return netns.None(), createErr
	}
	return handle, nil
}

// Delete removes the namespace; its interfaces disappear with it.
func (n *NS) Delete() error {
	n.nl.Close()
	n.handle.Close()
	if err := netns.DeleteNamed(n.Name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete namespace %s: %w", n.Name, err)
	}
	return nil
}

// Netlink returns a netlink handle bound to the namespace, for anything
// this package does not wrap. It stays valid until the namespace is deleted.
func (n *NS) Netlink() *netlink.Handle { return n.nl }

// Do runs fn on an OS thread that has joined the namespace. Sockets opened
// inside fn stay in the namespace and may be used from any goroutine after
// fn returns. Goroutines started by fn do not inherit the namespace.
func (n *NS) Do(fn func() error) error { return nsexec.Run(n.handle, fn) }

// Command prepares cmd to run inside the namespace ("ip netns exec").
func (n *NS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Start starts cmd inside the namespace and returns a channel that gets
// its Wait result. The command is started from an OS thread of its own
// that stays in the namespace until the command exits, so that a
// Pdeathsig in cmd.SysProcAttr (sent when the starting thread ends) fires
// when this process dies, not when the runtime retires a reused thread.
func (n *NS) Start(cmd *exec.Cmd) (<-chan error, error) {
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

// Run runs a command inside the namespace and returns its combined output;
// a failure includes that output.
func (n *NS) Run(ctx context.Context, name string, args ...string) (string, error) {
	out, err := n.Command(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), n.Name, err, out)
	}
	return string(out), nil
}

// SetSysctl writes a sysctl inside the namespace; key uses dots or slashes
// ("net.ipv4.ip_forward" or "net/ipv4/ip_forward").
func (n *NS) SetSysctl(key, value string) error {
	path := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
	return n.Do(func() error {
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s in %s: %w", key, value, n.Name, err)
		}
		return nil
	})
}

// EnableForwarding turns on IPv4 and IPv6 forwarding in the namespace.
func (n *NS) EnableForwarding() error {
	for _, key := range []string{"net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"} {
		if err := n.SetSysctl(key, "1"); err != nil {
			return err
		}
	}
	return nil
}

// LinkUp sets an interface of the namespace up.
func (n *NS) LinkUp(ifname string) error {
	link, err := n.nl.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", ifname, n.Name, err)
	}
	if err := n.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up in %s: %w", ifname, n.Name, err)
	}
	return nil
}

// AddAddr assigns an address in CIDR notation ("10.0.0.1/24", "fd00::1/64").
// IPv6 addresses skip duplicate address detection, and AddAddr returns once
// the kernel has finished setting one up: until then it is tentative and
// the interface has not joined its solicited-node group, so neighbour
// solicitations for it go unanswered and the sender retries a second later.
func (n *NS) AddAddr(ifname, cidr string) error {
	link, err := n.nl.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", ifname, n.Name, err)
	}
	addr, err := netlink.ParseAddr(cidr)
	if err != nil {
		return fmt.Errorf("parse address %q: %w", cidr, err)
	}
	if addr.IP.To4() == nil {
		addr.Flags |= unix.IFA_F_NODAD
	}
	if err := n.nl.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("add %s to %s in %s: %w", cidr, ifname, n.Name, err)
	}
	if addr.IP.To4() != nil {
		return nil
	}
	if err := n.waitIPv6Addr(link, cidr, func(a netlink.Addr) bool { return a.IP.Equal(addr.IP) }); err != nil {
		return err
	}
	return n.waitLocalRoute(addr.IP, cidr)
}

// waitLocalRoute waits for the local route of an IPv6 address of the
// namespace: the kernel clears the address's tentative flag a moment
// before it inserts that route, and a connection to the address in
// between finds no route, or the on-link prefix out of the interface.
func (n *NS) waitLocalRoute(ip net.IP, what string) error {
	deadline := time.Now().Add(ipv6AddrTimeout)
	for {
		routes, err := n.nl.RouteGet(ip)
		if err == nil && len(routes) > 0 && routes[0].Type == unix.RTN_LOCAL {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s in %s: no local route after %v (last error %v)", what, n.Name, ipv6AddrTimeout, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// AddRoute adds a route to dst (CIDR, or "default"/"default6") via gateway.
func (n *NS) AddRoute(dst, gateway string) error {
	gw := net.ParseIP(gateway)
	if gw == nil {
		return fmt.Errorf("parse gateway %q", gateway)
	}
	route := netlink.Route{Gw: gw}
	switch dst {
	case "default":
		_, route.Dst, _ = net.ParseCIDR("0.0.0.0/0")
	case "default6":
		_, route.Dst, _ = net.ParseCIDR("::/0")
	default:
		_, ipnet, err := net.ParseCIDR(dst)
		if err != nil {
			return fmt.Errorf("parse route destination %q: %w", dst, err)
		}
		route.Dst = ipnet
	}
	if err := n.nl.RouteAdd(&route); err != nil {
		return fmt.Errorf("route %s via %s in %s: %w", dst, gateway, n.Name, err)
	}
	return nil
}

// SetOffloads turns the segmentation offloads (SegmentationOffloads) of an
// interface of the namespace on or off.
func (n *NS) SetOffloads(ifname string, on bool) error {
	return n.Do(func() error { return SetOffloads(ifname, on, SegmentationOffloads...) })
}

// VethEnd is one end of a veth pair: its namespace and interface name.
type VethEnd struct {
	NS     *NS
	Ifname string
}

// Link returns the end's interface as seen from its namespace.
func (e VethEnd) Link() (netlink.Link, error) {
	link, err := e.NS.nl.LinkByName(e.Ifname)
	if err != nil {
		return nil, fmt.Errorf("find %s in %s: %w", e.Ifname, e.NS.Name, err)
	}
	return link, nil
}

// Index returns the end's interface index inside its namespace.
func (e VethEnd) Index() (int, error) {
	link, err := e.Link()
	if err != nil {
		return 0, err
	}
	return link.Attrs().Index, nil
}

// Veth joins two namespaces with a veth pair, both ends up. The pair is
// created directly inside the namespaces, never in the caller's one, and
// disappears with them.
func Veth(a VethEnd, b VethEnd) error {
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: a.Ifname},
		PeerName:      b.Ifname,
		PeerNamespace: netlink.NsFd(b.NS.handle),
	}
	if err := a.NS.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s/%s - %s/%s: %w", a.NS.Name, a.Ifname, b.NS.Name, b.Ifname, err)
	}
	if err := a.NS.LinkUp(a.Ifname); err != nil {
		return err
	}
	if err := b.NS.LinkUp(b.Ifname); err != nil {
		return err
	}
	for _, end := range []VethEnd{a, b} {
		if err := end.NS.waitLinkLocal(end.Ifname); err != nil {
			return err
		}
	}
	return nil
}

// ipv6AddrTimeout bounds the wait for an IPv6 address to become usable:
// a link-local address appears once the kernel has seen the carrier, and
// an address skipping duplicate address detection is set up by a work
// item; both take milliseconds.
const ipv6AddrTimeout = 5 * time.Second

// waitLinkLocal waits until an interface that has IPv6 holds a usable
// link-local address. An interface without one sends no neighbour
// solicitation for a packet it forwards, so the first IPv6 packets
// through a fresh link would wait a second for the retry.
func (n *NS) waitLinkLocal(ifname string) error {
	link, err := n.nl.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", ifname, n.Name, err)
	}
	var disabled []byte
	if err := n.Do(func() error {
		var err error
		disabled, err = os.ReadFile(filepath.Join("/proc/sys/net/ipv6/conf", ifname, "disable_ipv6"))
		return err
	}); err != nil || strings.TrimSpace(string(disabled)) == "1" {
		// no IPv6 on the interface (or in the kernel): nothing to wait for
		return nil
	}
	return n.waitIPv6Addr(link, "a link-local address", func(a netlink.Addr) bool { return a.IP.IsLinkLocalUnicast() })
}

// waitIPv6Addr waits until link holds a non-tentative IPv6 address that
// match accepts; what names it in the error.
func (n *NS) waitIPv6Addr(link netlink.Link, what string, match func(netlink.Addr) bool) error {
	ifname := link.Attrs().Name
	deadline := time.Now().Add(ipv6AddrTimeout)
	for {
		addrs, err := n.nl.AddrList(link, netlink.FAMILY_V6)
		if err != nil {
			return fmt.Errorf("addresses of %s in %s: %w", ifname, n.Name, err)
		}
		for _, addr := range addrs {
			if match(addr) && addr.Flags&unix.IFA_F_TENTATIVE == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s in %s: %s not usable after %v", ifname, n.Name, what, ipv6AddrTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// Link describes a point-to-point link for Pair: interface names and
// addresses (CIDR, any may be empty) of both ends.
type Link struct {
	AIfname, BIfname string
	AAddrs, BAddrs   []string
}

// Pair creates a veth pair between a and b and assigns the addresses,
// failing the test on error.
func Pair(tb testing.TB, a, b *NS, l Link) (VethEnd, VethEnd) {
	tb.Helper()
	endA, endB := VethEnd{NS: a, Ifname: l.AIfname}, VethEnd{NS: b, Ifname: l.BIfname}
	if err := Veth(endA, endB); err != nil {
		tb.Fatalf("nstest: %v", err)
	}
	for _, cidr := range l.AAddrs {
		if err := a.AddAddr(l.AIfname, cidr); err != nil {
			tb.Fatalf("nstest: %v", err)
		}
	}
	for _, cidr := range l.BAddrs {
		if err := b.AddAddr(l.BIfname, cidr); err != nil {
			tb.Fatalf("nstest: %v", err)
		}
	}
	return endA, endB
}

// AddDeviceRoute adds a route to dst (CIDR) through an interface without a
// gateway, as point-to-point links (tun, modems) need.
func (n *NS) AddDeviceRoute(dst, ifname string) error {
	link, err := n.nl.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", ifname, n.Name, err)
	}
	_, ipnet, err := net.ParseCIDR(dst)
	if err != nil {
		return fmt.Errorf("parse route destination %q: %w", dst, err)
	}
	route := netlink.Route{Dst: ipnet, LinkIndex: link.Attrs().Index, Scope: netlink.SCOPE_LINK}
	if err := n.nl.RouteAdd(&route); err != nil {
		return fmt.Errorf("route %s dev %s in %s: %w", dst, ifname, n.Name, err)
	}
	return nil
}

// OpenTun creates a tun interface (raw IP, no packet information header)
// inside the namespace, sets it up and returns its file: reads return the
// packets the namespace sends through it, writes inject packets into it.
// The interface disappears when the file is closed.
func (n *NS) OpenTun(ifname string) (*os.File, error) {
	var tun *os.File
	err := n.Do(func() error {
		// The descriptor joins Go's poller only after TUNSETIFF: a tun file
		// not yet attached to an interface reports an error to poll and
		// would never deliver a readiness event.
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		req, err := unix.NewIfreq(ifname)
		if err != nil {
			unix.Close(fd)
			return fmt.Errorf("tun name %q: %w", ifname, err)
		}
		req.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, req); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", ifname, err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return fmt.Errorf("tun %s non-blocking: %w", ifname, err)
		}
		tun = os.NewFile(uintptr(fd), "/dev/net/tun:"+ifname)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tun %s in %s: %w", ifname, n.Name, err)
	}
	if err := n.LinkUp(ifname); err != nil {
		tun.Close()
		return nil, err
	}
	return tun, nil
}

// Nft runs one nft command string (commands separated by ";") inside the
// namespace. It skips the test when nft is not installed (`make deps`
// installs it).
func (n *NS) Nft(tb testing.TB, commands string) {
	tb.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		tb.Skip("needs nft (nftables) for conntrack and NAT rules: run make deps")
	}
	if _, err := n.Run(context.Background(), "nft", commands); err != nil {
		tb.Fatalf("nft: %v", err)
	}
}

// TrackConnections makes conntrack follow the namespace's connections
// from their next packet on: the kernel tracks connections in a
// namespace only while one of its rules uses conntrack.
func (n *NS) TrackConnections(tb testing.TB) {
	tb.Helper()
	n.Nft(tb, "add table inet m2ho_track; "+
		"add chain inet m2ho_track out { type filter hook output priority 0; }; "+
		"add rule inet m2ho_track out ct state new counter")
}
