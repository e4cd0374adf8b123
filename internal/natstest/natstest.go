// Package natstest runs a real NATS server with JetStream inside a test
// process, for the tests of the fleet store and its users.
package natstest

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// Server is a running server and what it takes to start it again on the
// same port and store: a restart, as a vehicle back in coverage sees it.
type Server struct {
	*server.Server
	Port     int
	StoreDir string
}

// Start runs a server with JetStream storing in a fresh temporary
// directory, on a free port, and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, server.RANDOM_PORT, t.TempDir())
}

// Restart runs a server again on s's port and store directory (after
// s.Shutdown).
func (s *Server) Restart(t testing.TB) *Server {
	t.Helper()
	return start(t, s.Port, s.StoreDir)
}

func start(t testing.TB, port int, storeDir string) *Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: storeDir,
		NoLog: true, NoSigs: true,
	})
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats-server did not start")
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	return &Server{Server: srv, Port: srv.Addr().(*net.TCPAddr).Port, StoreDir: storeDir}
}

// URL is the server's client URL.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.Port) }
