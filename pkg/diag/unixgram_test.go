package diag

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/nstest"
)

const measReportJSON = `{"v":1,"type":"meas_report","event":"A3","serving":{"rat":"nr","pci":1,"arfcn":632628},"neighbor":{"rat":"nr","pci":2,"arfcn":632628}}`

// senderEnv makes the test binary a sender instead of running the tests:
// it sends one event to the socket the variable names, or on the
// connected socket it inherits as file descriptor 3 when the variable is
// inheritedSocket, then waits for its standard input to close, so that it
// still runs when the input looks it up.
const (
	senderEnv       = "M2HO_TEST_UNIX_SENDER"
	inheritedSocket = "fd3"
)

func TestMain(m *testing.M) {
	if target := os.Getenv(senderEnv); target != "" {
		os.Exit(sendEvent(target))
	}
	os.Exit(m.Run())
}

func sendEvent(target string) int {
	var conn net.Conn
	var err error
	if target == inheritedSocket {
		conn, err = net.FileConn(os.NewFile(3, "diag socket"))
	} else {
		conn, err = net.Dial("unixgram", target)
	}
	if err == nil {
		_, err = conn.Write([]byte(measReportJSON))
	}
	if err != nil {
		os.Stderr.WriteString(err.Error())
		return 1
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
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

// sender is a copy of the test binary sending one event as another user
// (see senderEnv).
type sender struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr strings.Builder
}

// startSender runs exe with cred; the sender reaches target, or uses
// socket, a connected socket, when it is not nil.
func startSender(t *testing.T, exe, target string, cred *syscall.Credential, socket *os.File) *sender {
	t.Helper()
	s := &sender{cmd: exec.Command(exe)}
	if socket != nil {
		target = inheritedSocket
		s.cmd.ExtraFiles = []*os.File{socket}
	}
	s.cmd.Env = append(os.Environ(), senderEnv+"="+target)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	s.cmd.Stderr = &s.stderr
	var err error
	s.stdin, err = s.cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, s.cmd.Start())
	return s
}

// finish lets the sender exit and returns how it did.
func (s *sender) finish() error {
	s.stdin.Close()
	if err := s.cmd.Wait(); err != nil {
		return fmt.Errorf("%w: %s", err, s.stderr.String())
	}
	return nil
}

// TestUnixSourceAdmitsOnlyTheGroup sends events as an unprivileged user
// (nobody): the kernel refuses the sender outside the socket's group; a
// sender outside the group that was handed a connected socket passes the
// kernel but not the input, which counts it; a member of the group is
// admitted whether the group is its primary or a supplementary one.
func TestUnixSourceAdmitsOnlyTheGroup(t *testing.T) {
	nstest.RequireRoot(t) // sends as another user
	_, path, stats, out := listenUnix(t)
	group := uint32(os.Getegid())
	const nobody = 65534
	// a copy of this binary that nobody may run
	self, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	exe := filepath.Join(sharedDir(t), "sender")
	require.NoError(t, os.WriteFile(exe, self, 0o755))
	noEvent := func(what string) {
		t.Helper()
		select {
		case ev := <-out:
			assert.Fail(t, "event delivered", "%s: %+v", what, ev)
		case <-time.After(200 * time.Millisecond):
		}
	}
	delivered := func(what string) {
		t.Helper()
		select {
		case ev := <-out:
			assert.Equal(t, TypeMeasReport, ev.Type, what)
		case <-time.After(2 * time.Second):
			require.FailNow(t, "no event delivered", what)
		}
	}
	rejected := func(n uint64) bool {
		_, errs := stats.Snapshot()
		return slices.Equal(errs, []Counter{{Label: ReasonPeerNotAllowed, Value: n}})
	}

	outsider := &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}
	err = startSender(t, exe, path, outsider, nil).finish()
	require.Error(t, err, "the kernel refuses a sender outside the group")
	assert.Contains(t, err.Error(), "connect: permission denied")
	noEvent("outside the group")

	// The kernel checks the socket's mode when a sender connects, not when
	// it sends: root connects and hands the socket over.
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	require.NoError(t, err)
	socket, err := conn.File()
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	handedOver := startSender(t, exe, "", outsider, socket)
	require.NoError(t, socket.Close())
	require.Eventually(t, func() bool { return rejected(1) }, 2*time.Second, time.Millisecond,
		"the input rejects and counts a sender outside the group")
	noEvent("outside the group, on a socket root connected")
	require.NoError(t, handedOver.finish())

	member := startSender(t, exe, path, &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{group}}, nil)
	delivered("the group as a supplementary group")
	require.NoError(t, member.finish())

	member = startSender(t, exe, path, &syscall.Credential{Uid: nobody, Gid: group, Groups: []uint32{}}, nil)
	delivered("the group as the primary group")
	require.NoError(t, member.finish())

	events, _ := stats.Snapshot()
	assert.Equal(t, []Counter{{Label: string(TypeMeasReport), Value: 2}}, events)
	assert.True(t, rejected(1), "nothing else rejected")
}

// TestProcStatusIdentity: the ids read from /proc/PID/status, and which of
// them admit a sender whose credentials the kernel gave.
func TestProcStatusIdentity(t *testing.T) {
	own, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	ids, err := parseProcStatus(own)
	require.NoError(t, err)
	assert.Equal(t, uint32(os.Getuid()), ids.uids[0])
	assert.Equal(t, uint32(os.Geteuid()), ids.uids[1])
	assert.Equal(t, uint32(os.Getgid()), ids.gids[0])
	groups, err := os.Getgroups()
	require.NoError(t, err)
	assert.Len(t, ids.groups, len(groups))
	for _, g := range groups {
		assert.Contains(t, ids.groups, uint32(g))
	}

	const decoder = "Name:\tdecoder\nUmask:\t0022\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nFDSize:\t64\nGroups:\t20 990 \n"
	const setgid = "Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t990\t990\t990\nGroups:\t\n"
	tests := []struct {
		name   string
		status string
		cred   unix.Ucred
		gid    uint32
		admit  bool
	}{
		{"a supplementary group", decoder, unix.Ucred{Pid: 7, Uid: 1000, Gid: 1000}, 990, true},
		{"not a member", decoder, unix.Ucred{Pid: 7, Uid: 1000, Gid: 1000}, 991, false},
		{"the pid of another user's process", decoder, unix.Ucred{Pid: 7, Uid: 1001, Gid: 1000}, 990, false},
		{"the pid of a process of another primary group", decoder, unix.Ucred{Pid: 7, Uid: 1000, Gid: 1001}, 990, false},
		{"the effective group", setgid, unix.Ucred{Pid: 7, Uid: 1000, Gid: 1000}, 990, true},
		{"the effective group, claimed", setgid, unix.Ucred{Pid: 7, Uid: 1000, Gid: 990}, 990, true},
	}
	for _, tt := range tests {
		ids, err := parseProcStatus([]byte(tt.status))
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.admit, ids.admits(&tt.cred, tt.gid), tt.name)
	}

	for _, bad := range []string{
		"Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n",
		"Uid:\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\t\n",
		"Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nGroups:\tstaff\n",
	} {
		_, err := parseProcStatus([]byte(bad))
		assert.Error(t, err, "%q", bad)
	}
}

func TestListenUnixgramRefusesAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "diag.sock")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	_, err := ListenUnixgram("unix:"+path, path, nil)
	assert.ErrorContains(t, err, "exists and is not a socket")
	_, err = ListenUnixgram("unix:diag.sock", "diag.sock", nil)
	assert.ErrorContains(t, err, "not an absolute path")
}
