package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/logbuf"
	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/cellstore"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
)

// Addresses of the testbed. Every test has its own namespaces, so fixed
// addresses and ports never collide between tests.
const (
	modemIface  = "wwan0"
	serverIface = "srv0"
	serverIP    = "10.77.0.1"
	ueIP        = "10.77.0.2"
	diagAddr    = "127.0.0.1:5599"
	httpAddr    = "127.0.0.1:9569"
	serverAddr  = "10.77.0.1:5001"
	// receiveBuffer is the receiver's socket buffer: a fixed, large
	// advertised window (about half of it) that any clamp visibly lowers.
	receiveBuffer = 8 << 20
)

// Cells of the scenarios.
var (
	sub6A   = diag.Cell{RAT: diag.RATNR, Band: diag.BandSub6, PCI: 1, ARFCN: 632628}
	sub6B   = diag.Cell{RAT: diag.RATNR, Band: diag.BandSub6, PCI: 2, ARFCN: 632628}
	mmWaveC = diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 10, ARFCN: 2079167}
)

// bed is a server namespace and a ue namespace joined by a veth pair; the
// ue end is the modem interface.
type bed struct {
	server, ue *nstest.NS
	// pinDir is the daemons' --pin-dir, shared by the daemons of one bed
	// and removed with whatever a killed daemon left in it; empty without
	// a BPF filesystem.
	pinDir string
}

func newBed(t testing.TB) *bed {
	t.Helper()
	nstest.RequireRoot(t)
	require.NotEmpty(t, m2hodBin, "TestMain built no binary")
	b := &bed{server: nstest.NewNS(t, "e2e-srv"), ue: nstest.NewNS(t, "e2e-ue")}
	b.linkModem(t)
	pinDir, err := nstest.MountBPFFS(t)
	if err != nil {
		t.Logf("daemons run unpinned: %v", err)
	}
	b.pinDir = pinDir
	return b
}

// linkModem joins server and ue by the link that stands for the modem's.
func (b *bed) linkModem(t testing.TB) {
	t.Helper()
	nstest.Pair(t, b.server, b.ue, nstest.Link{AIfname: serverIface, BIfname: modemIface,
		AAddrs: []string{serverIP + "/24"}, BAddrs: []string{ueIP + "/24"}})
	// MTU-sized segments on the wire, as on a modem link.
	require.NoError(t, b.server.SetOffloads(serverIface, false))
	require.NoError(t, b.ue.SetOffloads(modemIface, false))
}

// removeModem deletes the modem interface, as a modem that resets or
// drops off its bus takes its interface with it.
func (b *bed) removeModem(t testing.TB) {
	t.Helper()
	link, err := b.ue.Netlink().LinkByName(modemIface)
	require.NoError(t, err)
	require.NoError(t, b.ue.Netlink().LinkDel(link))
}

// resetModem replaces the modem interface by a new one of the same name.
func (b *bed) resetModem(t testing.TB) {
	t.Helper()
	b.removeModem(t)
	b.linkModem(t)
}

// seedCells writes cell records into a state directory, as a previous run
// of m2hod would have left them.
func seedCells(t testing.TB, dir string, cells ...estimator.CellRecord) {
	t.Helper()
	store, err := cellstore.Open(dir, cellstore.Options{})
	require.NoError(t, err)
	for _, c := range cells {
		require.NoError(t, store.SaveCell(c))
	}
	require.NoError(t, store.Close())
}

// daemonProc is m2hod running in the ue namespace.
type daemonProc struct {
	t   testing.TB
	cmd *exec.Cmd // nil when a service manager runs the daemon
	log fmt.Stringer
	// http and diagConn reach the daemon from inside the ue namespace.
	http     *http.Client
	diagConn net.Conn
	// diagSocket, when set, is the unix socket events go to, reached
	// afresh for each, as a restarted daemon binds it again; UDP to
	// diagAddr otherwise.
	diagSocket string
	exited     chan struct{} // closed when cmd has exited; nil without cmd
	exitErr    error
	stateDir   string
}

