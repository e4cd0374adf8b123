package datapath

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/logbuf"
	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/internal/tcptest"
)

// ifindexIn returns the index of interface ifname in namespace ns.
func ifindexIn(tb testing.TB, ns *nstest.NS, ifname string) int {
	tb.Helper()
	var ifindex int
	require.NoError(tb, ns.Do(func() error {
		iface, err := net.InterfaceByName(ifname)
		if err == nil {
			ifindex = iface.Index
		}
		return err
	}))
	return ifindex
}

// openIn opens a datapath with opts in namespace ns, closed at the end of
// the test. Without a logger in opts, attach messages stay out of the
// test's output.
func openIn(t *testing.T, ns *nstest.NS, opts Options) *Datapath {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	var dp *Datapath
	require.NoError(t, ns.Do(func() error {
		var err error
		dp, err = Open(opts)
		return err
	}))
	t.Cleanup(func() { assert.NoError(t, dp.Close()) })
	return dp
}

// flowFrom is the flow of the download to nstest.ServerPort from local.
func flowFrom(t *testing.T, dp *Datapath, local string) Flow {
	t.Helper()
	f, ok, err := trackedFlow(dp, func(f Flow) bool { return f.Local.Addr().String() == local && f.Remote.Port() == nstest.ServerPort })
	require.NoError(t, err)
	require.True(t, ok, "no flow from %s", local)
	return f
}

// openOnVeth opens a datapath on veth0 in namespace ns, closed at the
// end of the test unless the test closes it first.
func openOnVeth(tb testing.TB, ns *nstest.NS) *Datapath {
	tb.Helper()
	var dp *Datapath
	require.NoError(tb, ns.Do(func() error {
		var err error
		dp, err = Open(Options{Iface: "veth0", Logger: slog.New(slog.DiscardHandler)})
		return err
	}))
	tb.Cleanup(func() { _ = dp.Close() })
	return dp
}

func tcxPrograms(t *testing.T, ns *nstest.NS, ifname string) int {
	t.Helper()
	count := 0
	require.NoError(t, ns.Do(func() error {
		iface, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		for _, attach := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
			res, err := link.QueryPrograms(link.QueryOptions{Target: iface.Index, Attach: attach})
			if err != nil {
				return err
			}
			count += len(res.Programs)
		}
		return nil
	}))
	return count
}

func tcShow(t *testing.T, ns *nstest.NS, args ...string) string {
	t.Helper()
	out, err := ns.Run(context.Background(), "tc", args...)
	require.NoError(t, err)
	return out
}

// TestAttachModesOnEthernet attaches both ways to a veth, checks that a
// real transfer is clamped, and that Close leaves nothing behind.
func TestAttachModesOnEthernet(t *testing.T) {
	tests := []struct {
		mode           string
		server, client string
	}{
		{AttachTCX, nstest.ServerAddr, nstest.UEAddr},
		{AttachClsact, nstest.ServerAddr6, nstest.UEAddr6},
	}
	for _, tc := range tests {
		mode := tc.mode
		t.Run(mode, func(t *testing.T) {
			server, ue := nstest.ServerUEPair(t)
			serverEndpoint := net.JoinHostPort(tc.server, fmt.Sprint(nstest.ServerPort))
			srv := tcptest.StartBulkServer(t, server, serverEndpoint)
			var dp *Datapath
			require.NoError(t, ue.Do(func() error {
				var err error
				dp, err = Open(Options{Iface: "veth0", Attach: mode, Logger: slog.New(slog.DiscardHandler)})
				return err
			}))
			assert.Equal(t, mode, dp.AttachMode())
			require.NoError(t, dp.SetClamp(32<<10, time.Now().Add(time.Minute)))

			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			received, _ := tcptest.Download(t, ctx, ue, serverEndpoint)
			<-srv.Conns
			<-ctx.Done()
			cancel()
			assert.Positive(t, received())

			c, err := dp.Counters()
			require.NoError(t, err)
			assert.Positive(t, c[m2hoCounterIdCNT_CLAMP_APPLIED])
			assert.Positive(t, c[m2hoCounterIdCNT_INGRESS_PACKETS])
			assert.Zero(t, c[m2hoCounterIdCNT_NO_WSCALE])
			flow := flowFrom(t, dp, tc.client)
			assert.True(t, flow.WScaleKnown)
			assert.Positive(t, flow.RxBytes)

			require.NoError(t, dp.Close())
			assert.Zero(t, tcxPrograms(t, ue, "veth0"))
			assert.NotContains(t, tcShow(t, ue, "qdisc", "show", "dev", "veth0"), "clsact", "created qdisc removed")
			require.NoError(t, dp.Close(), "Close is idempotent")
		})
	}
}

