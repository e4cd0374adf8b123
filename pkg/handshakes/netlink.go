package handshakes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

const (
	afInet  = unix.AF_INET
	afInet6 = unix.AF_INET6
	// nlaTypeMask strips NLA_F_NESTED and NLA_F_NET_BYTEORDER from an
	// attribute's type (include/uapi/linux/netlink.h).
	nlaTypeMask  = 0x3fff
	nlaHeaderLen = 4
	// dumpAttempts bounds the retries of a dump the kernel reports
	// interrupted: the table changed while it was read, and an entry
	// may be missing or repeated.
	dumpAttempts = 3
)

// errMalformed marks a message from the kernel that cannot be read.
var errMalformed = errors.New("malformed netlink message")

// dumpFamilies dumps the table of what (sock_diag, conntrack) for IPv4,
// then IPv6, to the collector: a request of msgType with the payload
// request makes for the family, on the scanner's netlink socket of
// protocol. It stops at the first family that fails, with what the others
// found.
func (s *Scanner) dumpFamilies(what string, protocol int, msgType uint16, request func(family uint8) []byte,
	parse func(msg []byte, into collector), into collector) error {
	for _, family := range []uint8{afInet, afInet6} {
		if err := s.dump(protocol, msgType, request(family), parse, into); err != nil {
			return fmt.Errorf("%s dump of family %d: %w", what, family, err)
		}
	}
	return nil
}

// dump sends a dump request of msgType with payload on the scanner's
// netlink socket of protocol, and hands each reply's payload to parse,
// which adds what it reads into the collector. An interrupted dump is
// taken again, from what the collector's Found held before it; the last
// attempt's result stands, with an error that says so.
func (s *Scanner) dump(protocol int, msgType uint16, payload []byte, parse func(msg []byte, into collector), into collector) error {
	socket, ok := s.sockets[protocol]
	if !ok {
		return s.socketErrs[protocol]
	}
	found := into.found
	before := *found
	for attempt := 1; ; attempt++ {
		err := socket.dump(msgType, payload, func(msg []byte) { parse(msg, into) })
		if errors.Is(err, errDumpInterrupted) && attempt < dumpAttempts {
			*found = before
			continue
		}
		return err
	}
}

// errDumpInterrupted reports a dump during which the table changed: an
// entry may be missing or repeated.
var errDumpInterrupted = errors.New("dump interrupted")

// errSocketClosed reports a dump asked of a closed scanner.
var errSocketClosed = errors.New("netlink socket closed")

const (
	// dumpBufferSize holds any datagram of a dump: the kernel fills
	// them up to 32 KB.
	dumpBufferSize = 64 << 10
	// dumpTimeout gives up on a kernel that stops answering; the
	// connections it would have listed are only left out.
	dumpTimeout = 10 * time.Second
)

// dumpSocket is a netlink socket for table dumps. It reads every datagram
// into the one buffer it keeps: a dump of a router's 65,536 connections
// reads some 16 MB from the kernel, which a buffer per read would leave
// behind as garbage at every scan. It is safe for concurrent use.
type dumpSocket struct {
	mu sync.Mutex
	fd int
	// port is the socket's netlink port id, which the kernel's replies
	// carry.
	port uint32
	seq  uint32
	buf  []byte
}

// openDumpSocket opens a netlink socket of protocol in the calling
// thread's network namespace, where it stays.
func openDumpSocket(protocol int) (*dumpSocket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, protocol)
	if err != nil {
		return nil, err
	}
	s := &dumpSocket{fd: fd, buf: make([]byte, dumpBufferSize)}
	if err := s.setUp(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return s, nil
}

func (s *dumpSocket) setUp() error {
	timeout := unix.NsecToTimeval(dumpTimeout.Nanoseconds())
	for _, option := range []int{unix.SO_RCVTIMEO, unix.SO_SNDTIMEO} {
		if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, option, &timeout); err != nil {
			return fmt.Errorf("socket timeout: %w", err)
		}
	}
	if err := unix.Bind(s.fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	addr, err := unix.Getsockname(s.fd)
	if err != nil {
		return fmt.Errorf("port id: %w", err)
	}
	nl, ok := addr.(*unix.SockaddrNetlink)
	if !ok {
		return fmt.Errorf("port id: address %T", addr)
	}
	s.port = nl.Pid
	return nil
}

// Close closes the socket, once: a descriptor closed twice may by then
// be another file's.
func (s *dumpSocket) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

// dump sends a dump request of msgType with payload and hands visit the
// payload of each message of the reply. visit must not keep it: the
// buffer is read into again.
func (s *dumpSocket) dump(msgType uint16, payload []byte, visit func(msg []byte)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return errSocketClosed
	}
	err := s.dumpOnce(msgType, payload, visit)
	if errors.Is(err, unix.EBUSY) {
		// The kernel runs one dump at a time per socket and refused
		// this one: one given up on (a malformed or timed-out reply)
		// still runs. Its end comes after what is left of it; the
		// refusal came before.
		if err := s.receive(endsADump); err != nil {
			return fmt.Errorf("finish an earlier dump: %w", err)
		}
		err = s.dumpOnce(msgType, payload, visit)
	}
	return err
}