// startDaemon runs m2hod on the modem interface with extra flags, waits
// until /healthz answers, and stops it with SIGTERM at the end of the test,
// requiring a clean exit.
func (b *bed) startDaemon(t testing.TB, stateDir string, extra ...string) *daemonProc {
	t.Helper()
	args := append([]string{"--iface", modemIface, "--diag", "udp://" + diagAddr, "--listen", httpAddr,
		"--state-dir", stateDir, "--pin-dir", b.pinDir, "--log-level", "debug"}, extra...)
	log := &logbuf.Buffer{}
	d := &daemonProc{t: t, log: log, exited: make(chan struct{}), stateDir: stateDir}
	d.cmd = b.ue.Command(context.Background(), m2hodBin, args...)
	d.cmd.Stdout, d.cmd.Stderr = log, log
	require.NoError(t, d.cmd.Start())
	go func() {
		d.exitErr = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		if d.running() {
			require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
			select {
			case <-d.exited:
				if d.exitErr != nil {
					t.Errorf("m2hod exited with %v after SIGTERM", d.exitErr)
				}
			case <-time.After(10 * time.Second):
				_ = d.cmd.Process.Kill()
				<-d.exited
				t.Errorf("m2hod did not stop within 10 s of SIGTERM")
			}
		}
		if t.Failed() {
			t.Logf("m2hod log:\n%s", d.log.String())
		}
	})

	d.connect(b.ue)
	return d
}

// connect opens the HTTP client and the diag socket from inside ns and
// waits until /healthz answers.
func (d *daemonProc) connect(ns *nstest.NS) {
	t := d.t
	t.Helper()
	d.http = &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var conn net.Conn
				err := ns.Do(func() error {
					var err error
					conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
					return err
				})
				return conn, err
			},
		},
	}
	require.NoError(t, ns.Do(func() error {
		var err error
		d.diagConn, err = net.Dial("udp", diagAddr)
		return err
	}))
	t.Cleanup(func() { d.diagConn.Close() })
	d.waitHealthy(15 * time.Second)
}

// waitHealthy waits until /healthz answers, failing if the daemon exits
// first.
func (d *daemonProc) waitHealthy(timeout time.Duration) {
	t := d.t
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := d.http.Get("http://" + httpAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-d.exited:
			t.Fatalf("m2hod exited while starting (%v):\n%s", d.exitErr, d.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("m2hod not healthy after %v:\n%s", timeout, d.log.String())
		}
	}
}

