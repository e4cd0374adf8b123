package emu

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/pkg/diag"
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

// TestEmulatorDiagFeed runs the scheduler with a diag feed on a real UDP
// socket: every event the link produced arrives once, the signalling in
// the ground truth's order, the slot reports in theirs, batched on the
// period when one is set, not held back by a long sleep of the scheduler,
// and the ones still queued when the run ends sent then. Bursts of
// packets cross a cell with a 200 ms one-way delay: the first, sent at 0,
// is delivered from 200 ms, while the second, sent at 150 ms, waits in
// the delay line until 350 ms, so the scheduler, busy, sleeps from the
// first burst's last slot to 350 ms; the first burst's rb_alloc events
// are due at the 250 ms boundary. The third, sent at 250 ms, is
// delivered from 450 ms, and its rb_alloc events still wait for the
// 500 ms boundary when the run ends at 490 ms.
func TestEmulatorDiagFeed(t *testing.T) {
	tests := []struct {
		name   string
		period time.Duration
	}{
		{name: "one event per datagram"},
		{name: "batched every 50 ms", period: 50 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cells := twoCells(12, 1<<20, 200*ms)[:1]
			r := newLinkRun(t, &scenario.Scenario{Name: "diag", Duration: time.Minute, Cells: cells, InitialCell: "a",
				Timeline: []scenario.Event{{At: 420 * ms, Type: scenario.TypeReport, Reports: []scenario.Report{{Event: diag.EventA2}}}}})
			server, serverPeer := socketPairEnd(t)
			ue, uePeer := socketPairEnd(t)
			send, recv := udpPair(t)
			require.NoError(t, recv.SetReadBuffer(1<<20))
			e := &Emulator{cfg: Config{Scenario: r.link.sc, Encode: diag.MarshalJSON, DiagFlush: tt.period,
				Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, serverEnd: server, ueEnd: ue, diagConn: send}
			e.diag = &diagFeed{conn: send, encode: diag.MarshalJSON, period: tt.period, lost: e.diagLost}
			epoch, err := e.Start()
			require.NoError(t, err)

			// What arrives, and when, from the run's start.
			type datagram struct {
				raw []byte
				at  time.Duration
			}
			received := make(chan []datagram, 1)
			go func() {
				var got []datagram
				buf := make([]byte, 2*diag.MaxDatagram)
				for {
					_ = recv.SetReadDeadline(time.Now().Add(time.Second))
					n, err := recv.Read(buf)
					if err != nil {
						received <- got
						return
					}
					got = append(got, datagram{raw: bytes.Clone(buf[:n]), at: time.Since(epoch)})
				}
			}()
			// The UE's side keeps reading, so deliveries never block,
			// until the test stops it (its reads time out) before the
			// socket closes.
			var stopDraining atomic.Bool
			drained := make(chan struct{})
			go func() {
				defer close(drained)
				buf := make([]byte, maxFrame)
				for !stopDraining.Load() {
					if _, err := unix.Read(uePeer, buf); err != nil && !errors.Is(err, unix.EAGAIN) {
						return
					}
				}
			}()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			seq := uint32(1)
			for _, b := range []struct {
				at      time.Duration
				packets int
			}{{0, 30}, {150 * ms, 10}, {250 * ms, 10}} {
				time.Sleep(time.Until(epoch.Add(b.at)))
				for range b.packets {
					_, err := unix.Write(serverPeer, tcpFrame(t, seq, 1, 1448, false))
					require.NoError(t, err)
					seq += 1448
				}
			}
			time.Sleep(time.Until(epoch.Add(490 * ms)))
			endedAt := time.Since(epoch)
			cancel()
			require.NoError(t, <-done)
			e.Close()
			stopDraining.Store(true)
			<-drained
			got := <-received

			truth := e.Truth()
			require.Zero(t, truth.Totals.DiagSendErrors)
			var signalling []string
			var rbTimes []time.Time
			events := 0
			firstBurstAt, lastBurstAt := time.Duration(-1), time.Duration(-1)
			for _, d := range got {
				require.LessOrEqual(t, len(d.raw), diag.MaxDatagram)
				for _, line := range lines(d.raw) {
					ev, err := diag.ParseJSON([]byte(line))
					require.NoError(t, err)
					events++
					if ev.Type != diag.TypeRBAlloc {
						signalling = append(signalling, line)
						continue
					}
					rbTimes = append(rbTimes, ev.Time)
					slots := ev.Time.Sub(epoch)
					if slots < 300*ms && firstBurstAt < 0 {
						firstBurstAt = d.at
					}
					if slots >= 440*ms {
						lastBurstAt = d.at
					}
				}
			}
			assert.EqualValues(t, truth.Totals.DiagEvents, events, "every event once")
			want := make([]string, len(truth.Signalling))
			for i, raw := range truth.Signalling {
				want[i] = string(raw)
			}
			assert.Equal(t, want, signalling)
			require.Greater(t, len(rbTimes), 4, "the bursts reported their slots")
			assert.True(t, slices.IsSortedFunc(rbTimes, time.Time.Compare), "slot reports in order")
			require.GreaterOrEqual(t, firstBurstAt, time.Duration(0))
			assert.Less(t, firstBurstAt, 330*ms, "the first burst's slots waited for the second burst")
			require.GreaterOrEqual(t, lastBurstAt, time.Duration(0), "the last burst's slots were sent")
			if tt.period == 0 {
				assert.Len(t, got, events, "one event per datagram")
				return
			}
			assert.Less(t, len(got), events, "coalesced")
			assert.GreaterOrEqual(t, firstBurstAt, 250*ms, "sent on the boundary after the slots")
			assert.GreaterOrEqual(t, lastBurstAt, endedAt, "sent when the run ended")
		})
	}
}
