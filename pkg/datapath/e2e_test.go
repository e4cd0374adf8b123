package datapath

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/m2ho/m2ho/internal/nstest"
)

func openIn(t *testing.T, ns *nstest.NS, opts Options) *Datapath {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
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

func flowFrom(t *testing.T, dp *Datapath, local string) Flow {
	t.Helper()
	f, ok, err := trackedFlow(dp, func(f Flow) bool { return f.Local.Addr().String() == local && f.Remote.Port() == uePort })
	require.NoError(t, err)
	require.True(t, ok, "no flow from %s", local)
	return f
}

// TestE2EClampRTTAndExpiry runs a CUBIC bulk download over the raw-IP
// modem link (20 ms RTT), from the ue host itself and from a LAN client
// forwarded by it: the clamp holds the rate near clamp/RTT, the RTT the
// programs measure matches the sender kernel's within 10%, and when the
// clamp's deadline passes with nobody to clear it the rate recovers.
func TestE2EClampRTTAndExpiry(t *testing.T) {
	const (
		oneWay     = 10 * time.Millisecond
		clampBytes = 32 << 10
	)
	for _, client := range []string{"ue host", "lan client"} {
		t.Run(client, func(t *testing.T) {
			m := newModemLink(t, oneWay)
			clientNS, clientAddr := m.ue, ueAddr
			if client == "lan client" {
				clientNS, clientAddr = m.addLAN(t), lanAddr
			}
			server := startBulkServer(t, m.server, fmt.Sprintf("%s:%d", serverAddr, uePort))
			dp := openIn(t, m.ue, Options{Iface: "wwan0"})
			assert.Equal(t, AttachTCX, dp.AttachMode())

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			received, _ := download(t, ctx, clientNS, fmt.Sprintf("%s:%d", serverAddr, uePort))
			serverConn := <-server.conns
			time.Sleep(500 * time.Millisecond)

			deadline := time.Now().Add(2500 * time.Millisecond)
			require.NoError(t, dp.SetClamp(clampBytes, deadline))
			time.Sleep(500 * time.Millisecond)
			clamped := rate(received, time.Second)

			// Both ends time the same round trips (the clamp keeps the
			// sender window-limited, so an ACK releases data at once),
			// but each smooths its own samples: the sender one per ACK,
			// the datapath one per echoed TSval. A delay line that
			// jitters under load moves the two averages apart for a
			// moment, so the smoothed RTTs are compared as the mean of
			// readings taken side by side over half a second.
			const readings = 5
			var flow Flow
			var srtt, kernelSRTT, kernelMinRTT time.Duration
			for i := range readings {
				if i > 0 {
					time.Sleep(100 * time.Millisecond)
				}
				flow = flowFrom(t, dp, clientAddr)
				info, err := tcpInfo(serverConn)
				require.NoError(t, err)
				srtt += flow.SRTT / readings
				kernelSRTT += time.Duration(info.Rtt) * time.Microsecond / readings
				kernelMinRTT = time.Duration(info.Min_rtt) * time.Microsecond
			}
			assert.True(t, flow.WScaleKnown)
			require.Positive(t, flow.RTTSamples)
			t.Logf("%s: clamped %.2f MB/s; measured srtt %v min %v (%d samples); sender kernel srtt %v min %v",
				client, clamped/1e6, srtt, flow.RTTMin, flow.RTTSamples, kernelSRTT, kernelMinRTT)
			assert.InEpsilon(t, kernelMinRTT.Seconds(), flow.RTTMin.Seconds(), 0.10, "min RTT vs TCP_INFO")
			assert.InEpsilon(t, kernelSRTT.Seconds(), srtt.Seconds(), 0.10, "smoothed RTT vs TCP_INFO")

			expected := clampBytes / srtt.Seconds()
			ratio := clamped / expected
			assert.True(t, ratio > 0.5 && ratio < 1.6, "clamped rate %.0f B/s vs clamp/RTT %.0f B/s", clamped, expected)

			time.Sleep(time.Until(deadline) + 500*time.Millisecond)
			recovered := rate(received, time.Second)
			t.Logf("%s: after expiry %.2f MB/s", client, recovered/1e6)
			assert.Greater(t, recovered, 2*clamped, "deadline expiry restores throughput")

			// every sample counted is in the histogram: read both once
			// the download has stopped taking samples
			cancel()
			time.Sleep(200 * time.Millisecond)
			c, err := dp.Counters()
			require.NoError(t, err)
			assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_CLAMP_EXPIRED])
			assert.Positive(t, c[m2hoCounterIdCNT_CLAMP_APPLIED])
			assert.Zero(t, c[m2hoCounterIdCNT_MALFORMED])
			hist, err := dp.RTTHistogram()
			require.NoError(t, err)
			var histSamples uint64
			for _, n := range hist {
				histSamples += n
			}
			assert.Equal(t, c[m2hoCounterIdCNT_RTT_SAMPLES], histSamples)
		})
	}
}

