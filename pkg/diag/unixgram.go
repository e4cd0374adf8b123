package diag

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ReasonPeerNotAllowed counts datagrams on a unix socket input whose
// sender the input does not admit (see UnixSource).
const ReasonPeerNotAllowed = "peer_not_allowed"

// SocketMode is the mode of a unix socket input: its owner (the daemon)
// and its group may send.
const SocketMode = 0o660

// UnixSource receives version-1 JSON events on a unix datagram socket, as
// UDPSource does on a UDP port, but only from the senders the host allows.
// Two checks admit a sender. The kernel's: the socket is SocketMode, so
// only root, the daemon's user and the members of the daemon's group can
// send at all. The kernel checks the mode when a sender reaches the
// socket by its path, not when it writes on a socket connected before (by
// a process that passed it on, or while it still had the group), so the
// input checks again, on the credentials the kernel attaches to every
// datagram: the sender runs as root, as the daemon's user, or is a member
// of the daemon's group, as its primary group or a supplementary one (see
// memberOfGroup). A datagram of any other sender is dropped and counted
// as ReasonPeerNotAllowed.
type UnixSource struct {
	name  string
	path  string
	conn  *net.UnixConn
	stats *Stats
	// uid and gid are admitted, with root.
	uid, gid uint32
}

// ListenUnixgram binds a unix datagram socket at path, replacing a socket
// a previous run left there, and returns the source. The directory must
// exist (the unit's RuntimeDirectory=).
func ListenUnixgram(name, path string, stats *Stats) (*UnixSource, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("diag %s: %q is not an absolute path", name, path)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("diag %s: %s exists and is not a socket", name, path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("diag %s: remove the socket of a previous run: %w", name, err)
		}
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("diag %s: listen: %w", name, err)
	}
	fail := func(err error) (*UnixSource, error) {
		conn.Close()
		return nil, fmt.Errorf("diag %s: %w", name, err)
	}
	// The mode is set on the bound socket: umask made it narrower.
	if err := os.Chmod(path, SocketMode); err != nil {
		return fail(err)
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return fail(err)
	}
	var sockErr error
	if err := raw.Control(func(fd uintptr) {
		sockErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	}); err != nil {
		return fail(err)
	}
	if sockErr != nil {
		return fail(fmt.Errorf("ask for the senders' credentials: %w", sockErr))
	}
	if err := setReceiveBuffer(conn, ReceiveBufferBytes); err != nil {
		return fail(err)
	}
	if stats == nil {
		stats = &Stats{}
	}
	return &UnixSource{name: name, path: path, conn: conn, stats: stats,
		uid: uint32(os.Geteuid()), gid: uint32(os.Getegid())}, nil
}

// Name returns the URI the source was opened from.
func (s *UnixSource) Name() string { return s.name }

// Close releases the socket of a source that was never Run.
func (s *UnixSource) Close() error {
	os.Remove(s.path)
	return s.conn.Close()
}

// Run delivers events until ctx is cancelled; it owns and closes the
// socket, and removes its file.
func (s *UnixSource) Run(ctx context.Context, out chan<- Event) error {
	return s.receive(ctx, eachEvent(ctx, out, s.stats))
}

// RunBatches is Run delivering the events of each datagram together.
func (s *UnixSource) RunBatches(ctx context.Context, out chan<- []Event) error {
	return s.receive(ctx, wholeDatagram(ctx, out, s.stats))
}

func (s *UnixSource) receive(ctx context.Context, deliver deliverer) error {
	stop := context.AfterFunc(ctx, func() { s.conn.Close() })
	defer stop()
	defer s.Close()
	r, err := newDatagramReader(s.conn, MaxDatagram+1, unix.CmsgSpace(unix.SizeofUcred))
	if err != nil {
		return fmt.Errorf("diag %s: %w", s.name, err)
	}
	for {
		datagram, oob, flags, err := r.next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("diag %s: read: %w", s.name, err)
		}
		if !s.admits(oob) {
			s.stats.CountError(ReasonPeerNotAllowed)
			continue
		}
		if flags&syscall.MSG_TRUNC != 0 || len(datagram) > MaxDatagram {
			s.stats.CountError(ReasonUDPTruncated)
			continue
		}
		if err := deliver(datagram, time.Now()); err != nil {
			return err
		}
	}
}

