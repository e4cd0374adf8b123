// Package natstest runs real NATS servers inside a test process, for the
// tests of the fleet store and its users: a server with JetStream, and
// the hub and leaf node of deploy/ as a vehicle uses them.
package natstest

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// Server is a running server and what it takes to start it again on the
// same ports and store: a restart, as a vehicle back in coverage sees it.
type Server struct {
	*server.Server
	Port int
	// LeafPort is the port leaf nodes dial, 0 when the server accepts
	// none.
	LeafPort int
	StoreDir string
	opts     *server.Options
}

// Option changes a server's options before it starts.
type Option func(*server.Options)

// Start runs a server with JetStream storing in a fresh temporary
// directory, on a free port, and stops it when the test ends.
func Start(t testing.TB, options ...Option) *Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir()}
	for _, o := range options {
		o(opts)
	}
	return start(t, opts)
}

// StartHub runs deploy/nats-server.conf as the fleet's hub, with its
// JetStream domain, on loopback: clients on a free port, leaf nodes on
// leafPort (0: a free one), storing in a fresh temporary directory.
func StartHub(t testing.TB, leafPort int) *Server {
	t.Helper()
	opts, err := server.ProcessConfigFile(deployFile(t, "nats-server.conf"))
	require.NoError(t, err)
	if leafPort == 0 {
		leafPort = FreePort(t)
	}
	opts.Host, opts.Port, opts.StoreDir = "127.0.0.1", server.RANDOM_PORT, t.TempDir()
	opts.LeafNode.Host, opts.LeafNode.Port = "127.0.0.1", leafPort
	return start(t, opts)
}

// StartLeaf runs deploy/nats-leaf.conf as a vehicle's leaf node on a free
// loopback port, dialling a hub's leaf node port on loopback every 100 ms
// (the file's 5 s would slow the tests down).
func StartLeaf(t testing.TB, hubLeafPort int) *Server {
	t.Helper()
	opts, err := server.ProcessConfigFile(deployFile(t, "nats-leaf.conf"))
	require.NoError(t, err)
	require.Len(t, opts.LeafNode.Remotes, 1)
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.LeafNode.ReconnectInterval = 100 * time.Millisecond
	opts.LeafNode.Remotes[0].URLs = []*url.URL{{Scheme: "nats-leaf", Host: fmt.Sprintf("127.0.0.1:%d", hubLeafPort)}}
	return start(t, opts)
}

// deployFile is the path of a file of deploy/, found from this source
// file's.
func deployFile(t testing.TB, name string) string {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	require.True(t, ok, "no source path to find deploy/ from")
	return filepath.Join(filepath.Dir(self), "..", "..", "deploy", name)
}

// Restart runs a server again on s's ports, options and store directory
// (after s.Shutdown).
func (s *Server) Restart(t testing.TB) *Server {
	t.Helper()
	opts := s.opts.Clone()
	opts.Port = s.Port
	return start(t, opts)
}

func start(t testing.TB, opts *server.Options) *Server {
	t.Helper()
	opts.NoLog, opts.NoSigs = true, true
	// The options are kept for a restart: the server writes into the
	// ones it runs with.
	kept := opts.Clone()
	srv, err := server.NewServer(opts)
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats-server did not start")
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return &Server{Server: srv, Port: srv.Addr().(*net.TCPAddr).Port, LeafPort: opts.LeafNode.Port, StoreDir: opts.StoreDir, opts: kept}
}

// URL is the server's client URL.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.Port) }

// FreePort is a loopback port nothing listens on (for a while).
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}
