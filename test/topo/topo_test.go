package topo

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netns"

	"github.com/m2ho/m2ho/internal/nstest"
)

func TestCreateAndClose(t *testing.T) {
	nstest.RequireRoot(t)
	tests := []struct {
		name   string
		opts   Options
		wantNS int
	}{
		{name: "ue receiver", opts: Options{}, wantNS: 3},
		{name: "with lan", opts: Options{LAN: true}, wantNS: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			top, err := Create(tt.opts)
			require.NoError(t, err)
			t.Cleanup(func() { _ = top.Close() })
			names := top.Namespaces()
			require.Len(t, names, tt.wantNS)
			for _, n := range names {
				assert.FileExists(t, filepath.Join(netnsDir, n))
			}
			// Offloads are off on both sides of the emulated link.
			for _, end := range []struct {
				ns    *Namespace
				iface string
			}{{top.Server, ServerIface}, {top.Emu, EmuServerIface}, {top.Emu, EmuUEIface}, {top.UE, UEIface}} {
				for _, f := range []nstest.Offload{nstest.OffloadTxChecksum, nstest.OffloadTSO, nstest.OffloadGSO, nstest.OffloadGRO} {
					var on bool
					require.NoError(t, end.ns.Do(func() (err error) {
						on, err = nstest.OffloadEnabled(end.iface, f)
						return err
					}))
					assert.False(t, on, "%s offload %#x", end.iface, f)
				}
			}
			link, err := top.UE.Netlink().LinkByName(UEIface)
			require.NoError(t, err)
			assert.Equal(t, MTU, link.Attrs().MTU)
			assert.Equal(t, receiverAddrFor(tt.opts), top.ReceiverAddr.String())

			// Nothing forwards across emu until the emulator runs.
			err = top.Server.Do(func() error {
				conn, err := net.DialTimeout("tcp", net.JoinHostPort(UEAddr.IP.String(), "9"), 300*time.Millisecond)
				if err == nil {
					conn.Close()
				}
				return err
			})
			assert.Error(t, err, "a connection crossed emu without an emulator")

			require.NoError(t, top.Close())
			for _, n := range names {
				assert.NoFileExists(t, filepath.Join(netnsDir, n))
			}
			assert.NoError(t, top.Close(), "closing twice")
		})
	}
}

// receiverAddrFor is where a topology with opts receives traffic.
func receiverAddrFor(opts Options) string {
	if opts.LAN {
		return LANAddr.IP.String()
	}
	return UEAddr.IP.String()
}

func TestTwoTopologiesDoNotCollide(t *testing.T) {
	nstest.RequireRoot(t)
	a, err := Create(Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	b, err := Create(Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	assert.NotEqual(t, a.ID, b.ID)
	assert.NotEqual(t, a.Emu.Name, b.Emu.Name)
}

func TestCleanupStaleRemovesOnlyDeadCreators(t *testing.T) {
	nstest.RequireRoot(t)
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	deadPID := dead.Process.Pid

	staleName := fmt.Sprintf("%s%d-%06x-server", NamePrefix, deadPID, time.Now().UnixNano()&0xffffff)
	liveName := fmt.Sprintf("%s%d-%06x-server", NamePrefix, os.Getpid(), time.Now().UnixNano()&0xffffff)
	for _, name := range []string{staleName, liveName} {
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // the thread ends with the goroutine
			h, err := netns.NewNamed(name)
			if err == nil {
				h.Close()
			}
			errc <- err
		}()
		require.NoError(t, <-errc)
		t.Cleanup(func() { _ = netns.DeleteNamed(name) })
	}
	removed, err := CleanupStale()
	require.NoError(t, err)
	assert.Contains(t, removed, staleName)
	assert.NotContains(t, removed, liveName)
	assert.NoFileExists(t, filepath.Join(netnsDir, staleName))
	assert.FileExists(t, filepath.Join(netnsDir, liveName))
}

func TestCreatorPID(t *testing.T) {
	tests := []struct {
		name    string
		wantPID int
		wantOK  bool
	}{
		{name: "m2tb-1234-abcdef-emu", wantPID: 1234, wantOK: true},
		{name: "m2ho-dp-abcdef", wantOK: false},
		{name: "m2tb-x-abcdef-emu", wantOK: false},
		{name: "m2tb-1234", wantOK: false},
	}
	for _, tt := range tests {
		pid, ok := creatorPID(tt.name)
		assert.Equal(t, tt.wantOK, ok, tt.name)
		if tt.wantOK {
			assert.Equal(t, tt.wantPID, pid, tt.name)
		}
	}
}

func TestCommandSeesTheNamespaceInSysfs(t *testing.T) {
	nstest.RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("iproute2 not installed (make deps installs it)")
	}
	top, err := Create(Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = top.Close() })
	tests := []struct {
		ns    *Namespace
		iface string
	}{
		{top.UE, UEIface},
		{top.Server, ServerIface},
	}
	for _, tt := range tests {
		cmd := tt.ns.Command(context.Background(), "cat", filepath.Join("/sys/class/net", tt.iface, "mtu"))
		exited, err := tt.ns.Start(cmd)
		require.NoError(t, err)
		assert.NoError(t, <-exited, "%s visible in /sys inside %s", tt.iface, tt.ns.Name)
	}
}
