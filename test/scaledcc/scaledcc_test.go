package scaledcc

import (
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/nstest"
)

func TestRegisterRejectsScales(t *testing.T) {
	for _, s := range []float64{0, -0.1, 1.5} {
		_, err := Register(s)
		assert.Error(t, err, "scale %g", s)
	}
}

func TestUniqueNameFitsTheKernel(t *testing.T) {
	for _, ppm := range []uint32{1, 100000, 1000000} {
		name, err := uniqueName(ppm)
		require.NoError(t, err)
		assert.LessOrEqual(t, len(name), nameMax)
		assert.True(t, strings.HasPrefix(name, Family))
	}
	a, err := uniqueName(100000)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(a, "scubic100_"), a)
}

// TestRegisterServesADownload registers two scales side by side, selects
// one on a loopback connection and moves data through it: the kernel
// accepted the struct_ops, the verifier the programs, and TCP runs them.
func TestRegisterServesADownload(t *testing.T) {
	nstest.RequireRoot(t)
	full, err := Register(1)
	require.NoError(t, err)
	defer full.Close()
	scaled, err := Register(0.1)
	require.NoError(t, err)
	defer scaled.Close()
	require.NotEqual(t, full.Name(), scaled.Name())

	available, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	require.NoError(t, err)
	assert.Contains(t, strings.Fields(string(available)), scaled.Name())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	const size = 8 << 20
	received := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- -1
			return
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		received <- n
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	raw, err := conn.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	var sockErr error
	require.NoError(t, raw.Control(func(fd uintptr) {
		sockErr = unix.SetsockoptString(int(fd), syscall.IPPROTO_TCP, unix.TCP_CONGESTION, scaled.Name())
	}))
	require.NoError(t, sockErr)
	var got string
	require.NoError(t, raw.Control(func(fd uintptr) {
		got, sockErr = unix.GetsockoptString(int(fd), syscall.IPPROTO_TCP, unix.TCP_CONGESTION)
	}))
	require.NoError(t, sockErr)
	assert.Equal(t, scaled.Name(), strings.TrimRight(got, "\x00"))
	_, err = conn.Write(make([]byte, size))
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	assert.Equal(t, int64(size), <-received)
}
