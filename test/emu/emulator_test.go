package emu

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/test/scenario"
)

// socketPairEnd is one end of a datagram socket pair set up like a packet
// socket (same read timeout), and the file descriptor of its peer, which
// plays the interface.
func socketPairEnd(t *testing.T) (end *packetSocket, peer int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	tv := unix.NsecToTimeval(readTimeout.Nanoseconds())
	require.NoError(t, unix.SetsockoptTimeval(fds[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv))
	require.NoError(t, unix.SetsockoptTimeval(fds[1], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv))
	t.Cleanup(func() { unix.Close(fds[1]) })
	return &packetSocket{fd: fds[0]}, fds[1]
}

// runningEmulator is an Emulator on socket pairs whose Run has started
// forwarding, and the channel closed when Run returns.
func runningEmulator(t *testing.T) (e *Emulator, returned <-chan struct{}) {
	t.Helper()
	r := newLinkRun(t, &scenario.Scenario{Name: "close", Duration: time.Minute, Cells: twoCells(12, 1<<20, 0), InitialCell: "a"})
	server, serverPeer := socketPairEnd(t)
	ue, uePeer := socketPairEnd(t)
	e = &Emulator{cfg: Config{Scenario: r.link.sc, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, serverEnd: server, ueEnd: ue}
	_, err := e.Start()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The error is the test's to ignore: Close ends Run by design,
		// and without the fix under test a reader fails on the closed
		// descriptor.
		_ = e.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		e.Close()
	})
	// A non-IP frame crosses at once: once it has, the readers run.
	arp := make([]byte, 42)
	arp[12], arp[13] = 0x08, 0x06
	_, err = unix.Write(serverPeer, arp)
	require.NoError(t, err)
	buf := make([]byte, 100)
	n, err := unix.Read(uePeer, buf)
	require.NoError(t, err, "the emulator did not forward the frame")
	require.Equal(t, len(arp), n)
	return e, done
}

// Close releases the sockets the readers block on: it must first stop Run
// and wait for it, or a reader keeps reading a closed descriptor (whose
// number the process may have reused) for up to readTimeout.
func TestEmulatorCloseWaitsForRun(t *testing.T) {
	e, returned := runningEmulator(t)
	e.runMu.Lock()
	runDone := e.runDone
	e.runMu.Unlock()
	require.NotNil(t, runDone, "Run is running")
	closed := make(chan struct{})
	go func() {
		e.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Close did not return")
	}
	// runDone closes once every goroutine of Run has returned; the
	// channel of the goroutine that called Run closes a moment later, so
	// it cannot tell whether Close waited.
	select {
	case <-runDone:
	default:
		assert.Fail(t, "Close returned while Run was still running")
	}
	<-returned
}

func TestEmulatorRunAfterClose(t *testing.T) {
	e, returned := runningEmulator(t)
	e.Close()
	<-returned
	// A second Close has nothing left to release.
	e.Close()
	assert.ErrorContains(t, e.Run(context.Background()), "closed")
}