// admits says whether the credentials in a datagram's control message
// are those of an admitted sender. Without credentials, nobody is.
func (s *UnixSource) admits(oob []byte) bool {
	cred, err := senderCredentials(oob)
	if err != nil {
		return false
	}
	if cred.Uid == 0 || cred.Uid == s.uid || cred.Gid == s.gid {
		return true
	}
	return s.memberOfGroup(cred)
}

// memberOfGroup says whether the sender of cred has the daemon's group as
// its effective group or a supplementary one. The kernel's credentials
// carry only the sender's pid, user and primary group, so the groups are
// read from the sender's /proc entry. The process found there must run
// with the user and group of the credentials: the pid of a sender that
// has exited may already be another's, and another user's process must
// not vouch for it. A sender whose entry cannot be read is refused: one
// that has exited, or one that /proc hides from the daemon (systemd's
// ProtectProc=invisible hides other users' processes from it). Only such
// senders cost a read; root and the daemon's own user and group are
// admitted on the credentials alone.
func (s *UnixSource) memberOfGroup(cred *unix.Ucred) bool {
	if cred.Pid <= 0 {
		return false
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(int(cred.Pid)) + "/status")
	if err != nil {
		return false
	}
	ids, err := parseProcStatus(status)
	if err != nil {
		return false
	}
	return ids.admits(cred, s.gid)
}

// procIDs are the identity lines of /proc/PID/status: the real,
// effective, saved and file system user and group ids, and the
// supplementary groups.
type procIDs struct {
	uids, gids [4]uint32
	groups     []uint32
}

// admits says whether the process is the sender of cred, as far as its
// ids tell (the kernel lets a sender claim its real, effective or saved
// ids), and has gid as its effective or a supplementary group.
func (p procIDs) admits(cred *unix.Ucred, gid uint32) bool {
	if !slices.Contains(p.uids[:3], cred.Uid) || !slices.Contains(p.gids[:3], cred.Gid) {
		return false
	}
	return p.gids[1] == gid || slices.Contains(p.groups, gid)
}

func parseProcStatus(status []byte) (procIDs, error) {
	var p procIDs
	var found int
	for line := range bytes.Lines(status) {
		key, value, ok := bytes.Cut(bytes.TrimSpace(line), []byte(":"))
		if !ok {
			continue
		}
		switch string(key) {
		case "Uid", "Gid":
			ids, err := parseIDs(value)
			if err != nil || len(ids) != 4 {
				return procIDs{}, fmt.Errorf("%s: %q", key, value)
			}
			if string(key) == "Uid" {
				p.uids = [4]uint32(ids)
			} else {
				p.gids = [4]uint32(ids)
			}
			found++
		case "Groups":
			ids, err := parseIDs(value)
			if err != nil {
				return procIDs{}, fmt.Errorf("%s: %q", key, value)
			}
			p.groups = ids
			found++
		}
	}
	if found != 3 {
		return procIDs{}, errors.New("no Uid, Gid or Groups line")
	}
	return p, nil
}

func parseIDs(field []byte) ([]uint32, error) {
	var ids []uint32
	for f := range bytes.FieldsSeq(field) {
		id, err := strconv.ParseUint(string(f), 10, 32)
		if err != nil {
			return nil, err
		}
		ids = append(ids, uint32(id))
	}
	return ids, nil
}

func senderCredentials(oob []byte) (*unix.Ucred, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_CREDENTIALS {
			return unix.ParseUnixCredentials(&m)
		}
	}
	return nil, errors.New("no credentials")
}
