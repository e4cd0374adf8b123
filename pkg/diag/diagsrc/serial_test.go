package diagsrc_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/shareddata"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag/qcdiagtest"
)

// quiet drops the reconnection warnings the tests provoke on purpose.
var quiet = slog.New(slog.DiscardHandler)

// openPTY returns the master side of a new pseudo-terminal and the path of
// its slave, which plays the modem's DIAG port.
func openPTY(t *testing.T) (*os.File, string) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	rc, err := master.SyscallConn()
	require.NoError(t, err)
	var n int
	var ioctlErr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		if ioctlErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ioctlErr != nil {
			return
		}
		n, ioctlErr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
	}))
	require.NoError(t, ioctlErr)
	return master, fmt.Sprintf("/dev/pts/%d", n)
}

// fakeModem answers the LOG_CONFIG set-mask request on the master side of
// a pty and then streams capture, like a modem that starts logging. It
// reports the codes it was asked for, or its error, on the channel.
func fakeModem(master *os.File, capture []byte) <-chan any {
	result := make(chan any, 1)
	go func() {
		r := qcdiag.NewReader(master, nil)
		req, err := r.NextFrame()
		if err != nil {
			result <- fmt.Errorf("read request: %w", err)
			return
		}
		equipment, codes, err := qcdiagtest.ParseSetMaskRequest(req)
		if err != nil {
			result <- err
			return
		}
		if _, err := master.Write(qcdiag.Escape(qcdiagtest.SetMaskResponse(equipment, 0))); err != nil {
			result <- fmt.Errorf("write response: %w", err)
			return
		}
		// Odd-sized chunks split frames across reads.
		for chunk := range slices.Chunk(capture, 777) {
			if _, err := master.Write(chunk); err != nil {
				result <- fmt.Errorf("stream capture: %w", err)
				return
			}
		}
		result <- codes
	}()
	return result
}

func TestSerialSourceWithFakeModem(t *testing.T) {
	dir := shareddata.DataDir(t, "diag")
	first, err := os.ReadFile(filepath.Join(dir, "20201115_181637_Xiaomi-Mi10_46000.mi2log"))
	require.NoError(t, err)
	second, err := os.ReadFile(filepath.Join(dir, "tmobile.mi2log"))
	require.NoError(t, err)
	// Log packets and RRC messages in each capture (see the qcdiag
	// real-capture test).
	const firstPackets, secondPackets = 12, 2167
	const firstMessages, secondMessages = 6, 109

	// The daemon opens a stable name; the test re-points it at a new pty
	// to model the modem going away and coming back (a replug).
	link := filepath.Join(t.TempDir(), "ttyDIAG")
	master1, slave1 := openPTY(t)
	defer master1.Close()
	require.NoError(t, os.Symlink(slave1, link))
	modem1 := fakeModem(master1, first)

	dec := &countingDecoder{}
	stats := &diag.Stats{}
	src, err := diagsrc.Open("serial:"+link, diagsrc.Options{Stats: stats, RRC: dec, Logger: quiet})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := make(chan diag.Event, 256)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, out) }()

	serial := src.(*diagsrc.SerialSource)
	// waitFor waits until the source has read logPackets packets in all
	// and decoded messages RRC messages.
	waitFor := func(logPackets uint64, messages int) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for serial.Counters().LogPackets < logPackets || dec.total() < messages {
			select {
			case <-deadline:
				require.FailNow(t, "timed out", "read %d of %d packets, decoded %d of %d messages",
					serial.Counters().LogPackets, logPackets, dec.total(), messages)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	select {
	case got := <-modem1:
		require.Equal(t, []uint16{qcdiag.CodeLTERRCOTA, qcdiag.CodeNRRRCOTA}, got, "mask request")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "fake modem got no mask request")
	}
	waitFor(firstPackets, firstMessages)

	master2, slave2 := openPTY(t)
	defer master2.Close()
	modem2 := fakeModem(master2, second)
	tmp := link + ".new"
	require.NoError(t, os.Symlink(slave2, tmp))
	require.NoError(t, os.Rename(tmp, link))
	// The first modem disappears: the port read fails and the source
	// reconnects to whatever the name points at now.
	require.NoError(t, master1.Close())
	select {
	case got := <-modem2:
		require.IsType(t, []uint16{}, got, "second modem: %v", got)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "source did not reconnect")
	}
	waitFor(firstPackets+secondPackets, firstMessages+secondMessages)
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)

	assert.Equal(t, firstMessages+secondMessages, dec.total())
	assert.Equal(t, 1, dec.channels["nr BCCH-BCH"])
	assert.Equal(t, 30, dec.channels["lte UL-DCCH"])
	assert.GreaterOrEqual(t, errorsOf(stats)[diagsrc.ReasonSerialLost], uint64(1))
	c := serial.Counters()
	assert.Zero(t, c.CRCErrors)
	assert.Equal(t, uint64(firstPackets+secondPackets), c.LogPackets, "log packets over both connections")
}

func TestSerialSourceNoModemAnswer(t *testing.T) {
	master, slave := openPTY(t)
	defer master.Close()
	stats := &diag.Stats{}
	src, err := diagsrc.Open("serial:"+slave, diagsrc.Options{Stats: stats, Logger: quiet})
	require.NoError(t, err)
	// A device that never answers: the source keeps retrying until
	// cancelled and counts each failed session.
	ctx, cancel := context.WithTimeout(t.Context(), 3500*time.Millisecond)
	defer cancel()
	err = src.Run(ctx, make(chan diag.Event))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.GreaterOrEqual(t, errorsOf(stats)[diagsrc.ReasonSerialLost], uint64(1))
}

func TestSerialSourceMissingDevice(t *testing.T) {
	stats := &diag.Stats{}
	src, err := diagsrc.Open("serial:"+filepath.Join(t.TempDir(), "ttyUSB9"), diagsrc.Options{Stats: stats, Logger: quiet})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, src.Run(ctx, make(chan diag.Event)), context.DeadlineExceeded)
	// Backoff 200 ms, 400 ms: a few attempts, not a busy loop.
	lost := errorsOf(stats)[diagsrc.ReasonSerialLost]
	assert.GreaterOrEqual(t, lost, uint64(2))
	assert.LessOrEqual(t, lost, uint64(4))
}
