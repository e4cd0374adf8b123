package datapath

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/nstest"
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

const (
	serverAddr  = "10.77.0.1"
	ueAddr      = "10.77.0.2"
	serverAddr6 = "fd77::1"
	ueAddr6     = "fd77::2"
	lanNet      = "10.78.0.0/24"
	lanAddr     = "10.78.0.2"
	lanGateway  = "10.78.0.1"
	lanNet6     = "fd78::/64"
	lanAddr6    = "fd78::2"
	lanGateway6 = "fd78::1"
	uePort      = 5201
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
	require.NoError(t, m.server.AddAddr("srv0", serverAddr+"/24"))
	require.NoError(t, m.ue.AddAddr("wwan0", ueAddr+"/24"))
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
	require.NoError(t, m.server.AddAddr("srv0", serverAddr6+"/64"))
	require.NoError(t, m.ue.AddAddr("wwan0", ueAddr6+"/64"))
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

// setCongestion picks the congestion control of one socket (the machine
// default may differ).
func setCongestion(c syscall.RawConn, algo string) error {
	var sockErr error
	err := c.Control(func(fd uintptr) {
		sockErr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, algo)
	})
	return errors.Join(err, sockErr)
}

func tcpInfo(conn *net.TCPConn) (*unix.TCPInfo, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var info *unix.TCPInfo
	var sockErr error
	err = raw.Control(func(fd uintptr) { info, sockErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	return info, errors.Join(err, sockErr)
}

// bulkServer accepts connections in ns and sends to each until it closes.
// Every accepted connection is reported on conns.
type bulkServer struct {
	ln    net.Listener
	conns chan *net.TCPConn
}

func startBulkServer(t testing.TB, ns *nstest.NS, addr string) *bulkServer {
	t.Helper()
	return startBulkServerWrites(t, ns, addr, bulkWriteSize, anyCPU)
}

// bulkWriteSize is the size of startBulkServer's writes.
const bulkWriteSize = 64 << 10

// anyCPU leaves a goroutine's thread to the scheduler.
const anyCPU = -1

// startBulkServerWrites is startBulkServer with writes of writeSize bytes,
// sent from a thread bound to cpu unless cpu is anyCPU.
func startBulkServerWrites(t testing.TB, ns *nstest.NS, addr string, writeSize, cpu int) *bulkServer {
	t.Helper()
	s := &bulkServer{conns: make(chan *net.TCPConn, 16)}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error { return setCongestion(c, "cubic") }}
	require.NoError(t, ns.Do(func() error {
		var err error
		s.ln, err = lc.Listen(context.Background(), "tcp", addr)
		return err
	}))
	t.Cleanup(func() { s.ln.Close() })
	go func() {
		chunk := make([]byte, writeSize)
		for {
			conn, err := s.ln.Accept()
			if err != nil {
				return
			}
			tcp := conn.(*net.TCPConn)
			s.conns <- tcp
			go func() {
				defer tcp.Close()
				if !assert.NoError(t, pinUnlessAny(cpu)) {
					return
				}
				for {
					if _, err := tcp.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

// download connects from ns to addr and counts received bytes until ctx
// ends. The returned function reports bytes received so far.
func download(t testing.TB, ctx context.Context, ns *nstest.NS, addr string) (received func() uint64, conn *net.TCPConn) {
	t.Helper()
	return downloadOn(t, ctx, ns, addr, anyCPU)
}

// downloadOn is download with the reading thread bound to cpu unless cpu
// is anyCPU.
func downloadOn(t testing.TB, ctx context.Context, ns *nstest.NS, addr string, cpu int) (received func() uint64, conn *net.TCPConn) {
	t.Helper()
	conn, err := dialCubic(ctx, ns, addr)
	require.NoError(t, err)
	return countReceived(t, ctx, conn, cpu), conn
}

// dialCubic connects from ns to addr with CUBIC.
func dialCubic(ctx context.Context, ns *nstest.NS, addr string) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error { return setCongestion(c, "cubic") }}
	var conn *net.TCPConn
	err := ns.Do(func() error {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		conn = c.(*net.TCPConn)
		return nil
	})
	return conn, err
}

// countReceived reads conn until ctx ends, then closes it, from a thread
// bound to cpu unless cpu is anyCPU. The returned function reports bytes
// received so far.
func countReceived(tb testing.TB, ctx context.Context, conn *net.TCPConn, cpu int) func() uint64 {
	var total atomic.Uint64
	go func() {
		defer conn.Close()
		if !assert.NoError(tb, pinUnlessAny(cpu)) {
			return
		}
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		defer stop()
		buf := make([]byte, 256<<10)
		for {
			n, err := conn.Read(buf)
			total.Add(uint64(n))
			if err != nil {
				// EOF, closed by ctx or reset by the server's cleanup
				return
			}
		}
	}()
	return total.Load
}

// rate measures bytes per second delivered over window.
func rate(received func() uint64, window time.Duration) float64 {
	bytes, elapsed := receivedIn(window, received)
	return float64(bytes[0]) / elapsed.Seconds()
}

// receivedIn returns, for each of the counters, the bytes received over
// one window of about window, and the window's measured length.
func receivedIn(window time.Duration, counters ...func() uint64) (bytes []uint64, elapsed time.Duration) {
	start := make([]uint64, len(counters))
	for i, received := range counters {
		start[i] = received()
	}
	begin := time.Now()
	time.Sleep(window)
	bytes = make([]uint64, len(counters))
	for i, received := range counters {
		bytes[i] = received() - start[i]
	}
	return bytes, time.Since(begin)
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
		fromServer: binary.BigEndian.Uint16(tcp[0:]) == uePort,
	}, true
}
