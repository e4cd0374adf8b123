package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/logbuf"
	"github.com/m2ho/m2ho/pkg/config"
	"github.com/m2ho/m2ho/pkg/datapath"
)

// fakeRunner runs until its context ends, or fails with fail.
type fakeRunner struct {
	iface     string
	fail      chan error
	keepFlows atomic.Bool
	// stalled makes Healthy fail.
	stalled atomic.Bool
}

func (r *fakeRunner) KeepFlowsAtExit() { r.keepFlows.Store(true) }

func (r *fakeRunner) Healthy() error {
	if r.stalled.Load() {
		return errNotHealthy
	}
	return nil
}

func (r *fakeRunner) Summary() string { return "m2ho on " + r.iface }

func (r *fakeRunner) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-r.fail:
		return err
	}
}

// serveHarness runs serve over fake daemons, which open for every
// interface but those in unavailable, and records the interfaces they
// opened with.
type serveHarness struct {
	requests chan os.Signal
	log      *logbuf.Buffer
	// next is what the next Load returns
	next    config.Config
	nextErr error
	done    chan error
	cancel  context.CancelFunc

	mu          sync.Mutex
	unavailable map[string]bool
	opened      []string
	running     *fakeRunner
	// openings are the configurations Reload.Opening saw
	openings []string
}

// pins is the pin directory of the configurations serve starts with.
const pins = "/sys/fs/bpf/m2ho"

func startServe(t *testing.T, iface string) *serveHarness {
	t.Helper()
	h := &serveHarness{requests: make(chan os.Signal, 1), log: &logbuf.Buffer{}, done: make(chan error, 1),
		unavailable: map[string]bool{"missing": true}}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(5 * time.Second):
			t.Error("serve did not return after its context ended")
		}
	})
	reload := Reload{
		Requests: h.requests,
		Load: func() (config.Config, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.next, h.nextErr
		},
		Opening: func(cfg config.Config) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.openings = append(h.openings, cfg.Iface)
		},
	}
	open := func(cfg config.Config) (runner, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.opened = append(h.opened, cfg.Iface)
		if h.unavailable[cfg.Iface] {
			return nil, fmt.Errorf("interface %s not found", cfg.Iface)
		}
		h.running = &fakeRunner{iface: cfg.Iface, fail: make(chan error, 1)}
		return h.running, nil
	}
	logger := slog.New(slog.NewTextHandler(h.log, nil))
	noWait := func(context.Context, config.Config) error { return errors.New("no interface to wait for here") }
	go func() {
		h.done <- serve(ctx, config.Config{Iface: iface, PinDir: pins}, logger, reload, nil, open, noWait)
	}()
	require.Eventually(t, func() bool { return h.current() == iface }, time.Second, time.Millisecond)
	return h
}

// current is the interface of the running daemon.
func (h *serveHarness) current() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running == nil {
		return ""
	}
	return h.running.iface
}

func (h *serveHarness) openedWith() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.opened...)
}

// reloadTo requests a reload to which Load answers cfg or err.
func (h *serveHarness) reloadTo(cfg config.Config, err error) {
	h.mu.Lock()
	h.next, h.nextErr = cfg, err
	h.mu.Unlock()
	h.requests <- syscall.SIGHUP
}