// TestE2EDupACKSuppression reorders the downlink like a handover's context
// release: a segment is held back while later ones arrive. Duplicate ACKs
// sent before the epoch reach the wire; those after it are dropped, exactly
// as many as the receiver queued out of order, and the flow releases
// itself when the held segment arrives and its ACK passes the snapshot.
// The receiver is the ue host itself, or a LAN client whose ACKs the ue
// host forwards.
func TestE2EDupACKSuppression(t *testing.T) {
	for _, client := range []string{"ue host", "lan client"} {
		t.Run(client, func(t *testing.T) { testDupACKSuppression(t, client == "lan client") })
	}
}

func testDupACKSuppression(t *testing.T, lan bool) {
	const (
		before = 3 // out-of-order segments before the epoch
		after  = 5 // out-of-order segments after it
	)
	// The datapath holds duplicates for at most two smoothed RTTs after
	// the acknowledgement last moved: the link's delay must leave the
	// test's pause before the epoch well within that.
	m := newModemLink(t, 30*time.Millisecond)
	clientNS, clientAddr := m.ue, ueAddr
	if lan {
		clientNS, clientAddr = m.addLAN(t), lanAddr
	}
	// one duplicate ACK per out-of-order segment: no SACK compression
	require.NoError(t, clientNS.SetSysctl("net.ipv4.tcp_comp_sack_nr", "0"))
	server := startBulkServer(t, m.server, fmt.Sprintf("%s:%d", serverAddr, uePort))
	dp := openIn(t, m.ue, Options{Iface: "wwan0"})
	// a small receive window keeps the transfer steady and the test quick
	require.NoError(t, dp.SetClamp(128<<10, time.Now().Add(time.Minute)))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	received, _ := download(t, ctx, clientNS, fmt.Sprintf("%s:%d", serverAddr, uePort))
	<-server.conns
	time.Sleep(300 * time.Millisecond)

	var (
		held        []byte
		holeSeq     atomic.Uint32
		suppressing atomic.Bool
		passed      int
		epochErr    = make(chan error, 1)
		reordered   = make(chan struct{})
	)
	var dupsBefore, dupsDuring atomic.Uint64
	seen := func(pkt []byte) {
		seg, ok := parseIPv4TCP(pkt)
		if !ok || seg.fromServer || seg.payload != 0 {
			return
		}
		if hole := holeSeq.Load(); hole != 0 && seg.ack == hole {
			if suppressing.Load() {
				dupsDuring.Add(1)
			} else {
				dupsBefore.Add(1)
			}
		}
	}
	m.uplinkSeen.Store(&seen)
	m.setDownlinkHook(func(pkt []byte) [][]byte {
		seg, ok := parseIPv4TCP(pkt)
		if !ok || !seg.fromServer || seg.payload == 0 || passed > before+after {
			return [][]byte{pkt}
		}
		if held == nil {
			held = pkt
			holeSeq.Store(seg.seq)
			return nil
		}
		passed++
		if passed == before+1 {
			// let the duplicates of the segments before leave first
			time.Sleep(20 * time.Millisecond)
			_, err := dp.StartSuppression(time.Now().Add(10 * time.Second))
			suppressing.Store(true)
			epochErr <- err
		}
		if passed == before+after {
			passed++
			close(reordered)
			return [][]byte{pkt, held}
		}
		return [][]byte{pkt}
	})

	select {
	case <-reordered:
	case <-time.After(10 * time.Second):
		t.Fatal("the downlink never carried enough segments")
	}
	require.NoError(t, <-epochErr)
	time.Sleep(100 * time.Millisecond)

	c, err := dp.Counters()
	require.NoError(t, err)
	flow := flowFrom(t, dp, clientAddr)
	t.Logf("hole at %d, snapshot %d, duplicates on the wire before the epoch %d, counters %+v",
		holeSeq.Load(), flow.SnapshotRxSeq, dupsBefore.Load(), c)
	assert.Equal(t, uint64(after), c[m2hoCounterIdCNT_DUPACK_SUPPRESSED], "dropped exactly the duplicates after the epoch")
	assert.GreaterOrEqual(t, dupsBefore.Load(), uint64(before), "duplicates before the epoch reach the wire")
	assert.Zero(t, dupsDuring.Load(), "no duplicate reaches the wire while suppressing")
	assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_FLOW_RELEASED])
	pending, err := dp.SuppressionPending()
	require.NoError(t, err)
	assert.Zero(t, pending, "released by its own ACK")
	bytesBefore := received()
	time.Sleep(200 * time.Millisecond)
	assert.Greater(t, received(), bytesBefore, "transfer goes on")
}

