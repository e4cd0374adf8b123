package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/logbuf"
	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/handshakes"
)

// ends is a fixture segment's connection as handshakes reports it.
func (s segment) ends() (local, remote netip.AddrPort) {
	l, r := localV4, remoteV4
	if s.ipv6 {
		l, r = localV6, remoteV6
	}
	la, _ := netip.AddrFromSlice(l)
	ra, _ := netip.AddrFromSlice(r)
	return netip.AddrPortFrom(la.Unmap(), s.localPort), netip.AddrPortFrom(ra.Unmap(), s.remotePort)
}

func flowAt(t *testing.T, d *Datapath, local netip.AddrPort) Flow {
	t.Helper()
	f, ok, err := trackedFlow(d, func(f Flow) bool { return f.Local == local })
	require.NoError(t, err)
	require.True(t, ok, "no flow from %v", local)
	return f
}

func hintCount(t *testing.T, d *Datapath) int {
	t.Helper()
	n, err := storedHandshakeCount(d)
	require.NoError(t, err)
	return n
}

// adoptAll adopts hs in one batch, as a scan does, and returns how many
// the store took.
func adoptAll(d *Datapath, hs []handshakes.Handshake) (int, error) {
	batch := d.adoption()
	for _, h := range hs {
		batch.adopt(h)
	}
	return batch.done()
}

// closeHookCount is how many hooks wait for the datapath to close.
func closeHookCount(d *Datapath) int {
	d.hooksMu.Lock()
	defer d.hooksMu.Unlock()
	return len(d.closeHooks)
}

func storedHandshakeCount(d *Datapath) (int, error) {
	var key m2hoFlowKey
	var hint m2hoHandshakeHint
	n := 0
	iter := d.objs.HandshakeHints.Iterate()
	for iter.Next(&key, &hint) {
		n++
	}
	return n, iter.Err()
}

// TestClampAdoptsHandshake: a flow whose handshake the programs never saw
// takes its scale and MSS from an adopted handshake, once, when a clamp
// first meets it; the clamp then rewrites its ACKs as for any flow.
func TestClampAdoptsHandshake(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "IPv4", true: "IPv6"}[ipv6], func(t *testing.T) {
			d := loadDetached(t, false, 0)
			s := freshPorts(segment{ipv6: ipv6, ethernet: true, timestamps: true})
			local, remote := s.ends()
			other := freshPorts(s)
			otherLocal, otherRemote := other.ends()
			stored, err := adoptAll(d, []handshakes.Handshake{
				{Local: local, Remote: remote, WScale: 9, Source: handshakes.FromConntrack},
				// a later report of the same connection replaces the
				// earlier, as a socket's follows conntrack's in a scan
				{Local: local, Remote: remote, WScale: 5, MSS: 1400, Source: handshakes.FromSocket},
				// a connection whose flow never shows up
				{Local: otherLocal, Remote: otherRemote, WScale: 3, Source: handshakes.FromConntrack},
			})
			require.NoError(t, err)
			assert.Equal(t, 3, stored)

			// before any clamp, nothing is adopted
			expectWindow(t, d, hostACK(s, 50000, 0), 50000)
			assert.Equal(t, 2, hintCount(t, d))

			require.NoError(t, d.SetClamp(8192, time.Now().Add(time.Minute)))
			expectWindow(t, d, hostACK(s, 50000, 0), 8192>>5)
			expectWindow(t, d, hostACK(s, 50000, 0), 8192>>5)
			// below one MSS, the adopted MSS is the floor: ceil(1400 / 32)
			require.NoError(t, d.SetClamp(100, time.Now().Add(time.Minute)))
			expectWindow(t, d, hostACK(s, 50000, 0), 44)

			c, err := d.Counters()
			require.NoError(t, err)
			assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_WSCALE_ADOPTED])
			assert.Zero(t, c[m2hoCounterIdCNT_NO_WSCALE])
			assert.Equal(t, uint64(3), c[m2hoCounterIdCNT_CLAMP_APPLIED])
			assert.Equal(t, 1, hintCount(t, d), "the adopted handshake leaves the store")
			f := flowAt(t, d, local)
			assert.True(t, f.WScaleKnown)
			assert.Equal(t, uint8(5), f.WScale)
			assert.Equal(t, uint16(1400), f.MSS)
		})
	}
}

func TestAdoptedHandshakeDefaults(t *testing.T) {
	d := loadDetached(t, true, 0)
	s := freshPorts(segment{})
	local, remote := s.ends()
	// conntrack knows no MSS, nor does a detached datapath its link's
	// MTU; a scale above RFC 7323's 14 counts as 14
	_, err := adoptAll(d, []handshakes.Handshake{{Local: local, Remote: remote, WScale: 15}})
	require.NoError(t, err)
	require.NoError(t, d.SetClamp(1, time.Now().Add(time.Minute)))
	// the floor is the default MSS of IPv4, 536 bytes: one unit of 2^14
	expectWindow(t, d, hostACK(s, 50000, 0), 1)
	f := flowAt(t, d, local)
	assert.Equal(t, uint8(14), f.WScale)
	assert.Equal(t, uint16(536), f.MSS)
}