func TestServeReloads(t *testing.T) {
	tests := []struct {
		name string
		// the configuration a reload loads, or the error loading it
		load    config.Config
		loadErr error
		// the interfaces daemons opened with, in order, and the one
		// running at the end
		wantOpened  []string
		wantRunning string
		wantLog     string
		// wantKept: the first daemon left its flows pinned for the next
		wantKept bool
	}{
		{name: "the same interface and pin directory", load: config.Config{Iface: "wwan0", PinDir: pins, Lambda: 3},
			wantOpened: []string{"wwan0", "wwan0"}, wantRunning: "wwan0", wantLog: "configuration reloaded", wantKept: true},
		{name: "another interface", load: config.Config{Iface: "usb0", PinDir: pins},
			wantOpened: []string{"wwan0", "usb0"}, wantRunning: "usb0", wantLog: "configuration reloaded"},
		{name: "another pin directory", load: config.Config{Iface: "wwan0", PinDir: "/sys/fs/bpf/cpe"},
			wantOpened: []string{"wwan0", "wwan0"}, wantRunning: "wwan0", wantLog: "configuration reloaded"},
		{name: "pinning turned off", load: config.Config{Iface: "wwan0"},
			wantOpened: []string{"wwan0", "wwan0"}, wantRunning: "wwan0", wantLog: "configuration reloaded"},
		{name: "an invalid configuration leaves the daemon running", loadErr: errors.New("config: lambda: must be between"),
			wantOpened: []string{"wwan0"}, wantRunning: "wwan0", wantLog: "configuration not reloaded"},
		{name: "a configuration that cannot open brings back the previous one", load: config.Config{Iface: "missing", PinDir: pins},
			wantOpened: []string{"wwan0", "missing", "wwan0"}, wantRunning: "wwan0", wantLog: "going back to the previous one"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := startServe(t, "wwan0")
			first := h.running
			h.reloadTo(tc.load, tc.loadErr)
			require.Eventually(t, func() bool { return assert.ObjectsAreEqual(tc.wantOpened, h.openedWith()) },
				time.Second, time.Millisecond, "opened %v", h.openedWith())
			require.Eventually(t, func() bool { return h.current() == tc.wantRunning }, time.Second, time.Millisecond)
			require.Eventually(t, func() bool { return strings.Contains(h.log.String(), tc.wantLog) }, time.Second, time.Millisecond)
			h.mu.Lock()
			assert.Equal(t, tc.wantOpened, h.openings, "Opening sees every configuration opened")
			restarted := h.running != first
			h.mu.Unlock()
			assert.Equal(t, len(tc.wantOpened) > 1, restarted)
			assert.Equal(t, tc.wantKept, first.keepFlows.Load(), "flows kept pinned")
		})
	}
}

// TestServeEnds: serve returns nil when its context ends, and the error of
// a daemon that fails, without opening another.
func TestServeEnds(t *testing.T) {
	t.Run("context ends", func(t *testing.T) {
		h := startServe(t, "wwan0")
		h.cancel()
		assert.NoError(t, waitReturned(t, h.done, "serve"))
	})
	t.Run("daemon fails", func(t *testing.T) {
		h := startServe(t, "wwan0")
		failure := errors.New("diag input udp://x: closed")
		h.running.fail <- failure
		assert.ErrorIs(t, waitReturned(t, h.done, "serve"), failure)
		assert.Equal(t, []string{"wwan0"}, h.openedWith())
	})
	t.Run("previous configuration fails too", func(t *testing.T) {
		h := startServe(t, "wwan0")
		// the interface went meanwhile: neither configuration opens
		h.mu.Lock()
		h.unavailable["wwan0"] = true
		h.mu.Unlock()
		h.reloadTo(config.Config{Iface: "missing"}, nil)
		err := waitReturned(t, h.done, "serve")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "the previous configuration failed too: interface wwan0 not found")
		assert.Equal(t, []string{"wwan0", "missing", "wwan0"}, h.openedWith())
	})
}

// waitReturned waits for the result that a goroutine sends on done when
// the function it runs returns, and puts it back for the test's cleanup,
// which waits for it too.
func waitReturned(t *testing.T, done chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		done <- err
		return err
	case <-time.After(5 * time.Second):
		require.FailNow(t, what+" did not return")
		return nil
	}
}

// notifySocket is a socket standing for systemd's $NOTIFY_SOCKET.
type notifySocket struct {
	conn *net.UnixConn
}