// TestE2ERealLossDuringSuppression drops a downlink segment for good while
// suppression is on. The receiver's duplicate ACKs are held for at most
// two smoothed RTTs after its acknowledgement last moved; then they, or
// the duplicate that the sender's tail loss probe draws, go out, and the
// real kernel sender repairs the loss without its retransmission timer.
func TestE2ERealLossDuringSuppression(t *testing.T) {
	m := newModemLink(t, 20*time.Millisecond)
	require.NoError(t, m.ue.SetSysctl("net.ipv4.tcp_comp_sack_nr", "0"))
	server := startBulkServer(t, m.server, fmt.Sprintf("%s:%d", serverAddr, uePort))
	dp := openIn(t, m.ue, Options{Iface: "wwan0"})
	require.NoError(t, dp.SetClamp(128<<10, time.Now().Add(time.Minute)))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	received, _ := download(t, ctx, m.ue, fmt.Sprintf("%s:%d", serverAddr, uePort))
	<-server.conns
	time.Sleep(500 * time.Millisecond)
	timeoutsBefore := tcpExtCounter(t, m.server, "TCPTimeouts")

	var (
		lost               atomic.Uint32
		lostAt, repairedAt atomic.Int64
		epochErr           = make(chan error, 1)
	)
	m.setDownlinkHook(func(pkt []byte) [][]byte {
		seg, ok := parseIPv4TCP(pkt)
		if !ok || !seg.fromServer || seg.payload == 0 {
			return [][]byte{pkt}
		}
		switch {
		case lost.Load() == 0:
			_, err := dp.StartSuppression(time.Now().Add(10 * time.Second))
			epochErr <- err
			lost.Store(seg.seq)
			lostAt.Store(time.Now().UnixNano())
			return nil
		case seg.seq == lost.Load() && repairedAt.Load() == 0:
			repairedAt.Store(time.Now().UnixNano())
		}
		return [][]byte{pkt}
	})
	select {
	case err := <-epochErr:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the downlink carried no data")
	}
	require.Eventually(t, func() bool { return repairedAt.Load() != 0 }, 5*time.Second, 10*time.Millisecond,
		"the lost segment was never sent again")

	c, err := dp.Counters()
	require.NoError(t, err)
	flow := flowFrom(t, dp, ueAddr)
	t.Logf("lost %d, sent again after %v, srtt %v, counters %+v", lost.Load(),
		time.Duration(repairedAt.Load()-lostAt.Load()), time.Duration(flow.SRTT), c)
	assert.Positive(t, c[m2hoCounterIdCNT_DUPACK_SUPPRESSED], "duplicates were held")
	assert.Positive(t, c[m2hoCounterIdCNT_DUPACK_HOLD_EXPIRED], "and let through after the hold")
	assert.Equal(t, timeoutsBefore, tcpExtCounter(t, m.server, "TCPTimeouts"), "repaired without a retransmission timeout")
	bytesBefore := received()
	time.Sleep(200 * time.Millisecond)
	assert.Greater(t, received(), bytesBefore, "transfer goes on")
}