// dumpOnce sends the request and reads its reply. Its caller holds mu.
func (s *dumpSocket) dumpOnce(msgType uint16, payload []byte, visit func(msg []byte)) error {
	if err := s.request(msgType, payload); err != nil {
		return err
	}
	interrupted := false
	err := s.receive(func(datagram []byte) (bool, error) { return s.messages(datagram, &interrupted, visit) })
	if err == nil && interrupted {
		err = errDumpInterrupted
	}
	return err
}

// request sends a dump request under a new sequence number. Its caller
// holds mu.
func (s *dumpSocket) request(msgType uint16, payload []byte) error {
	s.seq++
	req := make([]byte, unix.NLMSG_HDRLEN+len(payload))
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], msgType)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], s.seq)
	copy(req[unix.NLMSG_HDRLEN:], payload)
	if err := unix.Sendto(s.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

// receive reads the kernel's datagrams into the buffer and hands each to
// walk, until walk reports the dump done or fails. Its caller holds mu.
func (s *dumpSocket) receive(walk func(datagram []byte) (done bool, err error)) error {
	for {
		n, from, err := unix.Recvfrom(s.fd, s.buf, unix.MSG_TRUNC)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("receive: %w", err)
		case n > len(s.buf):
			return fmt.Errorf("%w: datagram of %d bytes", errMalformed, n)
		}
		if nl, ok := from.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 {
			continue // not from the kernel
		}
		if done, err := walk(s.buf[:n]); done || err != nil {
			return err
		}
	}
}

// messages walks the messages of one datagram of the current dump,
// skipping those of earlier requests, and reports whether the dump is
// done. An error ends it.
func (s *dumpSocket) messages(datagram []byte, interrupted *bool, visit func(msg []byte)) (done bool, err error) {
	for len(datagram) > 0 {
		h, body, rest, err := nextMessage(datagram)
		if err != nil {
			return true, err
		}
		datagram = rest
		if h.seq != s.seq || h.port != s.port {
			continue
		}
		if h.flags&unix.NLM_F_DUMP_INTR != 0 {
			*interrupted = true
		}
		switch h.typ {
		case unix.NLMSG_NOOP:
		case unix.NLMSG_DONE, unix.NLMSG_ERROR:
			// both carry the request's error, if any, as a negative
			// errno (NLMSG_DONE may carry nothing)
			if len(body) >= 4 {
				if errno := int32(binary.NativeEndian.Uint32(body)); errno < 0 {
					return true, unix.Errno(-errno)
				}
			}
			return true, nil
		default:
			visit(body)
		}
	}
	return false, nil
}

// endsADump reports whether a datagram holds the end of a dump: the end
// of the one dump the kernel was still running, whatever its sequence.
func endsADump(datagram []byte) (bool, error) {
	for len(datagram) > 0 {
		h, _, rest, err := nextMessage(datagram)
		if err != nil {
			return true, err
		}
		if h.typ == unix.NLMSG_DONE || h.typ == unix.NLMSG_ERROR {
			return true, nil
		}
		datagram = rest
	}
	return false, nil
}

// nlHeader is the part of a struct nlmsghdr the dumps read.
type nlHeader struct {
	typ, flags uint16
	seq, port  uint32
}

// nextMessage splits the first message off a datagram.
func nextMessage(datagram []byte) (h nlHeader, body, rest []byte, err error) {
	if len(datagram) < unix.NLMSG_HDRLEN {
		return h, nil, nil, fmt.Errorf("%w: %d bytes after the messages", errMalformed, len(datagram))
	}
	length := int(binary.NativeEndian.Uint32(datagram[0:]))
	if length < unix.NLMSG_HDRLEN || length > len(datagram) {
		return h, nil, nil, fmt.Errorf("%w: message of %d bytes in %d", errMalformed, length, len(datagram))
	}
	h = nlHeader{
		typ:   binary.NativeEndian.Uint16(datagram[4:]),
		flags: binary.NativeEndian.Uint16(datagram[6:]),
		seq:   binary.NativeEndian.Uint32(datagram[8:]),
		port:  binary.NativeEndian.Uint32(datagram[12:]),
	}
	return h, datagram[unix.NLMSG_HDRLEN:length], datagram[min(nlmsgAlign(length), len(datagram)):], nil
}

// nlmsgAlign rounds a message length up to the netlink alignment.
func nlmsgAlign(length int) int {
	return (length + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
}

// walkAttrs calls visit with the type (flags stripped) and value of each
// attribute in b. An attribute whose length runs past b, or bytes left over
// that cannot hold one, make b malformed.
func walkAttrs(b []byte, visit func(typ uint16, value []byte) error) error {
	for len(b) > 0 {
		if len(b) < nlaHeaderLen {
			return fmt.Errorf("%w: %d bytes left after the attributes", errMalformed, len(b))
		}
		length := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) & nlaTypeMask
		if length < nlaHeaderLen || length > len(b) {
			return fmt.Errorf("%w: attribute %d of %d bytes in %d", errMalformed, typ, length, len(b))
		}
		if err := visit(typ, b[nlaHeaderLen:length]); err != nil {
			return err
		}
		aligned := (length + 3) &^ 3
		if aligned >= len(b) {
			return nil
		}
		b = b[aligned:]
	}
	return nil
}
