// Package datapath_test runs pkg/datapath's programs on real kernel TCP:
// bulk CUBIC downloads between network namespaces, over a raw-IP modem
// link with a user-space delay line (whose hooks reorder, drop or hold
// packets) or over veth, and checks what the datapath's API reports and
// does to them: clamped rates, measured RTTs, suppressed duplicate ACKs,
// closed flows, BIG TCP, byte counts and adopted handshakes. The tests of
// single packets (BPF_PROG_RUN) and of attaching to interfaces are in
// pkg/datapath.
package datapath_test

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/datapath"
)

// modemLink joins a server namespace and a ue namespace through a
// user-space delay line between two tun interfaces: wwan0 in ue is a raw-IP
// interface like a modem's, srv0 in server its far end. The kernel here
// has no netem, so the line itself delays every packet by oneWay.
type modemLink struct {
	server, ue *nstest.NS
	oneWay     time.Duration

	srvTun, ueTun *os.File
	// downlinkHook, when set, sees each downlink packet just before it is
	// written to wwan0 and returns the packets to write instead.
	hookMu       sync.Mutex
	downlinkHook func(pkt []byte) [][]byte
	// uplinkSeen, when set, sees every uplink packet that left wwan0.
	uplinkSeen atomic.Pointer[func([]byte)]
	wg         sync.WaitGroup
}

// Addresses of the lan behind ue; the server and ue ends are nstest's.
// Every test has its own namespaces.
const (
	lanNet      = "10.78.0.0/24"
	lanAddr     = "10.78.0.2"
	lanGateway  = "10.78.0.1"
	lanNet6     = "fd78::/64"
	lanAddr6    = "fd78::2"
	lanGateway6 = "fd78::1"
)

func newModemLink(t *testing.T, oneWay time.Duration) *modemLink {
	t.Helper()
	nstest.RequireRoot(t)
	m := &modemLink{server: nstest.NewNS(t, "srv"), ue: nstest.NewNS(t, "ue"), oneWay: oneWay}
	var err error
	m.srvTun, err = m.server.OpenTun("srv0")
	require.NoError(t, err)
	m.ueTun, err = m.ue.OpenTun("wwan0")
	require.NoError(t, err)
	require.NoError(t, m.server.AddAddr("srv0", nstest.ServerAddr+"/24"))
	require.NoError(t, m.ue.AddAddr("wwan0", nstest.UEAddr+"/24"))
	require.NoError(t, m.server.AddDeviceRoute(lanNet, "srv0"))
	m.wg.Add(2)
	go m.pump(m.srvTun, m.ueTun, true)
	go m.pump(m.ueTun, m.srvTun, false)
	t.Cleanup(func() {
		m.srvTun.Close()
		m.ueTun.Close()
		m.wg.Wait()
	})
	return m
}

type delayed struct {
	due time.Time
	pkt []byte
}

// pump moves packets from one tun to the other after the one-way delay,
// in order.
func (m *modemLink) pump(from, to *os.File, downlink bool) {
	defer m.wg.Done()
	queue := make(chan delayed, 65536)
	go func() {
		for d := range queue {
			time.Sleep(time.Until(d.due))
			out := [][]byte{d.pkt}
			if downlink {
				m.hookMu.Lock()
				if m.downlinkHook != nil {
					out = m.downlinkHook(d.pkt)
				}
				m.hookMu.Unlock()
			}
			for _, p := range out {
				if _, err := to.Write(p); err != nil && errors.Is(err, os.ErrClosed) {
					return
				}
			}
		}
	}()
	defer close(queue)
	buf := make([]byte, 65536)
	for {
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		pkt := append([]byte(nil), buf[:n]...)
		if !downlink {
			if seen := m.uplinkSeen.Load(); seen != nil {
				(*seen)(pkt)
			}
		}
		queue <- delayed{time.Now().Add(m.oneWay), pkt}
	}
}

func (m *modemLink) setDownlinkHook(hook func([]byte) [][]byte) {
	m.hookMu.Lock()
	defer m.hookMu.Unlock()
	m.downlinkHook = hook
}

// addLAN puts a lan namespace behind ue, which forwards its traffic to
// wwan0 like a CPE router.
func (m *modemLink) addLAN(t *testing.T) *nstest.NS {
	t.Helper()
	return m.pairLAN(t, lanAddr+"/24", lanGateway+"/24", "default", lanGateway)
}