// TestClsactLeavesForeignStateAlone attaches next to someone else's clsact
// qdisc and filter and checks that both survive Close.
func TestClsactLeavesForeignStateAlone(t *testing.T) {
	_, ue := nstest.ServerUEPair(t)
	ctx := context.Background()
	_, err := ue.Run(ctx, "tc", "qdisc", "add", "dev", "veth0", "clsact")
	require.NoError(t, err)
	_, err = ue.Run(ctx, "tc", "filter", "add", "dev", "veth0", "ingress", "prio", "10", "protocol", "ip",
		"u32", "match", "ip", "src", "192.0.2.99/32", "flowid", "1:1")
	require.NoError(t, err)

	var dp *Datapath
	require.NoError(t, ue.Do(func() error {
		var err error
		dp, err = Open(Options{Iface: "veth0", Attach: AttachClsact, Logger: slog.New(slog.DiscardHandler)})
		return err
	}))
	filters := tcShow(t, ue, "filter", "show", "dev", "veth0", "ingress")
	assert.Contains(t, filters, "m2ho_ingress")
	assert.Contains(t, filters, "u32")
	require.NoError(t, dp.Close())

	assert.Contains(t, tcShow(t, ue, "qdisc", "show", "dev", "veth0"), "clsact")
	filters = tcShow(t, ue, "filter", "show", "dev", "veth0", "ingress")
	assert.Contains(t, filters, "u32", "foreign filter kept")
	assert.NotContains(t, filters, "m2ho")
	assert.False(t, strings.Contains(tcShow(t, ue, "filter", "show", "dev", "veth0", "egress"), "m2ho"))
}

// TestCloseStopsReadBursts checks that ReadBursts returns when the
// datapath closes.
func TestCloseStopsReadBursts(t *testing.T) {
	_, ue := nstest.ServerUEPair(t)
	dp := openOnVeth(t, ue)
	done := make(chan error, 1)
	go func() { done <- dp.ReadBursts(context.Background(), func(Burst) {}) }()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, dp.Close())
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("ReadBursts still running after Close")
	}
}

