package datapath_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/logbuf"
	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/internal/tcptest"
	"github.com/m2ho/m2ho/pkg/datapath"
)

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
	server *tcptest.BulkServer
	addr   string
}

func newAdoptionBed(t *testing.T, client string) adoptionBed {
	t.Helper()
	m := newModemLink(t, adoptionOneWay)
	b := adoptionBed{modemLink: m, client: m.ue, addr: fmt.Sprintf("%s:%d", nstest.ServerAddr, nstest.ServerPort)}
	switch client {
	case lanClient:
		b.client = m.addLAN(t)
		m.ue.Nft(t, "add table ip m2ho_nat; "+
			"add chain ip m2ho_nat post { type nat hook postrouting priority srcnat; }; "+
			"add rule ip m2ho_nat post oifname wwan0 masquerade")
	case routedLANClient:
		b.client = m.addLAN6(t)
		b.addr = net.JoinHostPort(nstest.ServerAddr6, fmt.Sprint(nstest.ServerPort))
		m.ue.Nft(t, "add table ip6 m2ho_firewall; "+
			"add chain ip6 m2ho_firewall through { type filter hook forward priority filter; }; "+
			"add rule ip6 m2ho_firewall through ct state established,related,new accept")
	}
	b.server = tcptest.StartBulkServer(t, m.server, b.addr)
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
	for got := tcptest.Rate(received, 200*time.Millisecond); got < want; got = tcptest.Rate(received, 200*time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the download ran at %.2f MB/s, not %.2f, after 10 s", got/1e6, want/1e6)
	}
}

// flowLocal is the address of the client's flow on the link: the ue
// host's, behind NAT too; the client's own where it is routed.
func (c adoptedClamp) flowLocal() string {
	if c.client == routedLANClient {
		return lanAddr6
	}
	return nstest.UEAddr
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
func expectAdoptedClamp(t *testing.T, dp *datapath.Datapath, received func() uint64, c adoptedClamp) {
	t.Helper()
	free := tcptest.Rate(received, 500*time.Millisecond)
	require.NoError(t, dp.SetClamp(c.clampBytes, time.Now().Add(time.Minute)))
	time.Sleep(500 * time.Millisecond)
	clamped := tcptest.Rate(received, time.Second)

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
	assert.Equal(t, uint64(1), counter(t, counters, "wscale_adopted"))
	assert.Zero(t, counter(t, counters, "no_wscale"))
	assert.Positive(t, counter(t, counters, "clamp_applied"))
}

// TestAdoptOpenConnections starts a CUBIC download before the programs
// are attached, from the ue host and from a LAN client. Open then finds
// the connection's handshake (through sock_diag for the host's socket,
// through conntrack for the LAN client's) and a clamp holds the download
// near clamp/RTT, as for a connection whose SYN the programs saw. A client
// whose kernel does not offer the window scale option has a window in
// bytes, at most 64 KiB, which a clamp of 16 KiB still slows: the scan
// settles its handshake at scale 0, from the socket's options or from
// conntrack's flags, instead of leaving the download unclamped.
func TestAdoptOpenConnections(t *testing.T) {
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
			received, _ := tcptest.Download(t, ctx, b.client, b.addr)
			<-b.server.Conns
			waitFullRate(t, received, c)

			var logs logbuf.Buffer
			dp := openIn(t, b.ue, datapath.Options{Iface: "wwan0", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			// of a forwarded connection's two sides, the LAN client's
			// is on the LAN: only the side out of wwan0 is stored
			assert.Regexp(t, `msg="adopted the handshakes of open connections" stored=1 `, logs.String(), "handshakes stored")
			expectAdoptedClamp(t, dp, received, c)
		})
	}
}

// TestAdoptHandshakeUnderWay starts a CUBIC download whose handshake is
// under way when the programs are attached: the link holds the server's
// SYN-ACK until Open has returned, and the client's namespace drops the
// SYN's retransmissions, so the programs never see a SYN from the client,
// however long Open takes, and the first scan finds the connection in its
// handshake. A rescan finds its handshake once it has settled, and a clamp
// holds the download near clamp/RTT.
func TestAdoptHandshakeUnderWay(t *testing.T) {
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
				conn, err := tcptest.DialCubic(ctx, b.client, b.addr)
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
				fmt.Sprintf("add rule inet m2ho_hold out tcp dport %d tcp flags & (syn | ack) == syn drop", nstest.ServerPort))

			var logs logbuf.Buffer
			opened := time.Now()
			dp := openIn(t, b.ue, datapath.Options{Iface: "wwan0", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			openTook := time.Since(opened)
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
			received := tcptest.CountReceived(t, ctx, d.conn, tcptest.AnyCPU)
			<-b.server.Conns
			// the rescan stores the settled handshake, and with none left
			// under way it is finished
			rescanStored := regexp.MustCompile(`msg="adopted the handshakes that were under way at attach" round=\d+ stored=1 still_under_way=0 `)
			require.Eventually(t, func() bool { return rescanStored.MatchString(logs.String()) }, 5*time.Second, 50*time.Millisecond,
				"the rescan stores the settled handshake and finishes")
			c := adoptedClamp{client: client, clampBytes: 32 << 10}
			waitFullRate(t, received, c)
			expectAdoptedClamp(t, dp, received, c)
		})
	}
}
