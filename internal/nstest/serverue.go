package nstest

import "testing"

// Addresses of a test's server and ue ends, with the port the server
// listens on, for the links between them that tests build.
const (
	ServerAddr  = "10.77.0.1"
	UEAddr      = "10.77.0.2"
	ServerAddr6 = "fd77::1"
	UEAddr6     = "fd77::2"
	ServerPort  = 5201
)

// ServerUEPair is an Ethernet link between a new server namespace and a
// new ue namespace: a veth pair whose ends are both named veth0 and carry
// ServerAddr and ServerAddr6, UEAddr and UEAddr6. It skips the test
// unless it may create namespaces.
func ServerUEPair(tb testing.TB) (server, ue *NS) {
	tb.Helper()
	RequireRoot(tb)
	server, ue = NewNS(tb, "srv"), NewNS(tb, "ue")
	Pair(tb, server, ue, Link{AIfname: "veth0", BIfname: "veth0",
		AAddrs: []string{ServerAddr + "/24", ServerAddr6 + "/64"}, BAddrs: []string{UEAddr + "/24", UEAddr6 + "/64"}})
	return server, ue
}
