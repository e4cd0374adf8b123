package diag

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/nstest"
)

const measReportJSON = `{"v":1,"type":"meas_report","event":"A3","serving":{"rat":"nr","pci":1,"arfcn":632628},"neighbor":{"rat":"nr","pci":2,"arfcn":632628}}`

// senderEnv makes the test binary send one event to the socket it names,
// as the user it runs as, instead of running the tests.
const senderEnv = "M2HO_TEST_UNIX_SENDER"

func TestMain(m *testing.M) {
	if path := os.Getenv(senderEnv); path != "" {
		conn, err := net.Dial("unixgram", path)
		if err == nil {
			_, err = conn.Write([]byte(measReportJSON))
		}
		if err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// sharedDir is a temporary directory every user may enter (t.TempDir's
// parent is its creator's only).
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "m2ho-unixgram-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

func listenUnix(t *testing.T) (*UnixSource, string, *Stats, <-chan Event) {
	t.Helper()
	// others may reach the socket's directory, as the unit's runtime
	// directory: the socket's own mode decides
	path := filepath.Join(sharedDir(t), "diag.sock")
	stats := &Stats{}
	src, err := ListenUnixgram("unix:"+path, path, stats)
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(SocketMode), st.Mode().Perm(), "owner and group only")
	out := make(chan Event, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, out) }()
	t.Cleanup(func() {
		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
		_, err := os.Stat(path)
		assert.ErrorIs(t, err, os.ErrNotExist, "the socket is removed")
	})
	return src, path, stats, out
}

func TestUnixSourceDeliversOwnUsersEvents(t *testing.T) {
	_, path, stats, out := listenUnix(t)
	conn, err := net.Dial("unixgram", path)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte(measReportJSON + "\n" + measReportJSON + "\nnot json\n"))
	require.NoError(t, err)
	for range 2 {
		select {
		case ev := <-out:
			assert.Equal(t, TypeMeasReport, ev.Type)
		case <-time.After(2 * time.Second):
			require.FailNow(t, "no event")
		}
	}
	require.Eventually(t, func() bool { _, errs := stats.Snapshot(); return len(errs) == 1 }, time.Second, time.Millisecond)
	_, errs := stats.Snapshot()
	assert.Equal(t, []Counter{{Label: ReasonJSONSyntax, Value: 1}}, errs)
}

// TestUnixSourceRejectsOtherUsers sends events as an unprivileged user
// (nobody): the kernel refuses the sender outside the socket's group; one
// that has the group only as a supplementary group passes the kernel but
// not the input, which counts it; one running with the group is admitted.
func TestUnixSourceRejectsOtherUsers(t *testing.T) {
	nstest.RequireRoot(t) // sends as another user
	_, path, stats, out := listenUnix(t)
	group := uint32(os.Getegid())
	const nobody = 65534
	// a copy of this binary that nobody may run
	self, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	exe := filepath.Join(sharedDir(t), "sender")
	require.NoError(t, os.WriteFile(exe, self, 0o755))
	send := func(cred *syscall.Credential) error {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), senderEnv+"="+path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return &exec.Error{Name: stderr.String(), Err: err}
		}
		return nil
	}
	noEvent := func(what string) {
		select {
		case ev := <-out:
			assert.Fail(t, "event delivered", "%s: %+v", what, ev)
		case <-time.After(200 * time.Millisecond):
		}
	}

	err = send(&syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}})
	require.Error(t, err, "the kernel refuses a sender outside the group")
	assert.Contains(t, err.Error(), "connect: permission denied")
	noEvent("outside the group")

	require.NoError(t, send(&syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{group}}),
		"the kernel lets a member of the group send")
	noEvent("group as a supplementary group")
	require.Eventually(t, func() bool {
		_, errs := stats.Snapshot()
		return len(errs) == 1 && errs[0] == Counter{Label: ReasonPeerNotAllowed, Value: 1}
	}, 2*time.Second, time.Millisecond, "the input rejects and counts it")

	require.NoError(t, send(&syscall.Credential{Uid: nobody, Gid: group, Groups: []uint32{}}))
	select {
	case ev := <-out:
		assert.Equal(t, TypeMeasReport, ev.Type, "a sender running with the group is admitted")
	case <-time.After(2 * time.Second):
		require.FailNow(t, "the event of a sender running with the group was not delivered")
	}
	events, _ := stats.Snapshot()
	assert.Equal(t, []Counter{{Label: string(TypeMeasReport), Value: 1}}, events)
}

func TestListenUnixgramRefusesAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "diag.sock")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	_, err := ListenUnixgram("unix:"+path, path, nil)
	assert.ErrorContains(t, err, "exists and is not a socket")
	_, err = ListenUnixgram("unix:diag.sock", "diag.sock", nil)
	assert.ErrorContains(t, err, "not an absolute path")
}