func newNotifySocket(t *testing.T, watchdog time.Duration) (*notifySocket, *notifier) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", fmt.Sprint(2*watchdog.Microseconds()))
	t.Setenv("WATCHDOG_PID", fmt.Sprint(os.Getpid()))
	n, err := notifierFromEnv()
	require.NoError(t, err)
	require.Equal(t, watchdog, n.watchdog, "pings at half of WATCHDOG_USEC")
	t.Cleanup(func() { n.close() })
	return &notifySocket{conn: conn}, n
}

// next returns the next notification, or "" after a second without one.
func (s *notifySocket) next(t *testing.T) string {
	t.Helper()
	buf := make([]byte, 4096)
	require.NoError(t, s.conn.SetReadDeadline(time.Now().Add(time.Second)))
	n, err := s.conn.Read(buf)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return ""
	}
	require.NoError(t, err)
	return string(buf[:n])
}

// TestServeNotifiesSystemd: READY=1 with a status once the daemon runs,
// watchdog pings while it is healthy and none while it stalls, and
// STOPPING=1 at the end; a start without the interface is ready too,
// waiting for it.
func TestServeNotifiesSystemd(t *testing.T) {
	sock, n := newNotifySocket(t, 20*time.Millisecond)
	var appeared atomic.Bool
	var running atomic.Pointer[fakeRunner]
	open := func(cfg config.Config) (runner, error) {
		if !appeared.Load() {
			return nil, fmt.Errorf("interface %s not found: %w", cfg.Iface, datapath.ErrNoInterface)
		}
		r := &fakeRunner{iface: cfg.Iface, fail: make(chan error, 1)}
		running.Store(r)
		return r, nil
	}
	waited := make(chan struct{})
	wait := func(ctx context.Context, cfg config.Config) error {
		close(waited)
		for !appeared.Load() {
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := &logbuf.Buffer{}
	go func() {
		done <- serve(ctx, config.Config{Iface: "wwan0"}, slog.New(slog.NewTextHandler(log, nil)), Reload{}, n, open, wait)
	}()

	assert.Equal(t, "READY=1\nSTATUS=waiting for the interface wwan0", sock.next(t))
	<-waited
	assert.Equal(t, "WATCHDOG=1", sock.next(t), "waiting is healthy")
	appeared.Store(true)
	msg := sock.next(t)
	for msg == "WATCHDOG=1" {
		msg = sock.next(t)
	}
	assert.Equal(t, "READY=1\nSTATUS=m2ho on wwan0", msg)
	assert.Equal(t, "WATCHDOG=1", sock.next(t))

	running.Load().stalled.Store(true)
	// a ping sent before the stall may still be in the socket
	for msg := sock.next(t); msg != ""; msg = sock.next(t) {
		require.Equal(t, "WATCHDOG=1", msg)
		if strings.Contains(log.String(), "watchdog not pinged") {
			break
		}
	}
	assert.Empty(t, sock.next(t), "no ping while the loop stalls")
	running.Load().stalled.Store(false)
	assert.Equal(t, "WATCHDOG=1", sock.next(t), "pings again once the loop runs")

	cancel()
	require.NoError(t, waitReturned(t, done, "serve"))
	for msg = sock.next(t); msg == "WATCHDOG=1"; msg = sock.next(t) {
	}
	assert.Equal(t, "STOPPING=1", msg)
}

func TestWatchdogInterval(t *testing.T) {
	tests := []struct {
		usec, pid string
		want      time.Duration
		wantErr   bool
	}{
		{usec: "", want: 0},
		{usec: "30000000", want: 15 * time.Second},
		{usec: "30000000", pid: "42", want: 15 * time.Second},
		{usec: "30000000", pid: "43", want: 0}, // another process's watchdog
		{usec: "0", wantErr: true},
		{usec: "soon", wantErr: true},
	}
	for _, tt := range tests {
		got, err := watchdogInterval(tt.usec, tt.pid, 42)
		if tt.wantErr {
			assert.Error(t, err, tt.usec)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, "%s %s", tt.usec, tt.pid)
	}
}