func (d *daemonProc) running() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// waitLog waits until the daemon's log contains text.
func (d *daemonProc) waitLog(timeout time.Duration, text string) {
	d.t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(d.log.String(), text) {
		if time.Now().After(deadline) {
			d.t.Fatalf("no %q in the log within %v", text, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// send delivers one diag event (a JSON object) over UDP.
func (d *daemonProc) send(event string) {
	d.t.Helper()
	d.sendRaw([]byte(event))
}

// sendRaw delivers arbitrary bytes on the diag socket.
func (d *daemonProc) sendRaw(payload []byte) {
	d.t.Helper()
	conn := d.diagConn
	if d.diagSocket != "" {
		var err error
		conn, err = net.Dial("unixgram", d.diagSocket)
		require.NoError(d.t, err)
		defer conn.Close()
	}
	_, err := conn.Write(payload)
	require.NoError(d.t, err)
}

// status is the part of /status the tests read.
type status struct {
	State      string    `json:"state"`
	Serving    diag.Cell `json:"serving_cell"`
	Mode       string    `json:"mode"`
	Policy     string    `json:"policy"`
	AttachMode string    `json:"attach_mode"`
	InForce    struct {
		ClampBytes  uint32 `json:"clamp_bytes"`
		ClampSource string `json:"clamp_source"`
		Freeze      bool   `json:"freeze"`
		Suppressing bool   `json:"suppressing"`
		Epoch       uint32 `json:"epoch"`
	} `json:"policy_in_force"`
	Cells []struct {
		Cell        diag.Cell `json:"cell"`
		BufferBytes uint64    `json:"buffer_bytes"`
	} `json:"cells"`
	Datapath struct {
		Counters map[string]uint64 `json:"counters"`
		Flows    int               `json:"flows"`
		Error    string            `json:"error"`
	} `json:"datapath"`
	Diag struct {
		Events map[string]uint64 `json:"events"`
		Errors map[string]uint64 `json:"errors"`
	} `json:"diag"`
	Machine struct {
		BandwidthHold bool `json:"bandwidth_hold"`
		Counters      struct {
			Predictions map[string]uint64 `json:"predictions"`
			Handovers   map[string]uint64 `json:"handovers"`
		} `json:"counters"`
	} `json:"machine"`
}

func (d *daemonProc) status() status {
	d.t.Helper()
	resp, err := d.http.Get("http://" + httpAddr + "/status")
	require.NoError(d.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(d.t, err)
	require.Equal(d.t, http.StatusOK, resp.StatusCode, string(body))
	var st status
	require.NoError(d.t, json.Unmarshal(body, &st), string(body))
	return st
}

// waitStatus polls /status until cond holds, failing after timeout.
func (d *daemonProc) waitStatus(timeout time.Duration, what string, cond func(status) bool) status {
	d.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := d.status()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("waiting %v for %s; last status: %+v", timeout, what, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metric returns the value of one series of /metrics, e.g.
// `m2hod_predictions_total{outcome="cancelled_a1"}`; 0 when absent.
func (d *daemonProc) metric(series string) float64 {
	d.t.Helper()
	resp, err := d.http.Get("http://" + httpAddr + "/metrics")
	require.NoError(d.t, err)
	defer resp.Body.Close()
	require.Equal(d.t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && name == series {
			v, err := strconv.ParseFloat(value, 64)
			require.NoError(d.t, err)
			return v
		}
	}
	require.NoError(d.t, sc.Err())
	return 0
}

// cellJSON renders a cell of the JSON v1 contract.
func cellJSON(c diag.Cell) string {
	return fmt.Sprintf(`{"rat":%q,"band":%q,"pci":%d,"arfcn":%d}`, c.RAT, c.Band, c.PCI, c.ARFCN)
}

func measReport(event diag.MeasEvent, serving, neighbor diag.Cell) string {
	if neighbor.IsZero() {
		return fmt.Sprintf(`{"v":1,"type":"meas_report","event":%q,"serving":%s}`, event, cellJSON(serving))
	}
	return fmt.Sprintf(`{"v":1,"type":"meas_report","event":%q,"serving":%s,"neighbor":%s}`, event, cellJSON(serving), cellJSON(neighbor))
}

func hoCommand(kind diag.HOKind, source, target diag.Cell) string {
	return fmt.Sprintf(`{"v":1,"type":"ho_command","kind":%q,"source":%s,"target":%s}`, kind, cellJSON(source), cellJSON(target))
}

func hoComplete(cell diag.Cell) string {
	return fmt.Sprintf(`{"v":1,"type":"ho_complete","cell":%s}`, cellJSON(cell))
}

// download is a bulk TCP transfer from the server namespace to the ue
// namespace: the host behind the modem receives.
type download struct {
	t        testing.TB
	sender   *net.TCPConn
	received atomic.Uint64
	paused   atomic.Bool
	done     chan struct{}
	wg       sync.WaitGroup
}

// startDownload opens the connection and starts sending; pacing (bytes per
// second, 0 for none) keeps the test from eating the machine's CPU.
func (b *bed) startDownload(t testing.TB, pacing uint64) *download {
	t.Helper()
	var ln net.Listener
	require.NoError(t, b.server.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", serverAddr)
		return err
	}))
	defer ln.Close()

	var receiver net.Conn
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var sockErr error
		err := c.Control(func(fd uintptr) {
			// Before connect, so the SYN carries the window scale this
			// buffer needs. FORCE: the test runs as root, past rmem_max.
			sockErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, receiveBuffer)
		})
		return errors.Join(err, sockErr)
	}}
	require.NoError(t, b.ue.Do(func() error {
		var err error
		receiver, err = dialer.Dial("tcp", serverAddr)
		return err
	}))
	accepted, err := ln.Accept()
	require.NoError(t, err)
	dl := &download{t: t, sender: accepted.(*net.TCPConn), done: make(chan struct{})}
	require.NoError(t, setCongestionControl(dl.sender, "cubic"))
	if pacing > 0 {
		require.NoError(t, setSockopt(dl.sender, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE, int(pacing)))
	}

	dl.wg.Go(func() {
		chunk := make([]byte, 64<<10)
		for {
			select {
			case <-dl.done:
				return
			default:
			}
			if dl.paused.Load() {
				time.Sleep(time.Millisecond)
				continue
			}
			_ = dl.sender.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := dl.sender.Write(chunk); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
		}
	})
	dl.wg.Go(func() {
		buf := make([]byte, 256<<10)
		for {
			n, err := receiver.Read(buf)
			dl.received.Add(uint64(n))
			if err != nil {
				return
			}
		}
	})
	t.Cleanup(func() {
		close(dl.done)
		dl.sender.Close()
		receiver.Close()
		dl.wg.Wait()
	})
	return dl
}

// senderWindow is the receive window the sender last saw from the ue
// host: what the ACKs on the wire advertised, after scaling.
func (dl *download) senderWindow() uint32 {
	dl.t.Helper()
	info := dl.tcpInfo()
	return info.Snd_wnd
}

func (dl *download) tcpInfo() *unix.TCPInfo {
	dl.t.Helper()
	raw, err := dl.sender.SyscallConn()
	require.NoError(dl.t, err)
	var info *unix.TCPInfo
	var sockErr error
	require.NoError(dl.t, raw.Control(func(fd uintptr) {
		info, sockErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}))
	require.NoError(dl.t, sockErr)
	return info
}

// waitWindow polls the sender's view of the window until cond holds.
func (dl *download) waitWindow(timeout time.Duration, what string, cond func(uint32) bool) uint32 {
	dl.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		w := dl.senderWindow()
		if cond(w) {
			return w
		}
		if time.Now().After(deadline) {
			dl.t.Fatalf("waiting %v for the sender's window to be %s; it is %d", timeout, what, w)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitDrained waits until the sender has nothing queued or in flight, so
// that no later segment can raise the receiver's highest sequence, and
// until the receiving application has read all of it: a read that opens
// the window sends a window update, an ACK that would enter the next
// handover epoch and release the flow. The update leaves within the read,
// before the count below moves.
func (dl *download) waitDrained(timeout time.Duration) {
	dl.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		info := dl.tcpInfo()
		read := dl.received.Load()
		if info.Unacked == 0 && info.Notsent_bytes == 0 && read == info.Bytes_acked {
			return
		}
		if time.Now().After(deadline) {
			dl.t.Fatalf("after %v the sender still had %d segments in flight and %d bytes queued, and the receiver had read %d of %d bytes acknowledged",
				timeout, info.Unacked, info.Notsent_bytes, read, info.Bytes_acked)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitBytes waits until at least n more bytes were received.
func (dl *download) waitBytes(timeout time.Duration, n uint64) {
	dl.t.Helper()
	target := dl.received.Load() + n
	deadline := time.Now().Add(timeout)
	for dl.received.Load() < target {
		if time.Now().After(deadline) {
			dl.t.Fatalf("the download did not move %d bytes within %v", n, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

func setCongestionControl(c *net.TCPConn, name string) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var sockErr error
	err = raw.Control(func(fd uintptr) {
		sockErr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
	})
	return errors.Join(err, sockErr)
}

func setSockopt(c *net.TCPConn, level, opt, value int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var sockErr error
	err = raw.Control(func(fd uintptr) { sockErr = unix.SetsockoptInt(int(fd), level, opt, value) })
	return errors.Join(err, sockErr)
}

// wireACK is one ACK the ue host sent, as it crossed the link.
type wireACK struct {
	at     time.Time
	window uint32 // advertised window in bytes, after scaling
}

// ackCapture records, with an AF_PACKET socket on the server's end of the
// link, every TCP segment the ue host sends: what the datapath let out.
type ackCapture struct {
	mu     sync.Mutex
	wscale int // of the ue host's SYN; -1 until seen
	acks   []wireACK
}

// captureACKs starts capturing; call it before the connection opens, so
// that the SYN gives the window scale.
func (b *bed) captureACKs(t testing.TB) *ackCapture {
	t.Helper()
	var fd int
	require.NoError(t, b.server.Do(func() error {
		index, err := nstest.VethEnd{NS: b.server, Ifname: serverIface}.Index()
		if err != nil {
			return err
		}
		proto := int(htons(unix.ETH_P_IP))
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, proto); err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: index}); err != nil {
			return fmt.Errorf("bind packet socket: %w", err)
		}
		// The reader checks for the end of the test between reads. The
		// server's own data segments are not wanted.
		// Each frame carries the time the kernel received it: the
		// reader may fall behind on a loaded host, and a frame stamped
		// when read would land in a later span than it belongs to.
		tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
		return errors.Join(unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20),
			unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1),
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1),
			unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv))
	}))
	c := &ackCapture{wscale: -1}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		frame := make([]byte, 2048)
		oob := make([]byte, unix.CmsgSpace(int(unsafe.Sizeof(unix.Timespec{}))))
		for {
			select {
			case <-done:
				return
			default:
			}
			n, oobn, _, _, err := unix.Recvmsg(fd, frame, oob, 0)
			if err != nil {
				continue
			}
			c.record(receivedAt(oob[:oobn]), frame[:n])
		}
	})
	t.Cleanup(func() {
		close(done)
		wg.Wait()
		unix.Close(fd)
	})
	return c
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// record parses an Ethernet frame and keeps the segments from the ue host.
// receivedAt reads the SO_TIMESTAMPNS stamp of a received frame, or says
// now when there is none.
func receivedAt(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Now()
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS &&
			len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
			ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			return time.Unix(ts.Unix())
		}
	}
	return time.Now()
}