// TestFollowsTheInterface renames the interface the programs are attached
// to and back, then deletes it, as a modem that resets takes its interface
// with it, and makes a new one of the same name: the programs leave the first and attach to the
// second by themselves, with the maps, and so the policy in force, kept,
// and Close still leaves nothing behind.
func TestFollowsTheInterface(t *testing.T) {
	for _, mode := range []string{AttachTCX, AttachClsact} {
		t.Run(mode, func(t *testing.T) {
			server, ue := nstest.ServerUEPair(t)
			serverEndpoint := net.JoinHostPort(nstest.ServerAddr, fmt.Sprint(nstest.ServerPort))
			srv := tcptest.StartBulkServer(t, server, serverEndpoint)
			dp := openIn(t, ue, Options{Iface: "veth0", Attach: mode})
			require.NoError(t, dp.SetClamp(32<<10, time.Now().Add(time.Minute)))
			// clampedDownload runs a short download and returns how many
			// ACKs the clamp rewrote meanwhile
			clampedDownload := func() uint64 {
				before, err := dp.Counters()
				require.NoError(t, err)
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				received, _ := tcptest.Download(t, ctx, ue, serverEndpoint)
				<-srv.Conns
				<-ctx.Done()
				assert.Positive(t, received())
				after, err := dp.Counters()
				require.NoError(t, err)
				return after[m2hoCounterIdCNT_CLAMP_APPLIED] - before[m2hoCounterIdCNT_CLAMP_APPLIED]
			}
			assert.Positive(t, clampedDownload())
			firstIndex := ifindexIn(t, ue, "veth0")
			programsOn := func(ifname string) bool {
				if mode == AttachTCX {
					return tcxPrograms(t, ue, ifname) > 0
				}
				return strings.Contains(tcShow(t, ue, "filter", "show", "dev", ifname, "egress"), "m2ho_egress")
			}

			// the name, not the interface, is what the programs follow
			rename := func(from, to string) {
				link, err := ue.Netlink().LinkByName(from)
				require.NoError(t, err)
				require.NoError(t, ue.Netlink().LinkSetDown(link))
				require.NoError(t, ue.Netlink().LinkSetName(link, to))
				require.NoError(t, ue.Netlink().LinkSetUp(link))
			}
			rename("veth0", "veth0old")
			require.Eventually(t, func() bool { return dp.AttachMode() == AttachNone }, 5*time.Second, 10*time.Millisecond,
				"the programs leave the interface that lost the name")
			assert.False(t, programsOn("veth0old"), "nothing left on the renamed interface")
			rename("veth0old", "veth0")
			require.Eventually(t, func() bool { return dp.AttachMode() == mode }, 5*time.Second, 10*time.Millisecond,
				"the programs attach to the interface that took the name back")

			resetModem(t, dp, server, ue, mode)
			assert.NotEqual(t, firstIndex, ifindexIn(t, ue, "veth0"), "a new interface")
			assert.Positive(t, clampedDownload(), "the clamp set before acts on the new interface")
			assert.True(t, programsOn("veth0"))

			require.NoError(t, dp.Close())
			assert.Zero(t, tcxPrograms(t, ue, "veth0"))
			assert.NotContains(t, tcShow(t, ue, "qdisc", "show", "dev", "veth0"), "clsact", "created qdisc removed")
		})
	}
}

// resetModem deletes ue's veth0, as a modem that resets takes its
// interface with it, and makes a new one of the name, then waits for the
// programs to leave the first and attach to the second in mode.
func resetModem(t *testing.T, dp *Datapath, server, ue *nstest.NS, mode string) {
	t.Helper()
	link, err := ue.Netlink().LinkByName("veth0")
	require.NoError(t, err)
	require.NoError(t, ue.Netlink().LinkDel(link))
	require.Eventually(t, func() bool { return dp.AttachMode() == AttachNone }, 5*time.Second, 5*time.Millisecond,
		"the programs leave the interface that is gone")
	nstest.Pair(t, server, ue, nstest.Link{AIfname: "veth0", BIfname: "veth0",
		AAddrs: []string{nstest.ServerAddr + "/24"}, BAddrs: []string{nstest.UEAddr + "/24"}})
	require.Eventually(t, func() bool { return dp.AttachMode() == mode }, 5*time.Second, 5*time.Millisecond,
		"the programs attach to the interface that took the name")
}

// TestModemResetsLeaveNothingBehind resets the modem many times, as a
// vehicle gateway's may over months: each time its interface goes and a
// new one takes its name, and the programs follow. What each attach opens
// (links, netlink and scan sockets, goroutines, close hooks) goes with
// it: the process holds no more after many resets than after the first few.
func TestModemResetsLeaveNothingBehind(t *testing.T) {
	const warmUpResets, resets = 3, 30
	server, ue := nstest.ServerUEPair(t)
	dp := openIn(t, ue, Options{Iface: "veth0"})
	// what a process holds: its descriptors and goroutines, and the
	// datapath's close hooks
	type held struct{ fds, goroutines, hooks int }
	holding := func() held {
		fds, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return held{len(fds), runtime.NumGoroutine(), closeHookCount(dp)}
	}
	// what the first resets start once (pools, the runtime's own
	// goroutines) stays: the count starts after them
	for range warmUpResets {
		resetModem(t, dp, server, ue, AttachTCX)
	}
	first := holding()
	for range resets {
		resetModem(t, dp, server, ue, AttachTCX)
	}
	// The last attach's scan ends a moment after it. The wait polls on
	// this goroutine: Eventually's condition runs on a goroutine of its
	// own, which would count.
	noMore := func(h held) bool {
		return h.fds <= first.fds && h.goroutines <= first.goroutines && h.hooks <= first.hooks
	}
	last := holding()
	for deadline := time.Now().Add(2 * time.Second); !noMore(last) && time.Now().Before(deadline); last = holding() {
		time.Sleep(20 * time.Millisecond)
	}
	assert.LessOrEqual(t, last.fds, first.fds, "descriptors")
	assert.LessOrEqual(t, last.goroutines, first.goroutines, "goroutines")
	assert.LessOrEqual(t, last.hooks, first.hooks, "close hooks")
	t.Logf("after %d resets: %+v; after %d more: %+v", warmUpResets, first, resets, last)
}