// tcpExtCounter reads a TcpExt counter of ns's network stack.
func tcpExtCounter(t *testing.T, ns *nstest.NS, name string) uint64 {
	t.Helper()
	var value uint64
	found := false
	require.NoError(t, ns.Do(func() error {
		raw, err := os.ReadFile("/proc/thread-self/net/netstat")
		if err != nil {
			return err
		}
		lines := strings.Split(string(raw), "\n")
		for i := 0; i+1 < len(lines); i++ {
			if !strings.HasPrefix(lines[i], "TcpExt:") || !strings.HasPrefix(lines[i+1], "TcpExt:") {
				continue
			}
			names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
			for j := 1; j < len(names) && j < len(values); j++ {
				if names[j] == name {
					value, err = strconv.ParseUint(values[j], 10, 64)
					found = true
					return err
				}
			}
		}
		return nil
	}))
	require.True(t, found, "no TcpExt counter %s", name)
	return value
}

// TestE2EFlowsClose ends real connections both ways a connection ends: the
// server closes after its data, and the client aborts with a RST. Both
// flows are closed, a third that stays open is not, and the eviction of
// closed flows removes exactly the two.
func TestE2EFlowsClose(t *testing.T) {
	m := newModemLink(t, 2*time.Millisecond)
	addr := fmt.Sprintf("%s:%d", serverAddr, uePort)
	server := startBulkServer(t, m.server, addr)
	dp := openIn(t, m.ue, Options{Iface: "wwan0"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	conns := make(map[string]*net.TCPConn)
	var serverConn *net.TCPConn
	for _, name := range []string{"server closes", "client resets", "stays open"} {
		_, conns[name] = download(t, ctx, m.ue, addr)
		sc := <-server.conns
		if name == "server closes" {
			serverConn = sc
		}
	}
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, serverConn.Close())
	require.NoError(t, conns["client resets"].SetLinger(0))
	require.NoError(t, conns["client resets"].Close())

	closed := func(name string) func() bool {
		return func() bool {
			f, ok, err := trackedFlow(dp, func(f Flow) bool { return f.Local.String() == conns[name].LocalAddr().String() })
			return err == nil && ok && f.Closed
		}
	}
	assert.Eventually(t, closed("server closes"), 5*time.Second, 10*time.Millisecond, "the host acknowledged the server's FIN")
	assert.Eventually(t, closed("client resets"), 5*time.Second, 10*time.Millisecond, "the host sent a RST")
	assert.False(t, closed("stays open")(), "an open connection")

	c, err := dp.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(2), c[m2hoCounterIdCNT_FLOW_CLOSED])
	// A closed connection still carries packets for a moment: window
	// updates while its reader drains the receive buffer after the FIN,
	// RSTs answering data in flight. One evicted before its last packet
	// would come back as a new flow.
	const quietFor = 100 * time.Millisecond
	require.Eventually(t, func() bool {
		flows, err := dp.Flows()
		if err != nil {
			return false
		}
		for _, f := range flows {
			if f.Closed && time.Since(f.LastSeen) < quietFor {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "the closed connections fall quiet")
	evicted, err := dp.EvictIdle(time.Hour, 0)
	require.NoError(t, err)
	assert.Equal(t, 2, evicted, "the closed flows")
	flows, err := dp.Flows()
	require.NoError(t, err)
	require.Len(t, flows, 1)
	assert.Equal(t, conns["stays open"].LocalAddr().String(), flows[0].Local.String())
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

// bigTCPSize is the GSO and GRO limit TestE2EBigTCP gives both veth ends:
// the size the kernel's BIG TCP documentation uses, well above the 64 KB
// that an IP length field can state.
const bigTCPSize = 185000

// enableBigTCP raises the GSO and GRO limits of ifname in ns for IPv4 and
// IPv6, so that TCP builds segments larger than 64 KB. Such a packet
// carries 0 in its IP length field: the skb's length is the packet's.
func enableBigTCP(t *testing.T, ns *nstest.NS, ifname string) {
	t.Helper()
	h := ns.Netlink()
	l, err := h.LinkByName(ifname)
	require.NoError(t, err)
	for _, set := range []func(netlink.Link, int) error{
		h.LinkSetGSOMaxSize, h.LinkSetGROMaxSize, h.LinkSetGSOIPv4MaxSize, h.LinkSetGROIPv4MaxSize,
	} {
		if err := set(l, bigTCPSize); err != nil {
			t.Skipf("BIG TCP limits not settable on this kernel: %v", err)
		}
	}
}

// TestE2EBigTCP runs a CUBIC bulk download over veth with BIG TCP on both
// ends and a datapath on each: the receiver's ingress meets data packets
// larger than 64 KB, the sender's egress sends them. Both parse them as
// TCP, so the receiver's flow counts every byte the socket took in and the
// sender stamps its TSvals and matches their echoes.
func TestE2EBigTCP(t *testing.T) {
	for _, tc := range []struct{ family, server string }{{"ipv4", serverAddr}, {"ipv6", serverAddr6}} {
		t.Run(tc.family, func(t *testing.T) {
			server, ue := vethPair(t)
			enableBigTCP(t, server, "veth0")
			enableBigTCP(t, ue, "veth0")
			receiverDP := openIn(t, ue, Options{Iface: "veth0"})
			senderDP := openIn(t, server, Options{Iface: "veth0"})
			addr := net.JoinHostPort(tc.server, fmt.Sprint(uePort))
			// writes of 1 MiB let the sender fill segments up to the limit
			srv := startBulkServerWrites(t, server, addr, 1<<20, anyCPU)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, conn := download(t, ctx, ue, addr)
			<-srv.conns
			time.Sleep(time.Second)

			// The hook sees a segment before the socket does: the flow's
			// count lies between the socket's count before and after, plus
			// what may be on its way from the hook to the socket.
			const inTransit = 64 * bigTCPSize
			before, err := tcpInfo(conn)
			require.NoError(t, err)
			flow, ok, err := trackedFlow(receiverDP, func(f Flow) bool { return f.Remote.Port() == uePort })
			require.NoError(t, err)
			require.True(t, ok, "the receiver tracks no flow")
			after, err := tcpInfo(conn)
			require.NoError(t, err)
			require.Positive(t, flow.RxPackets)
			perPacket := flow.RxBytes / flow.RxPackets
			t.Logf("%s: %d bytes in %d packets (%d per packet); socket %d-%d",
				tc.family, flow.RxBytes, flow.RxPackets, perPacket, before.Bytes_received, after.Bytes_received)
			require.Greater(t, perPacket, uint64(128<<10), "BIG TCP is not in use: packets average under twice the 64 KB limit")
			assert.GreaterOrEqual(t, flow.RxBytes, before.Bytes_received)
			assert.LessOrEqual(t, flow.RxBytes, after.Bytes_received+inTransit)
			assert.True(t, flow.HaveRxSeq)

			receiverCounters, err := receiverDP.Counters()
			require.NoError(t, err)
			senderCounters, err := senderDP.Counters()
			require.NoError(t, err)
			for name, c := range map[string]Counters{"receiver": receiverCounters, "sender": senderCounters} {
				assert.Zero(t, c[m2hoCounterIdCNT_MALFORMED], "%s: packets parsed as malformed", name)
				assert.Zero(t, c[m2hoCounterIdCNT_UNTRACKED], "%s: segments of untracked flows", name)
			}
			assert.Positive(t, senderCounters[m2hoCounterIdCNT_TS_STAMPED], "the sender stamps its TSvals")
			assert.Positive(t, senderCounters[m2hoCounterIdCNT_RTT_SAMPLES], "the sender matches their echoes")
		})
	}
}

// The clients of the adoption tests: the ue host itself, a LAN client
// that the ue host masquerades, as a CPE router does with IPv4, and one it
// routes, as a CPE router does with IPv6, behind a stateful firewall.
const (
	ueHostClient    = "ue host"
	lanClient       = "lan client behind NAT"
	routedLANClient = "IPv6 lan client, routed"
)

// adoptionBed is the modem link of an adoption test, with a bulk server
// at addr behind it and the namespace the client downloads from.
type adoptionBed struct {
	*modemLink
	client *nstest.NS
	server *bulkServer
	addr   string
}

func newAdoptionBed(t *testing.T, client string) adoptionBed {
	t.Helper()
	m := newModemLink(t, adoptionOneWay)
	b := adoptionBed{modemLink: m, client: m.ue, addr: fmt.Sprintf("%s:%d", serverAddr, uePort)}
	switch client {
	case lanClient:
		b.client = m.addLAN(t)
		m.ue.Nft(t, "add table ip m2ho_nat; "+
			"add chain ip m2ho_nat post { type nat hook postrouting priority srcnat; }; "+
			"add rule ip m2ho_nat post oifname wwan0 masquerade")
	case routedLANClient:
		b.client = m.addLAN6(t)
		b.addr = net.JoinHostPort(serverAddr6, fmt.Sprint(uePort))
		m.ue.Nft(t, "add table ip6 m2ho_firewall; "+
			"add chain ip6 m2ho_firewall through { type filter hook forward priority filter; }; "+
			"add rule ip6 m2ho_firewall through ct state established,related,new accept")
	}
	b.server = startBulkServer(t, m.server, b.addr)
	return b
}

// adoptionOneWay is the one-way delay of the adoption tests' modem link.
const adoptionOneWay = 10 * time.Millisecond

// waitFullRate waits until the download runs well above the rate the
// clamp of c allows. A CUBIC sender whose hybrid slow start took the
// delay line's jitter for queueing leaves slow start early, with no loss,
// and can crawl for seconds; a clamp would show no effect on it.
func waitFullRate(t *testing.T, received func() uint64, c adoptedClamp) {
	t.Helper()
	rtt := (2 * adoptionOneWay).Seconds()
	want := 4 * float64(c.clampBytes) / rtt
	if c.unscaled {
		// a window of at most 64 KiB, and a delay line that adds some
		const unscaledWindow = 0xffff
		want = min(want, 0.7*unscaledWindow/rtt)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got := rate(received, 200*time.Millisecond); got < want; got = rate(received, 200*time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the download ran at %.2f MB/s, not %.2f, after 10 s", got/1e6, want/1e6)
	}
}

// flowLocal is the address of the client's flow on the link: the ue
// host's, behind NAT too; the client's own where it is routed.
func (c adoptedClamp) flowLocal() string {
	if c.client == routedLANClient {
		return lanAddr6
	}
	return ueAddr
}

// linkMSS is the MSS an adopted forwarded connection gets: the largest
// segment of wwan0's MTU of 1500 bytes.
func (c adoptedClamp) linkMSS() uint16 {
	if c.client == routedLANClient {
		return 1500 - 60
	}
	return 1500 - 40
}

// adoptedClamp is what expectAdoptedClamp checks: the client of the
// download, the clamp it sets, and whether the client's handshake offered
// no window scale.
type adoptedClamp struct {
	client     string
	clampBytes uint32
	unscaled   bool
}

// expectAdoptedClamp sets a clamp on a download whose handshake dp did not
// see and checks that it holds the download near clamp/RTT, through the
// handshake dp adopted: the scale, and the MSS of the socket, or for a
// LAN client, whose handshake conntrack found, the largest segment of
// wwan0's MTU.
func expectAdoptedClamp(t *testing.T, dp *Datapath, received func() uint64, c adoptedClamp) {
	t.Helper()
	free := rate(received, 500*time.Millisecond)
	require.NoError(t, dp.SetClamp(c.clampBytes, time.Now().Add(time.Minute)))
	time.Sleep(500 * time.Millisecond)
	clamped := rate(received, time.Second)

	flow := flowFrom(t, dp, c.flowLocal())
	assert.True(t, flow.WScaleKnown)
	require.Positive(t, flow.RTTSamples)
	expected := float64(c.clampBytes) / flow.SRTT.Seconds()
	t.Logf("%s: %.2f MB/s before the clamp, %.2f MB/s clamped (clamp/RTT %.2f MB/s, scale %d, MSS %d)",
		c.client, free/1e6, clamped/1e6, expected/1e6, flow.WScale, flow.MSS)
	ratio := clamped / expected
	assert.True(t, ratio > 0.5 && ratio < 1.6, "clamped rate %.0f B/s vs clamp/RTT %.0f B/s", clamped, expected)
	assert.Less(t, clamped, free/2, "the clamp slows the download")
	if c.unscaled {
		assert.Zero(t, flow.WScale, "a handshake without the window scale option agrees on scale 0")
	} else {
		assert.Positive(t, flow.WScale)
	}
	if c.client == ueHostClient {
		assert.Positive(t, flow.MSS)
	} else {
		assert.Equal(t, c.linkMSS(), flow.MSS)
	}

	counters, err := dp.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), counters[m2hoCounterIdCNT_WSCALE_ADOPTED])
	assert.Zero(t, counters[m2hoCounterIdCNT_NO_WSCALE])
	assert.Positive(t, counters[m2hoCounterIdCNT_CLAMP_APPLIED])
}

// TestE2EAdoptOpenConnections starts a CUBIC download before the programs
// are attached, from the ue host and from a LAN client. Open then finds
// the connection's handshake (through sock_diag for the host's socket,
// through conntrack for the LAN client's) and a clamp holds the download
// near clamp/RTT, as for a connection whose SYN the programs saw. A client
// whose kernel does not offer the window scale option has a window in
// bytes, at most 64 KiB, which a clamp of 16 KiB still slows: the scan
// settles its handshake at scale 0, from the socket's options or from
// conntrack's flags, instead of leaving the download unclamped.
func TestE2EAdoptOpenConnections(t *testing.T) {
	var cases []adoptedClamp
	for _, client := range []string{ueHostClient, lanClient} {
		cases = append(cases, adoptedClamp{client: client, clampBytes: 32 << 10},
			adoptedClamp{client: client, clampBytes: 16 << 10, unscaled: true})
	}
	cases = append(cases, adoptedClamp{client: routedLANClient, clampBytes: 32 << 10})
	for _, c := range cases {
		name := c.client
		if c.unscaled {
			name += ", no window scale"
		}
		t.Run(name, func(t *testing.T) {
			b := newAdoptionBed(t, c.client)
			if c.unscaled {
				require.NoError(t, b.client.SetSysctl("net.ipv4.tcp_window_scaling", "0"))
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			received, _ := download(t, ctx, b.client, b.addr)
			<-b.server.conns
			waitFullRate(t, received, c)

			dp := openIn(t, b.ue, Options{Iface: "wwan0"})
			// of a forwarded connection's two sides, the LAN client's
			// is on the LAN: only the side out of wwan0 is stored
			assert.Equal(t, 1, hintCount(t, dp), "handshakes stored")
			expectAdoptedClamp(t, dp, received, c)
		})
	}
}

// TestE2EAdoptHandshakeUnderWay starts a CUBIC download whose handshake is
// under way when the programs are attached: the link holds the server's
// SYN-ACK until Open has returned, and the client's namespace drops the
// SYN's retransmissions, so the programs never see a SYN from the client,
// however long Open takes, and the first scan finds the connection in its
// handshake. A rescan finds its handshake once it has settled, and a clamp
// holds the download near clamp/RTT.
func TestE2EAdoptHandshakeUnderWay(t *testing.T) {
	for _, client := range []string{ueHostClient, lanClient} {
		t.Run(client, func(t *testing.T) {
			b := newAdoptionBed(t, client)
			held := make(chan []byte, 1)
			b.setDownlinkHook(func(pkt []byte) [][]byte {
				seg, ok := parseIPv4TCP(pkt)
				if ok && seg.fromServer && seg.flags&(tcpFlagSYN|tcpFlagACK) == tcpFlagSYN|tcpFlagACK {
					select {
					case held <- pkt:
					default: // a SYN-ACK sent again is lost
					}
					return nil
				}
				return [][]byte{pkt}
			})
			var syns atomic.Int32
			countSYNs := func(pkt []byte) {
				if seg, ok := parseIPv4TCP(pkt); ok && !seg.fromServer && seg.flags&tcpFlagSYN != 0 {
					syns.Add(1)
				}
			}
			b.uplinkSeen.Store(&countSYNs)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type dialed struct {
				conn *net.TCPConn
				err  error
			}
			dialDone := make(chan dialed, 1)
			go func() {
				conn, err := dialCubic(ctx, b.client, b.addr)
				dialDone <- dialed{conn, err}
			}()
			var synACK []byte
			select {
			case synACK = <-held:
			case <-time.After(5 * time.Second):
				require.Fail(t, "no SYN-ACK from the server")
			}
			// the first SYN has left: its retransmissions, a second after
			// it, would show the programs the handshake
			b.client.Nft(t, "add table inet m2ho_hold; "+
				"add chain inet m2ho_hold out { type filter hook output priority 0; }; "+
				fmt.Sprintf("add rule inet m2ho_hold out tcp dport %d tcp flags & (syn | ack) == syn drop", uePort))

			opened := time.Now()
			dp := openIn(t, b.ue, Options{Iface: "wwan0"})
			openTook := time.Since(opened)
			hooksWithRescan := closeHookCount(dp)
			b.setDownlinkHook(nil)
			_, err := b.ueTun.Write(synACK)
			require.NoError(t, err)
			var d dialed
			select {
			case d = <-dialDone:
			case <-time.After(5 * time.Second):
				require.Fail(t, "the connection did not complete")
			}
			require.NoError(t, d.err)
			defer d.conn.Close()
			assert.Equal(t, int32(1), syns.Load(), "SYNs on the link")
			t.Logf("%s: Open took %v with the SYN-ACK held", client, openTook)
			received := countReceived(t, ctx, d.conn, anyCPU)
			<-b.server.conns
			stored := func() bool {
				n, err := storedHandshakeCount(dp)
				return err == nil && n > 0
			}
			require.Eventually(t, stored, 5*time.Second, 50*time.Millisecond, "the rescan stores the settled handshake")
			assert.Eventually(t, func() bool { return closeHookCount(dp) == hooksWithRescan-1 },
				time.Second, 10*time.Millisecond, "the finished rescan leaves no close hook behind")
			c := adoptedClamp{client: client, clampBytes: 32 << 10}
			waitFullRate(t, received, c)
			expectAdoptedClamp(t, dp, received, c)
		})
	}
}