func (c *ackCapture) record(at time.Time, frame []byte) {
	const ethLen = 14
	if len(frame) < ethLen+20 || binary.BigEndian.Uint16(frame[12:14]) != unix.ETH_P_IP {
		return
	}
	ip := frame[ethLen:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[9] != unix.IPPROTO_TCP || netip.AddrFrom4([4]byte(ip[12:16])) != netip.MustParseAddr(ueIP) || len(ip) < ihl+20 {
		return
	}
	tcp := ip[ihl:]
	offset, flags := int(tcp[12]>>4)*4, tcp[13]
	window := uint32(binary.BigEndian.Uint16(tcp[14:16]))
	c.mu.Lock()
	defer c.mu.Unlock()
	const syn, ack = 0x02, 0x10
	if flags&syn != 0 {
		c.wscale = 0
		for opts := tcp[20:min(offset, len(tcp))]; len(opts) > 0; {
			switch kind := opts[0]; {
			case kind == 0:
				opts = nil
			case kind == 1:
				opts = opts[1:]
			case len(opts) < 2 || int(opts[1]) < 2 || int(opts[1]) > len(opts):
				opts = nil
			default:
				if kind == 3 && opts[1] == 3 {
					c.wscale = int(opts[2])
				}
				opts = opts[opts[1]:]
			}
		}
		return
	}
	if flags&ack != 0 && c.wscale >= 0 {
		c.acks = append(c.acks, wireACK{at: at, window: window << c.wscale})
	}
}

// between returns the ACKs captured in [from, to).
func (c *ackCapture) between(from, to time.Time) []wireACK {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []wireACK
	for _, a := range c.acks {
		if !a.at.Before(from) && a.at.Before(to) {
			out = append(out, a)
		}
	}
	return out
}

// windowRange returns the smallest and largest window of acks.
func windowRange(acks []wireACK) (lo, hi uint32) {
	for i, a := range acks {
		if i == 0 || a.window < lo {
			lo = a.window
		}
		hi = max(hi, a.window)
	}
	return lo, hi
}
