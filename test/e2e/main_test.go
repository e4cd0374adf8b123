// Package e2e runs the m2hod binary on the modem side of a veth pair, with
// real kernel TCP across it, drives it with JSON diag events over UDP and
// checks the effect on the wire (the window the sender sees), in /status
// and in /metrics.
package e2e

import (
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/m2ho/m2ho/internal/nstest"
)

// m2hodBin is the binary under test, built once by TestMain; empty when
// the tests cannot run (not root, or -short).
var m2hodBin string

func TestMain(m *testing.M) {
	if addr := os.Getenv(bareReceiverEnv); addr != "" {
		os.Exit(bareReceiver(addr))
	}
	os.Exit(runTests(m))
}

// bareReceiverEnv makes the test binary a bare receiver of datagrams on
// the address it names, instead of running tests.
const bareReceiverEnv = "M2HO_E2E_BARE_RECEIVER"

// bareReceiver reads datagrams on addr and does nothing with them, on one
// OS thread for Go code as m2hod runs: the floor of what receiving a
// stream of diag datagrams costs a Go process on this host, which the
// overhead benchmarks report beside m2hod's cost.
func bareReceiver(addr string) int {
	runtime.GOMAXPROCS(1)
	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bare receiver:", err)
		return 1
	}
	buf := make([]byte, 64<<10)
	for {
		if _, _, err := conn.ReadFrom(buf); err != nil {
			fmt.Fprintln(os.Stderr, "bare receiver:", err)
			return 1
		}
	}
}

func runTests(m *testing.M) int {
	flag.Parse()
	if os.Geteuid() == 0 && !testing.Short() {
		dir, err := os.MkdirTemp("", "m2hod-e2e-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		m2hodBin, err = nstest.BuildM2hod(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
	}
	return m.Run()
}
