package daemon

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/config"
)

// TestWaitForInterface: while the interface is missing the endpoints say
// m2hod waits for it, and the wait ends once an interface of the name
// appears.
func TestWaitForInterface(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.NewNS(t, "wait")
	iface := "m2howait0"
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	listen := probe.Addr().String()
	require.NoError(t, probe.Close())

	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The wait runs in the namespace, where the interface will appear,
	// and so do its endpoints.
	go func() {
		done <- ns.Do(func() error {
			return waitForInterface(ctx, config.Config{Iface: iface, Listen: listen}, nil)
		})
	}()
	// The transport dials on a goroutine of its own: the connection is
	// made in the namespace here.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			err = ns.Do(func() error {
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		}}}
	get := func(path string) (code int, body string) {
		resp, err := client.Get("http://" + listen + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	require.Eventually(t, func() bool { code, _ := get("/healthz"); return code == http.StatusOK }, 5*time.Second, 10*time.Millisecond)
	code, body := get("/status")
	require.Equal(t, http.StatusOK, code)
	var st WaitingStatus
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	assert.Equal(t, "waiting_for_interface", st.State)
	assert.Equal(t, iface, st.Iface)
	_, body = get("/metrics")
	assert.Contains(t, body, "m2hod_waiting_for_interface 1\n")
	assert.Contains(t, body, "m2hod_datapath_attached 0\n")
	assert.Contains(t, body, "m2hod_build_info{")

	select {
	case err := <-done:
		require.FailNow(t, "the wait ended without the interface", "%v", err)
	case <-time.After(2 * interfacePoll):
	}
	require.NoError(t, ns.Do(func() error {
		// a veth pair, which every test kernel has
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: iface}, PeerName: iface + "p"})
	}))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the wait did not end once the interface appeared")
	}
	code, _ = get("/healthz")
	assert.Zero(t, code, "the endpoints are closed once the wait ends")
}