// TestAdoptedHandshakeLinkMSS: a handshake without an MSS takes the
// largest segment of the link's MTU as its floor; one with an MSS keeps it.
func TestAdoptedHandshakeLinkMSS(t *testing.T) {
	d := loadDetached(t, true, 0)
	d.linkMTU = 1400
	v4, v6, known := freshPorts(segment{}), freshPorts(segment{ipv6: true}), freshPorts(segment{})
	var hs []handshakes.Handshake
	for _, s := range []segment{v4, v6} {
		local, remote := s.ends()
		hs = append(hs, handshakes.Handshake{Local: local, Remote: remote, Source: handshakes.FromConntrack})
	}
	local, remote := known.ends()
	hs = append(hs, handshakes.Handshake{Local: local, Remote: remote, MSS: 1448, Source: handshakes.FromSocket})
	_, err := adoptAll(d, hs)
	require.NoError(t, err)
	require.NoError(t, d.SetClamp(1, time.Now().Add(time.Minute)))
	for _, tc := range []struct {
		s   segment
		mss uint16
	}{{v4, 1400 - 40}, {v6, 1400 - 60}, {known, 1448}} {
		// scale 0: the floor is the MSS itself
		expectWindow(t, d, hostACK(tc.s, 50000, 0), tc.mss)
		local, _ := tc.s.ends()
		assert.Equal(t, tc.mss, flowAt(t, d, local).MSS)
	}
}

func TestLargestSegment(t *testing.T) {
	tests := []struct {
		mtu  int
		ipv4 bool
		want uint16
	}{
		{mtu: 1500, ipv4: true, want: 1460},
		{mtu: 1500, want: 1440},
		{mtu: 1280, want: 1220},
		{mtu: 68, ipv4: true, want: 28},
		{mtu: 40, ipv4: true, want: 0},
		{mtu: 0, want: 0},
		{mtu: 1 << 20, ipv4: true, want: 0xffff},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, largestSegment(tt.mtu, tt.ipv4), "MTU %d, IPv4 %v", tt.mtu, tt.ipv4)
	}
}

// TestSeenHandshakeWins: a flow whose handshake the programs saw keeps
// what they learned, and leaves an adopted handshake for it alone.
func TestSeenHandshakeWins(t *testing.T) {
	d := loadDetached(t, true, 0)
	s := freshPorts(segment{})
	handshake(t, d, s, 7, 7)
	local, remote := s.ends()
	_, err := adoptAll(d, []handshakes.Handshake{{Local: local, Remote: remote, WScale: 2, MSS: 1400}})
	require.NoError(t, err)
	require.NoError(t, d.SetClamp(8192, time.Now().Add(time.Minute)))
	expectWindow(t, d, hostACK(s, 50000, 0), 8192>>7)
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Zero(t, c[m2hoCounterIdCNT_WSCALE_ADOPTED])
	assert.Equal(t, 1, hintCount(t, d))
}

// TestFreezeNeedsNoHandshake: a zero window is zero at any scale, so the
// freeze baseline acts on flows whose handshake went unseen.
func TestFreezeNeedsNoHandshake(t *testing.T) {
	d := loadDetached(t, false, 0)
	s := freshPorts(segment{ethernet: true})
	require.NoError(t, d.SetFreeze(time.Now().Add(time.Minute)))
	expectWindow(t, d, hostACK(s, 50000, 0), 0)
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Zero(t, c[m2hoCounterIdCNT_NO_WSCALE])
	assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_CLAMP_APPLIED])
}

// TestAdoptHandshakesFull: the store holds as many handshakes as the flow
// table holds flows, plus the slack every CPU of an LRU hash keeps, at
// most, and makes room for the newest.
func TestAdoptHandshakesFull(t *testing.T) {
	const maxFlows = 16
	d := loadDetached(t, true, maxFlows)
	cpus, err := ebpf.PossibleCPU()
	require.NoError(t, err)
	capacity := maxFlows + cpus*lruLocalFreeTarget
	require.Equal(t, uint32(capacity), d.objs.HandshakeHints.MaxEntries())
	hs := make([]handshakes.Handshake, 3*capacity)
	for i := range hs {
		hs[i] = handshakes.Handshake{
			Local:  netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), uint16(1000+i)),
			Remote: netip.MustParseAddrPort("192.0.2.1:443"),
			WScale: 7,
		}
	}
	stored, err := adoptAll(d, hs)
	require.NoError(t, err)
	assert.Equal(t, len(hs), stored)
	assert.LessOrEqual(t, hintCount(t, d), capacity)
	last := flowKeyOf(hs[len(hs)-1].Local, hs[len(hs)-1].Remote)
	var hint m2hoHandshakeHint
	assert.NoError(t, d.objs.HandshakeHints.Lookup(&last, &hint), "the newest stays")
}

