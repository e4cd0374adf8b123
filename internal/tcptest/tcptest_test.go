package tcptest

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/nstest"
)

// TestDownloadOverVeth runs a download between two namespaces: the server
// reports the connection, both ends use CUBIC, bytes flow at a measurable
// rate, and the reader stops when its context ends.
func TestDownloadOverVeth(t *testing.T) {
	nstest.RequireRoot(t)
	server, client := nstest.NewNS(t, "srv"), nstest.NewNS(t, "cli")
	nstest.Pair(t, server, client, nstest.Link{AIfname: "veth0", BIfname: "veth0",
		AAddrs: []string{"10.90.0.1/24"}, BAddrs: []string{"10.90.0.2/24"}})
	const addr = "10.90.0.1:5201"
	srv := StartBulkServer(t, server, addr)

	cpus := AllowedCPUs(t)
	require.NotEmpty(t, cpus)
	ctx, cancel := context.WithCancel(context.Background())
	received, conn := DownloadOn(t, ctx, client, addr, cpus[len(cpus)-1])
	sent := <-srv.Conns
	for name, c := range map[string]*net.TCPConn{"client": conn, "server": sent} {
		algo, err := congestionOf(c)
		require.NoError(t, err)
		assert.Equal(t, "cubic", algo, name)
	}
	assert.Positive(t, Rate(received, 200*time.Millisecond))
	info, err := TCPInfo(sent)
	require.NoError(t, err)
	assert.Positive(t, info.Bytes_acked)

	cancel()
	require.Eventually(t, func() bool {
		before := received()
		time.Sleep(50 * time.Millisecond)
		return received() == before
	}, 5*time.Second, 10*time.Millisecond, "the reader stops with its context")
}

// congestionOf reads the congestion control of c's socket.
func congestionOf(c *net.TCPConn) (string, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return "", err
	}
	var algo string
	var sockErr error
	err = raw.Control(func(fd uintptr) {
		algo, sockErr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	return algo, errors.Join(err, sockErr)
}
