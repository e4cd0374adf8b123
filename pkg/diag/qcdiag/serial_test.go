package qcdiag

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestOpenSerialDeviceKinds: a tty is put in raw mode; a character device
// that is not a tty, as the WWAN subsystem's /dev/wwan0qcdm0, is used as
// it is, its bytes untouched; anything else is refused.
func TestOpenSerialDeviceKinds(t *testing.T) {
	t.Run("character device, not a tty", func(t *testing.T) {
		// /dev/zero is a character device without termios, as a WWAN
		// port is; every byte it gives is a zero.
		_, err := unix.IoctlGetTermios(int(mustOpen(t, "/dev/zero").Fd()), unix.TCGETS)
		require.ErrorIs(t, err, unix.ENOTTY, "the device is not a tty")
		dev, err := OpenSerial("/dev/zero")
		require.NoError(t, err)
		defer dev.Close()
		buf := []byte{1, 2, 3, 0x7e, 0x7d}
		n, err := dev.Read(buf)
		require.NoError(t, err)
		assert.Equal(t, make([]byte, n), buf[:n], "bytes read as the device gives them")
		n, err = dev.Write([]byte{0x4b, 0x12, 0x7e})
		require.NoError(t, err)
		assert.Equal(t, 3, n)
	})
	t.Run("tty", func(t *testing.T) {
		ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
		if err != nil {
			t.Skipf("no pseudo-terminals: %v", err)
		}
		defer ptmx.Close()
		require.NoError(t, unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0))
		n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
		require.NoError(t, err)
		dev, err := OpenSerial(filepath.Join("/dev/pts", strconv.Itoa(n)))
		require.NoError(t, err)
		defer dev.Close()
		tio, err := unix.IoctlGetTermios(int(dev.Fd()), unix.TCGETS)
		require.NoError(t, err)
		assert.Zero(t, tio.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG), "raw mode")
		assert.Equal(t, uint32(unix.CS8), tio.Cflag&unix.CSIZE)
	})
	for name, path := range map[string]string{
		"regular file": writeFile(t),
		"fifo":         mkfifo(t),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := OpenSerial(path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "neither a tty nor a character device")
		})
	}
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func writeFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "capture.qmdl")
	require.NoError(t, os.WriteFile(path, []byte{0x7e}, 0o600))
	return path
}

func mkfifo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "diag.fifo")
	require.NoError(t, unix.Mkfifo(path, 0o600))
	// Opening a FIFO read-write does not wait for a peer.
	return path
}