// TestFollowRefusesOtherFraming replaces the Ethernet interface the
// programs were loaded for by a raw-IP one of the same name: the programs
// read their headers at fixed offsets for one framing, so they stay
// detached, and the log says why.
func TestFollowRefusesOtherFraming(t *testing.T) {
	_, ue := nstest.ServerUEPair(t)
	var logs logbuf.Buffer
	dp := openIn(t, ue, Options{Iface: "veth0", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	link, err := ue.Netlink().LinkByName("veth0")
	require.NoError(t, err)
	require.NoError(t, ue.Netlink().LinkDel(link))

	tun, err := ue.OpenTun("veth0")
	require.NoError(t, err)
	defer tun.Close()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "cannot attach to the interface") },
		5*time.Second, 10*time.Millisecond, "the follower met the raw-IP interface")
	assert.Contains(t, logs.String(), "loaded for Ethernet frames, the interface carries raw IP")
	assert.Equal(t, AttachNone, dp.AttachMode())
	assert.Zero(t, tcxPrograms(t, ue, "veth0"))
}

// TestFollowAfterLostLinkMessages overflows the follower's subscription
// while it is held up, so that the kernel drops the message that the
// interface is gone: the follower subscribes again and finds out by
// looking, and follows the interfaces that come after.
func TestFollowAfterLostLinkMessages(t *testing.T) {
	server, ue := nstest.ServerUEPair(t)
	var logs logbuf.Buffer
	dp := openIn(t, ue, Options{Iface: "veth0", Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	lo, err := ue.Netlink().LinkByName("lo")
	require.NoError(t, err)
	veth, err := ue.Netlink().LinkByName("veth0")
	require.NoError(t, err)

	// the follower waits for the lock at its next message, and link
	// messages pile up in its socket until the kernel drops them
	dp.attachMu.Lock()
	for i := range 2000 {
		require.NoError(t, ue.Netlink().LinkSetAlias(lo, fmt.Sprintf("flood %d", i)))
	}
	require.NoError(t, ue.Netlink().LinkDel(veth))
	dp.attachMu.Unlock()

	require.Eventually(t, func() bool { return dp.AttachMode() == AttachNone }, 5*time.Second, 10*time.Millisecond,
		"the follower finds the interface gone without its message")
	assert.Contains(t, logs.String(), "no buffer space", "the kernel dropped link messages")
	nstest.Pair(t, server, ue, nstest.Link{AIfname: "veth0", BIfname: "veth0"})
	require.Eventually(t, func() bool { return dp.AttachMode() == AttachTCX }, 5*time.Second, 10*time.Millisecond,
		"the new subscription sees the next interface")
}

func TestOpenErrors(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.NewNS(t, "err")
	err := ns.Do(func() error {
		_, err := Open(Options{Iface: "nonexistent0"})
		return err
	})
	assert.ErrorIs(t, err, ErrNoInterface)
	_, err = Open(Options{})
	assert.ErrorIs(t, err, ErrNoInterface)
	err = ns.Do(func() error {
		_, err := Open(Options{Iface: "lo", Attach: "xdp"})
		return err
	})
	assert.Error(t, err)
}
