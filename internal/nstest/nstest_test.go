package nstest

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPairForwardingAndSysctl(t *testing.T) {
	RequireRoot(t)
	lan, router, wan := NewNS(t, "lan"), NewNS(t, "router"), NewNS(t, "wan")
	Pair(t, lan, router, Link{AIfname: "eth0", BIfname: "lan0",
		AAddrs: []string{"10.1.0.2/24", "fd01::2/64"}, BAddrs: []string{"10.1.0.1/24", "fd01::1/64"}})
	Pair(t, router, wan, Link{AIfname: "wan0", BIfname: "eth0",
		AAddrs: []string{"10.2.0.1/24", "fd02::1/64"}, BAddrs: []string{"10.2.0.2/24", "fd02::2/64"}})
	require.NoError(t, router.EnableForwarding())
	require.NoError(t, lan.AddRoute("default", "10.1.0.1"))
	require.NoError(t, lan.AddRoute("default6", "fd01::1"))
	require.NoError(t, wan.AddRoute("10.1.0.0/24", "10.2.0.1"))
	require.NoError(t, wan.AddRoute("fd01::/64", "fd02::1"))

	var forwarding []byte
	require.NoError(t, router.Do(func() error {
		var err error
		forwarding, err = os.ReadFile("/proc/sys/net/ipv4/ip_forward")
		return err
	}))
	assert.Equal(t, "1", strings.TrimSpace(string(forwarding)))

	tests := []struct {
		name, listen, dial string
	}{
		{"ipv4 forwarded", "10.2.0.2:7000", "10.2.0.2:7000"},
		{"ipv6 forwarded", "[fd02::2]:7001", "[fd02::2]:7001"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ln net.Listener
			require.NoError(t, wan.Do(func() error {
				var err error
				ln, err = net.Listen("tcp", tc.listen)
				return err
			}))
			defer ln.Close()
			accepted := make(chan string, 1)
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					accepted <- ""
					return
				}
				defer conn.Close()
				accepted <- conn.RemoteAddr().String()
			}()
			var conn net.Conn
			require.NoError(t, lan.Do(func() error {
				var err error
				conn, err = net.DialTimeout("tcp", tc.dial, 5*time.Second)
				return err
			}))
			defer conn.Close()
			remote := <-accepted
			host, _, err := net.SplitHostPort(remote)
			require.NoError(t, err)
			assert.Contains(t, []string{"10.1.0.2", "fd01::2"}, host)
		})
	}
}

func TestRunAndOffloads(t *testing.T) {
	RequireRoot(t)
	a, b := NewNS(t, "a"), NewNS(t, "b")
	Pair(t, a, b, Link{AIfname: "veth0", BIfname: "veth0"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, a.SetOffloads("veth0", false))
	out, err := a.Run(ctx, "ethtool", "-k", "veth0")
	require.NoError(t, err)
	// The legacy TSO switch covers TCP over IPv4 and IPv6; ethtool's
	// summary line also counts newer kinds (AccECN) that it leaves be.
	for _, feature := range []string{"tx-tcp-segmentation", "tx-tcp6-segmentation", "generic-segmentation-offload", "generic-receive-offload"} {
		assert.Contains(t, out, feature+": off")
	}
	require.NoError(t, a.SetOffloads("veth0", true))
	out, err = a.Run(ctx, "ethtool", "-k", "veth0")
	require.NoError(t, err)
	for _, feature := range []string{"tx-tcp-segmentation", "generic-segmentation-offload", "generic-receive-offload"} {
		assert.Contains(t, out, feature+": on")
	}

	_, err = a.Run(ctx, "ip", "link", "show", "does-not-exist")
	assert.Error(t, err)
}

func TestNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		s := UniqueSuffix()
		assert.Len(t, s, 6)
		assert.False(t, seen[s], "suffix %s repeated", s)
		seen[s] = true
	}
}

func TestNamespaceRemovedOnDelete(t *testing.T) {
	RequireRoot(t)
	ns, err := CreateNS("gone")
	require.NoError(t, err)
	_, err = os.Stat("/run/netns/" + ns.Name)
	require.NoError(t, err)
	require.NoError(t, ns.Delete())
	_, err = os.Stat("/run/netns/" + ns.Name)
	assert.ErrorIs(t, err, os.ErrNotExist)
}