// TestEvictedFlowKeepsHandshake: an idle flow the daemon evicts leaves its
// handshake behind, so that the clamp still acts when the connection
// resumes; a closed connection leaves nothing.
func TestEvictedFlowKeepsHandshake(t *testing.T) {
	d := loadDetached(t, true, 0)
	idle := freshPorts(segment{timestamps: true})
	handshake(t, d, idle, 7, 7)
	expectWindow(t, d, hostACK(idle, 50000, 0), 50000)
	closed := freshPorts(segment{})
	handshake(t, d, closed, 6, 6)
	rst := hostACK(closed, 50000, 0)
	rst.rst = true
	frame, _ := rst.build(t)
	d.egress(t, frame)

	evicted, err := d.EvictIdle(0, 0)
	require.NoError(t, err)
	assert.Equal(t, 2, evicted)
	assert.Equal(t, 1, hintCount(t, d), "only the open connection's handshake stays")

	require.NoError(t, d.SetClamp(8192, time.Now().Add(time.Minute)))
	expectWindow(t, d, hostACK(idle, 50000, 0), 8192>>7)
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_WSCALE_ADOPTED])
	assert.Zero(t, c[m2hoCounterIdCNT_NO_WSCALE])
	local, _ := idle.ends()
	assert.Equal(t, uint16(hostMSS), flowAt(t, d, local).MSS)
}

// TestHandshakeRescanOnClosedDatapath starts a rescan on a datapath that
// has closed in the meantime, as a re-attach racing with Close may: it
// stops at once, with no timer to fire on closed maps, and registers no
// close hook.
func TestHandshakeRescanOnClosedDatapath(t *testing.T) {
	// what Close leaves for the hooks
	d := &Datapath{closed: true}
	scanner, err := handshakes.NewScanner(nil)
	require.NoError(t, err)
	r := d.startHandshakeRescan(scanner, []handshakes.Ends{{}})
	r.mu.Lock()
	defer r.mu.Unlock()
	assert.True(t, r.stopped)
	assert.Nil(t, r.timer)
	assert.Zero(t, closeHookCount(d))
}

// TestFinishedRescanRemovesItsCloseHook runs a rescan whose one pending
// handshake is no longer under way: the round finds nothing left to wait
// for, and the finished rescan unregisters the hook that would have
// stopped it at Close, so that rescans after modem resets do not pile up.
func TestFinishedRescanRemovesItsCloseHook(t *testing.T) {
	d := loadDetached(t, false, 1024)
	before := closeHookCount(d)
	var scanner *handshakes.Scanner
	require.NoError(t, nstest.NewNS(t, "hs").Do(func() error {
		var err error
		scanner, err = handshakes.NewScanner(nil)
		return err
	}))
	gone := handshakes.Ends{Local: netip.MustParseAddrPort("10.77.0.2:40000"), Remote: netip.MustParseAddrPort("10.77.0.1:5201")}
	r := d.startHandshakeRescan(scanner, []handshakes.Ends{gone})
	require.Equal(t, before+1, closeHookCount(d), "the rescan waits for Close")
	r.run()
	assert.Equal(t, before, closeHookCount(d), "the finished rescan leaves no close hook behind")
	r.mu.Lock()
	defer r.mu.Unlock()
	assert.True(t, r.stopped)
	assert.Equal(t, 1, r.rounds)
}

// TestHandshakeRescanStopsAtClose holds a connection in its handshake (the
// server drops its SYNs), opens a datapath, which finds it under way and
// looks for it again after a second, then closes the datapath: the rescan
// due a further two seconds later does not come.
func TestHandshakeRescanStopsAtClose(t *testing.T) {
	server, ue := nstest.ServerUEPair(t)
	server.Nft(t, "add table inet m2ho_drop; "+
		"add chain inet m2ho_drop in { type filter hook input priority 0; }; "+
		"add rule inet m2ho_drop in tcp flags & (syn | ack) == syn drop")
	require.NoError(t, ue.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		t.Cleanup(func() { unix.Close(fd) })
		to := &unix.SockaddrInet4{Addr: netip.MustParseAddr(nstest.ServerAddr).As4(), Port: nstest.ServerPort}
		if err := unix.Connect(fd, to); !errors.Is(err, unix.EINPROGRESS) {
			return fmt.Errorf("non-blocking connect: %w", err)
		}
		return nil
	}))

	var logs logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var dp *Datapath
	require.NoError(t, ue.Do(func() error {
		var err error
		dp, err = Open(Options{Iface: "veth0", MaxFlows: 1024, Logger: logger})
		return err
	}))
	t.Cleanup(func() { _ = dp.Close() })
	assert.Contains(t, logs.String(), "under_way=1")
	const rescan = "under way at attach"
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), rescan) },
		3*firstHandshakeRescan, 50*time.Millisecond, "the first rescan")
	assert.Contains(t, logs.String(), "round=1 stored=0 still_under_way=1")
	require.NoError(t, dp.Close())
	time.Sleep(3 * firstHandshakeRescan)
	assert.Equal(t, 1, strings.Count(logs.String(), rescan), "rescans after Close:\n%s", logs.String())
}
