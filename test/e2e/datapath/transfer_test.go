package datapath_test

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
	"github.com/m2ho/m2ho/internal/tcptest"
	"github.com/m2ho/m2ho/pkg/datapath"
)

// TestClampRTTAndExpiry runs a CUBIC bulk download over the raw-IP
// modem link (20 ms RTT), from the ue host itself and from a LAN client
// forwarded by it: the clamp holds the rate near clamp/RTT, the RTT the
// programs measure matches the sender kernel's within 10%, and when the
// clamp's deadline passes with nobody to clear it the rate recovers.
func TestClampRTTAndExpiry(t *testing.T) {
	const (
		oneWay     = 10 * time.Millisecond
		clampBytes = 32 << 10
	)
	for _, client := range []string{"ue host", "lan client"} {
		t.Run(client, func(t *testing.T) {
			m := newModemLink(t, oneWay)
			clientNS, clientAddr := m.ue, nstest.UEAddr
			if client == "lan client" {
				clientNS, clientAddr = m.addLAN(t), lanAddr
			}
			server := tcptest.StartBulkServer(t, m.server, fmt.Sprintf("%s:%d", nstest.ServerAddr, nstest.ServerPort))
			dp := openIn(t, m.ue, datapath.Options{Iface: "wwan0"})
			assert.Equal(t, datapath.AttachTCX, dp.AttachMode())

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			received, _ := tcptest.Download(t, ctx, clientNS, fmt.Sprintf("%s:%d", nstest.ServerAddr, nstest.ServerPort))
			serverConn := <-server.Conns
			time.Sleep(500 * time.Millisecond)

			deadline := time.Now().Add(2500 * time.Millisecond)
			require.NoError(t, dp.SetClamp(clampBytes, deadline))
			time.Sleep(500 * time.Millisecond)
			clamped := tcptest.Rate(received, time.Second)

			// Both ends time the same round trips (the clamp keeps the
			// sender window-limited, so an ACK releases data at once),
			// but each smooths its own samples: the sender one per ACK,
			// the datapath one per echoed TSval. A delay line that
			// jitters under load moves the two averages apart for a
			// moment, so the smoothed RTTs are compared as the mean of
			// readings taken side by side over half a second.
			const readings = 5
			var flow datapath.Flow
			var srtt, kernelSRTT, kernelMinRTT time.Duration
			for i := range readings {
				if i > 0 {
					time.Sleep(100 * time.Millisecond)
				}
				flow = flowFrom(t, dp, clientAddr)
				info, err := tcptest.TCPInfo(serverConn)
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
			recovered := tcptest.Rate(received, time.Second)
			t.Logf("%s: after expiry %.2f MB/s", client, recovered/1e6)
			assert.Greater(t, recovered, 2*clamped, "deadline expiry restores throughput")

			// every sample counted is in the histogram: read both once
			// the download has stopped taking samples
			cancel()
			time.Sleep(200 * time.Millisecond)
			c, err := dp.Counters()
			require.NoError(t, err)
			assert.Equal(t, uint64(1), counter(t, c, "clamp_expired"))
			assert.Positive(t, counter(t, c, "clamp_applied"))
			assert.Zero(t, counter(t, c, "malformed"))
			hist, err := dp.RTTHistogram()
			require.NoError(t, err)
			var histSamples uint64
			for _, n := range hist {
				histSamples += n
			}
			assert.Equal(t, counter(t, c, "rtt_samples"), histSamples)
		})
	}
}

// TestDupACKSuppression reorders the downlink like a handover's context
// release: a segment is held back while later ones arrive. Duplicate ACKs
// sent before the epoch reach the wire; those after it are dropped, exactly
// as many as the receiver queued out of order, and the flow releases
// itself when the held segment arrives and its ACK passes the snapshot.
// The receiver is the ue host itself, or a LAN client whose ACKs the ue
// host forwards.
func TestDupACKSuppression(t *testing.T) {
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
	clientNS, clientAddr := m.ue, nstest.UEAddr
	if lan {
		clientNS, clientAddr = m.addLAN(t), lanAddr
	}
	dp, received := clampedDownload(t, m, clientNS)
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
	assert.Equal(t, uint64(after), counter(t, c, "dupack_suppressed"), "dropped exactly the duplicates after the epoch")
	assert.GreaterOrEqual(t, dupsBefore.Load(), uint64(before), "duplicates before the epoch reach the wire")
	assert.Zero(t, dupsDuring.Load(), "no duplicate reaches the wire while suppressing")
	assert.Equal(t, uint64(1), counter(t, c, "flow_released"))
	pending, err := dp.SuppressionPending()
	require.NoError(t, err)
	assert.Zero(t, pending, "released by its own ACK")
	bytesBefore := received()
	time.Sleep(200 * time.Millisecond)
	assert.Greater(t, received(), bytesBefore, "transfer goes on")
}

// clampedDownload starts a bulk download from the server to client over
// m, with the datapath open on the ue host, and returns once the server
// accepted the connection; the download ends with the test. Every
// out-of-order segment draws its own duplicate ACK (no SACK compression
// at the client), and a small receive window keeps the transfer steady
// and the test quick.
func clampedDownload(t *testing.T, m *modemLink, client *nstest.NS) (*datapath.Datapath, func() uint64) {
	t.Helper()
	require.NoError(t, client.SetSysctl("net.ipv4.tcp_comp_sack_nr", "0"))
	addr := fmt.Sprintf("%s:%d", nstest.ServerAddr, nstest.ServerPort)
	server := tcptest.StartBulkServer(t, m.server, addr)
	dp := openIn(t, m.ue, datapath.Options{Iface: "wwan0"})
	require.NoError(t, dp.SetClamp(128<<10, time.Now().Add(time.Minute)))
	received, _ := tcptest.Download(t, t.Context(), client, addr)
	<-server.Conns
	return dp, received
}

// TestRealLossDuringSuppression drops a downlink segment for good while
// suppression is on. The receiver's duplicate ACKs are held for at most
// two smoothed RTTs after its acknowledgement last moved; then they, or
// the duplicate that the sender's tail loss probe draws, go out, and the
// real kernel sender repairs the loss without its retransmission timer.
func TestRealLossDuringSuppression(t *testing.T) {
	m := newModemLink(t, 20*time.Millisecond)
	dp, received := clampedDownload(t, m, m.ue)
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
	flow := flowFrom(t, dp, nstest.UEAddr)
	t.Logf("lost %d, sent again after %v, srtt %v, counters %+v", lost.Load(),
		time.Duration(repairedAt.Load()-lostAt.Load()), time.Duration(flow.SRTT), c)
	assert.Positive(t, counter(t, c, "dupack_suppressed"), "duplicates were held")
	assert.Positive(t, counter(t, c, "dupack_hold_expired"), "and let through after the hold")
	assert.Equal(t, timeoutsBefore, tcpExtCounter(t, m.server, "TCPTimeouts"), "repaired without a retransmission timeout")
	bytesBefore := received()
	time.Sleep(200 * time.Millisecond)
	assert.Greater(t, received(), bytesBefore, "transfer goes on")
}

// TestSACKHiddenAtTheContextRelease reorders the downlink as a context
// release does while a Preparation suppresses: segments S0 and S1 are held,
// S2 arrives, then S0, and S1 only 40 ms later. The receiver's ACK of S0
// moves its acknowledgement to the hole at S1 and carries a SACK block for
// S2, from which the sender's RACK would mark S1 lost within a quarter of
// the RTT. The datapath blanks that block and drops the duplicates: the
// real kernel sender retransmits nothing.
func TestSACKHiddenAtTheContextRelease(t *testing.T) {
	const holes = 3
	m := newModemLink(t, 30*time.Millisecond)
	dp, received := clampedDownload(t, m, m.ue)
	time.Sleep(500 * time.Millisecond)
	retransBefore := snmpCounter(t, m.server, "snmp", "Tcp:", "RetransSegs")
	require.NoError(t, dp.PrepareSuppression(time.Now().Add(10*time.Second)))

	var (
		held      [][]byte
		made      int
		nextHole  = time.Now()
		filled    = make(chan struct{}, holes)
		writeErrs = make(chan error, holes)
	)
	m.setDownlinkHook(func(pkt []byte) [][]byte {
		seg, ok := parseIPv4TCP(pkt)
		if !ok || !seg.fromServer || seg.payload == 0 || made == holes || time.Now().Before(nextHole) {
			return [][]byte{pkt}
		}
		if len(held) < 2 {
			held = append(held, pkt)
			return nil
		}
		s0, s1 := held[0], held[1]
		held = nil
		made++
		nextHole = time.Now().Add(200 * time.Millisecond)
		time.AfterFunc(40*time.Millisecond, func() {
			_, err := m.ueTun.Write(s1)
			writeErrs <- err
			filled <- struct{}{}
		})
		return [][]byte{pkt, s0}
	})
	for range holes {
		select {
		case <-filled:
			require.NoError(t, <-writeErrs)
		case <-time.After(10 * time.Second):
			t.Fatal("the downlink never carried enough segments")
		}
	}
	time.Sleep(200 * time.Millisecond)

	c, err := dp.Counters()
	require.NoError(t, err)
	t.Logf("counters %+v", c)
	assert.GreaterOrEqual(t, counter(t, c, "sack_hidden"), uint64(holes), "the ACK of S0 at each hole")
	assert.Positive(t, counter(t, c, "dupack_suppressed"))
	assert.Equal(t, retransBefore, snmpCounter(t, m.server, "snmp", "Tcp:", "RetransSegs"), "the sender retransmitted nothing")
	bytesBefore := received()
	time.Sleep(200 * time.Millisecond)
	assert.Greater(t, received(), bytesBefore, "transfer goes on")
}

// tcpExtCounter reads a TcpExt counter of ns's network stack.
func tcpExtCounter(t *testing.T, ns *nstest.NS, name string) uint64 {
	t.Helper()
	return snmpCounter(t, ns, "netstat", "TcpExt:", name)
}

// snmpCounter reads counter name of the table whose lines begin with
// prefix in /proc/net/file of ns's network stack (a line of names, then
// a line of values).
func snmpCounter(t *testing.T, ns *nstest.NS, file, prefix, name string) uint64 {
	t.Helper()
	var value uint64
	found := false
	require.NoError(t, ns.Do(func() error {
		raw, err := os.ReadFile("/proc/thread-self/net/" + file)
		if err != nil {
			return err
		}
		lines := strings.Split(string(raw), "\n")
		for i := 0; i+1 < len(lines); i++ {
			if !strings.HasPrefix(lines[i], prefix) || !strings.HasPrefix(lines[i+1], prefix) {
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
	require.True(t, found, "no %s counter %s in %s", prefix, name, file)
	return value
}

// TestFlowsClose ends real connections both ways a connection ends: the
// server closes after its data, and the client aborts with a RST. Both
// flows are closed, a third that stays open is not, and the eviction of
// closed flows removes exactly the two.
func TestFlowsClose(t *testing.T) {
	m := newModemLink(t, 2*time.Millisecond)
	addr := fmt.Sprintf("%s:%d", nstest.ServerAddr, nstest.ServerPort)
	server := tcptest.StartBulkServer(t, m.server, addr)
	dp := openIn(t, m.ue, datapath.Options{Iface: "wwan0"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	conns := make(map[string]*net.TCPConn)
	var serverConn *net.TCPConn
	for _, name := range []string{"server closes", "client resets", "stays open"} {
		_, conns[name] = tcptest.Download(t, ctx, m.ue, addr)
		sc := <-server.Conns
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
			f, ok, err := trackedFlow(dp, func(f datapath.Flow) bool { return f.Local.String() == conns[name].LocalAddr().String() })
			return err == nil && ok && f.Closed
		}
	}
	assert.Eventually(t, closed("server closes"), 5*time.Second, 10*time.Millisecond, "the host acknowledged the server's FIN")
	assert.Eventually(t, closed("client resets"), 5*time.Second, 10*time.Millisecond, "the host sent a RST")
	assert.False(t, closed("stays open")(), "an open connection")

	c, err := dp.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(2), counter(t, c, "flow_closed"))
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

// bigTCPSize is the GSO and GRO limit TestBigTCP gives both veth ends:
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

// TestBigTCP runs a CUBIC bulk download over veth with BIG TCP on both
// ends and a datapath on each: the receiver's ingress meets data packets
// larger than 64 KB, the sender's egress sends them. Both parse them as
// TCP, so the receiver's flow counts every byte the socket took in and the
// sender stamps its TSvals and matches their echoes.
func TestBigTCP(t *testing.T) {
	for _, tc := range []struct{ family, server string }{{"ipv4", nstest.ServerAddr}, {"ipv6", nstest.ServerAddr6}} {
		t.Run(tc.family, func(t *testing.T) {
			server, ue := nstest.ServerUEPair(t)
			enableBigTCP(t, server, "veth0")
			enableBigTCP(t, ue, "veth0")
			receiverDP := openIn(t, ue, datapath.Options{Iface: "veth0"})
			senderDP := openIn(t, server, datapath.Options{Iface: "veth0"})
			addr := net.JoinHostPort(tc.server, fmt.Sprint(nstest.ServerPort))
			// writes of 1 MiB let the sender fill segments up to the limit
			srv := tcptest.StartBulkServerWrites(t, server, addr, 1<<20, tcptest.AnyCPU)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, conn := tcptest.Download(t, ctx, ue, addr)
			<-srv.Conns
			time.Sleep(time.Second)

			// The hook sees a segment before the socket does: the flow's
			// count lies between the socket's count before and after, plus
			// what may be on its way from the hook to the socket.
			const inTransit = 64 * bigTCPSize
			before, err := tcptest.TCPInfo(conn)
			require.NoError(t, err)
			flow, ok, err := trackedFlow(receiverDP, func(f datapath.Flow) bool { return f.Remote.Port() == nstest.ServerPort })
			require.NoError(t, err)
			require.True(t, ok, "the receiver tracks no flow")
			after, err := tcptest.TCPInfo(conn)
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
			for name, c := range map[string]datapath.Counters{"receiver": receiverCounters, "sender": senderCounters} {
				assert.Zero(t, counter(t, c, "malformed"), "%s: packets parsed as malformed", name)
				assert.Zero(t, counter(t, c, "untracked"), "%s: segments of untracked flows", name)
			}
			assert.Positive(t, counter(t, senderCounters, "ts_stamped"), "the sender stamps its TSvals")
			assert.Positive(t, counter(t, senderCounters, "rtt_samples"), "the sender matches their echoes")
		})
	}
}