// addLAN6 is addLAN for IPv6, routed: the link and the lan carry IPv6
// addresses, and the server reaches the lan's prefix through the link.
func (m *modemLink) addLAN6(t *testing.T) *nstest.NS {
	t.Helper()
	lan := m.pairLAN(t, lanAddr6+"/64", lanGateway6+"/64", "default6", lanGateway6)
	require.NoError(t, m.server.AddAddr("srv0", nstest.ServerAddr6+"/64"))
	require.NoError(t, m.ue.AddAddr("wwan0", nstest.UEAddr6+"/64"))
	require.NoError(t, m.server.AddDeviceRoute(lanNet6, "srv0"))
	return lan
}

// pairLAN links a new lan namespace to ue, whose lan0 is its gateway.
func (m *modemLink) pairLAN(t *testing.T, clientCIDR, gatewayCIDR, defaultRoute, gateway string) *nstest.NS {
	lan := nstest.NewNS(t, "lan")
	nstest.Pair(t, lan, m.ue, nstest.Link{AIfname: "eth0", BIfname: "lan0",
		AAddrs: []string{clientCIDR}, BAddrs: []string{gatewayCIDR}})
	require.NoError(t, m.ue.EnableForwarding())
	require.NoError(t, lan.AddRoute(defaultRoute, gateway))
	return lan
}

// openIn, flowFrom and trackedFlow repeat pkg/datapath's: its tests cannot import a package that imports it.

// openIn opens a datapath with opts in namespace ns, closed at the end of
// the test. Without a logger in opts, attach messages stay out of the
// test's output.
func openIn(t *testing.T, ns *nstest.NS, opts datapath.Options) *datapath.Datapath {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	var dp *datapath.Datapath
	require.NoError(t, ns.Do(func() error {
		var err error
		dp, err = datapath.Open(opts)
		return err
	}))
	t.Cleanup(func() { assert.NoError(t, dp.Close()) })
	return dp
}

// flowFrom is the flow of the download to nstest.ServerPort from local.
func flowFrom(t *testing.T, dp *datapath.Datapath, local string) datapath.Flow {
	t.Helper()
	f, ok, err := trackedFlow(dp, func(f datapath.Flow) bool {
		return f.Local.Addr().String() == local && f.Remote.Port() == nstest.ServerPort
	})
	require.NoError(t, err)
	require.True(t, ok, "no flow from %s", local)
	return f
}

// trackedFlow returns the first tracked flow that match accepts.
func trackedFlow(d *datapath.Datapath, match func(datapath.Flow) bool) (datapath.Flow, bool, error) {
	flows, err := d.Flows()
	if err != nil {
		return datapath.Flow{}, false, err
	}
	for _, f := range flows {
		if match(f) {
			return f, true, nil
		}
	}
	return datapath.Flow{}, false, nil
}

// counter is the count of c named name, as datapath.CounterName names it.
func counter(t testing.TB, c datapath.Counters, name string) uint64 {
	t.Helper()
	for n, v := range c.All() {
		if n == name {
			return v
		}
	}
	require.FailNow(t, "no datapath counter "+name)
	return 0
}

// TCP header flags.
const (
	tcpFlagSYN = 0x02
	tcpFlagACK = 0x10
)

// tcpSegment is the part of an IPv4 TCP packet the link hooks look at.
type tcpSegment struct {
	seq, ack   uint32
	payload    int
	flags      uint8
	fromServer bool
}

func parseIPv4TCP(pkt []byte) (tcpSegment, bool) {
	if len(pkt) < 40 || pkt[0]>>4 != 4 || pkt[9] != unix.IPPROTO_TCP {
		return tcpSegment{}, false
	}
	ihl := int(pkt[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(pkt[2:]))
	if total > len(pkt) || ihl+20 > total {
		return tcpSegment{}, false
	}
	tcp := pkt[ihl:total]
	doff := int(tcp[12]>>4) * 4
	if doff > len(tcp) {
		return tcpSegment{}, false
	}
	return tcpSegment{
		seq:        binary.BigEndian.Uint32(tcp[4:]),
		ack:        binary.BigEndian.Uint32(tcp[8:]),
		payload:    len(tcp) - doff,
		flags:      tcp[13],
		fromServer: binary.BigEndian.Uint16(tcp[0:]) == nstest.ServerPort,
	}, true
}
