// Package tcptest runs bulk CUBIC transfers over real kernel TCP between
// the namespaces of internal/nstest, for the datapath's end-to-end tests
// and benchmarks: a server that sends to every connection until it
// closes, a client that counts what it receives, and rates measured over
// windows. Reading and writing threads can be bound to one CPU.
package tcptest

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/nstest"
)

// AnyCPU leaves a goroutine's thread to the scheduler.
const AnyCPU = -1

// BulkWriteSize is the size of StartBulkServer's writes.
const BulkWriteSize = 64 << 10

// PinThread binds the calling goroutine's thread to cpu, where
// BPF_PROG_RUN then runs the program, or the kernel a socket call's work.
// The thread stays locked: the runtime ends it with the goroutine, so the
// pinned affinity never reaches other code. AnyCPU binds nothing.
func PinThread(cpu int) error {
	if cpu == AnyCPU {
		return nil
	}
	runtime.LockOSThread()
	var only unix.CPUSet
	only.Set(cpu)
	return unix.SchedSetaffinity(0, &only)
}

// AllowedCPUs lists the CPUs the test process may run on.
func AllowedCPUs(tb testing.TB) []int {
	tb.Helper()
	var allowed unix.CPUSet
	require.NoError(tb, unix.SchedGetaffinity(0, &allowed))
	var cpus []int
	for cpu := 0; len(cpus) < allowed.Count(); cpu++ {
		if allowed.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus
}

// SetCongestion picks the congestion control of one socket (the machine
// default may differ).
func SetCongestion(c syscall.RawConn, algo string) error {
	var sockErr error
	err := c.Control(func(fd uintptr) {
		sockErr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, algo)
	})
	return errors.Join(err, sockErr)
}

// TCPInfo reads the kernel's TCP_INFO of conn.
func TCPInfo(conn *net.TCPConn) (*unix.TCPInfo, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var info *unix.TCPInfo
	var sockErr error
	err = raw.Control(func(fd uintptr) { info, sockErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	return info, errors.Join(err, sockErr)
}

// BulkServer accepts connections in a namespace and sends to each until
// it closes. Every accepted connection is reported on Conns.
type BulkServer struct {
	ln    net.Listener
	Conns chan *net.TCPConn
}

// StartBulkServer listens on addr in ns, with CUBIC and writes of
// BulkWriteSize from any CPU, until the test ends.
func StartBulkServer(tb testing.TB, ns *nstest.NS, addr string) *BulkServer {
	tb.Helper()
	return StartBulkServerWrites(tb, ns, addr, BulkWriteSize, AnyCPU)
}

// StartBulkServerWrites is StartBulkServer with writes of writeSize bytes,
// sent from a thread bound to cpu unless cpu is AnyCPU.
func StartBulkServerWrites(tb testing.TB, ns *nstest.NS, addr string, writeSize, cpu int) *BulkServer {
	tb.Helper()
	s := &BulkServer{Conns: make(chan *net.TCPConn, 16)}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error { return SetCongestion(c, "cubic") }}
	require.NoError(tb, ns.Do(func() error {
		var err error
		s.ln, err = lc.Listen(context.Background(), "tcp", addr)
		return err
	}))
	tb.Cleanup(func() { s.ln.Close() })
	go func() {
		chunk := make([]byte, writeSize)
		for {
			conn, err := s.ln.Accept()
			if err != nil {
				return
			}
			tcp := conn.(*net.TCPConn)
			s.Conns <- tcp
			go func() {
				defer tcp.Close()
				if !assert.NoError(tb, PinThread(cpu)) {
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

// Download connects from ns to addr and counts received bytes until ctx
// ends. The returned function reports bytes received so far.
func Download(tb testing.TB, ctx context.Context, ns *nstest.NS, addr string) (received func() uint64, conn *net.TCPConn) {
	tb.Helper()
	return DownloadOn(tb, ctx, ns, addr, AnyCPU)
}

// DownloadOn is Download with the reading thread bound to cpu unless cpu
// is AnyCPU.
func DownloadOn(tb testing.TB, ctx context.Context, ns *nstest.NS, addr string, cpu int) (received func() uint64, conn *net.TCPConn) {
	tb.Helper()
	conn, err := DialCubic(ctx, ns, addr)
	require.NoError(tb, err)
	return CountReceived(tb, ctx, conn, cpu), conn
}

// DialCubic connects from ns to addr with CUBIC.
func DialCubic(ctx context.Context, ns *nstest.NS, addr string) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error { return SetCongestion(c, "cubic") }}
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

// CountReceived reads conn until ctx ends, then closes it, from a thread
// bound to cpu unless cpu is AnyCPU. The returned function reports bytes
// received so far.
func CountReceived(tb testing.TB, ctx context.Context, conn *net.TCPConn, cpu int) func() uint64 {
	var total atomic.Uint64
	go func() {
		defer conn.Close()
		if !assert.NoError(tb, PinThread(cpu)) {
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

// Rate measures bytes per second delivered over window.
func Rate(received func() uint64, window time.Duration) float64 {
	bytes, elapsed := ReceivedIn(window, received)
	return float64(bytes[0]) / elapsed.Seconds()
}

// ReceivedIn returns, for each of the counters, the bytes received over
// one window of about window, and the window's measured length.
func ReceivedIn(window time.Duration, counters ...func() uint64) (bytes []uint64, elapsed time.Duration) {
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
