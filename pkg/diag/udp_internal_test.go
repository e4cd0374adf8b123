package diag

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/nstest"
)

// TestListenUDPSizesReceiveBuffer reads back the receive buffer of the
// socket ListenUDP binds. The kernel reports twice the size asked for,
// since it counts its own per-packet overhead in it.
func TestListenUDPSizesReceiveBuffer(t *testing.T) {
	// SO_RCVBUFFORCE passes over net.core.rmem_max only with CAP_NET_ADMIN
	nstest.RequireRoot(t)
	src, err := ListenUDP("udp://127.0.0.1:0", "127.0.0.1:0", nil)
	require.NoError(t, err)
	defer src.Close()
	raw, err := src.conn.SyscallConn()
	require.NoError(t, err)
	var size int
	var sockErr error
	require.NoError(t, raw.Control(func(fd uintptr) {
		size, sockErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	}))
	require.NoError(t, sockErr)
	assert.GreaterOrEqual(t, size, ReceiveBufferBytes)
}
