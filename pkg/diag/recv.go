package diag

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// datagramReader reads the datagrams of a socket, waiting in Go's network
// poller while none is queued.
//
// It is what (*net.UDPConn).ReadMsgUDP does, but for how it enters the
// kernel. A read through the net package is a system call to the runtime,
// and the first one after the process slept wakes the runtime's monitor
// thread, which then polls every 20 µs until the process sleeps again:
// three thread switches per wake-up, which on a small router, or a virtual
// machine, cost more than everything the daemon does with the datagram.
// A read that cannot block need not tell the runtime, so this one is made
// with MSG_DONTWAIT as a raw system call.
type datagramReader struct {
	raw syscall.RawConn
	// buf and oob receive a datagram and its control messages.
	buf, oob []byte
	// The outcome of the last recvmsg.
	n, oobn, flags int
	err            error
	// recv is r.recvNoWait, bound once: a closure per read would be an
	// allocation per datagram.
	recv func(fd uintptr) bool
}

// newDatagramReader reads conn into buffers of bufSize and oobSize bytes.
func newDatagramReader(conn syscall.Conn, bufSize, oobSize int) (*datagramReader, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	r := &datagramReader{raw: raw, buf: make([]byte, bufSize)}
	if oobSize > 0 {
		r.oob = make([]byte, oobSize)
	}
	r.recv = r.recvNoWait
	return r, nil
}

// next returns the next datagram and its control messages, valid until
// the following call, and the kernel's flags (MSG_TRUNC: the datagram was
// longer than the buffer).
func (r *datagramReader) next() (datagram, oob []byte, flags int, err error) {
	if err := r.raw.Read(r.recv); err != nil {
		return nil, nil, 0, err
	}
	if r.err != nil {
		return nil, nil, 0, r.err
	}
	return r.buf[:r.n], r.oob[:r.oobn], r.flags, nil
}

// recvNoWait is one recvmsg(2) with MSG_DONTWAIT, which never blocks; it
// reports false, to wait for the poller, when nothing is queued.
func (r *datagramReader) recvNoWait(fd uintptr) bool {
	iov := unix.Iovec{Base: &r.buf[0]}
	iov.SetLen(len(r.buf))
	msg := unix.Msghdr{Iov: &iov}
	msg.SetIovlen(1)
	if len(r.oob) > 0 {
		msg.Control = &r.oob[0]
		msg.SetControllen(len(r.oob))
	}
	for {
		n, _, errno := unix.RawSyscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&msg)), unix.MSG_DONTWAIT)
		switch errno {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		case 0:
			r.n, r.oobn, r.flags, r.err = int(n), int(msg.Controllen), int(msg.Flags), nil
		default:
			r.n, r.oobn, r.flags, r.err = 0, 0, 0, errno
		}
		return true
	}
}
