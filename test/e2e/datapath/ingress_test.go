package datapath_test

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/datapath"
)

// ethernetHeaderLen is the length of the Ethernet header veth adds to
// every IP packet.
const ethernetHeaderLen = 14

// TestIngressBytesMatchInterfaceStatistics downloads a known amount
// over a veth whose programs were loaded from a thread that only joined
// the namespace (where sysfs would show the host's interfaces), and checks
// the ingress byte counter against the kernel's own interface statistics:
// they differ exactly by the Ethernet header of each IP packet.
func TestIngressBytesMatchInterfaceStatistics(t *testing.T) {
	const size = 4 << 20
	server, ue := nstest.ServerUEPair(t)
	dp := openIn(t, ue, datapath.Options{Iface: "veth0"})

	// snapshot reads the interface's received bytes and the counters
	// together: stray packets (neighbour discovery) may land between the
	// reads, so it retries until the statistics hold still around them.
	snapshot := func() (uint64, datapath.Counters) {
		rxBytes := func() uint64 {
			var stats uint64
			require.NoError(t, ue.Do(func() error {
				l, err := netlink.LinkByName("veth0")
				if err == nil {
					stats = l.Attrs().Statistics.RxBytes
				}
				return err
			}))
			return stats
		}
		for range 100 {
			before := rxBytes()
			c, err := dp.Counters()
			require.NoError(t, err)
			if rxBytes() == before {
				return before, c
			}
		}
		require.FailNow(t, "the interface never stopped receiving")
		return 0, datapath.Counters{}
	}
	rxStart, start := snapshot()

	var ln net.Listener
	require.NoError(t, server.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(nstest.ServerAddr, fmt.Sprint(nstest.ServerPort)))
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	sent := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			sent <- err
			return
		}
		defer conn.Close()
		_, err = conn.Write(make([]byte, size))
		sent <- err
	}()
	var conn net.Conn
	require.NoError(t, ue.Do(func() error {
		var err error
		conn, err = net.DialTimeout("tcp", net.JoinHostPort(nstest.ServerAddr, fmt.Sprint(nstest.ServerPort)), 5*time.Second)
		return err
	}))
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	received, err := io.Copy(io.Discard, conn)
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	require.NoError(t, <-sent)
	require.Equal(t, int64(size), received)

	rxEnd, end := snapshot()
	rx := rxEnd - rxStart
	ipBytes := end[datapath.IngressBytes] - start[datapath.IngressBytes]
	assert.GreaterOrEqual(t, ipBytes, uint64(size))
	// Non-IP packets (ARP) count whole; the counters cannot tell which of
	// them were received rather than sent, so they bound the IP packets.
	mostIP := counter(t, end, "ingress_packets") - counter(t, start, "ingress_packets")
	nonIP := counter(t, end, "not_ip") + counter(t, end, "malformed") - counter(t, start, "not_ip") - counter(t, start, "malformed")
	leastIP := mostIP - min(mostIP, nonIP)
	assert.GreaterOrEqual(t, rx, ipBytes+leastIP*ethernetHeaderLen, "interface rx_bytes")
	assert.LessOrEqual(t, rx, ipBytes+mostIP*ethernetHeaderLen, "interface rx_bytes")
}
