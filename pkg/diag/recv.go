package diag

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// receiveDatagram reads the next datagram of a socket into buf, and its
// control messages into oob, waiting in Go's network poller while none is
// queued. flags are the kernel's (MSG_TRUNC: the datagram was longer than
// buf).
//
// It is what (*net.UDPConn).ReadMsgUDP does, but for how it enters the
// kernel. A read through the net package is a system call to the runtime,
// and the first one after the process slept wakes the runtime's monitor
// thread, which then polls every 20 µs until the process sleeps again:
// three thread switches per wake-up, which on a small router, or a virtual
// machine, cost more than everything the daemon does with the datagram.
// A read that cannot block need not tell the runtime, so this one is made
// with MSG_DONTWAIT as a raw system call.
func receiveDatagram(raw syscall.RawConn, buf, oob []byte) (n, oobn, flags int, err error) {
	readErr := raw.Read(func(fd uintptr) bool {
		for {
			n, oobn, flags, err = recvmsgNoWait(fd, buf, oob)
			if err != unix.EINTR {
				// EAGAIN: nothing queued, wait for the poller.
				return err != unix.EAGAIN
			}
		}
	})
	if readErr != nil {
		return 0, 0, 0, readErr
	}
	return n, oobn, flags, err
}

// recvmsgNoWait is recvmsg(2) with MSG_DONTWAIT, which never blocks.
func recvmsgNoWait(fd uintptr, buf, oob []byte) (n, oobn, flags int, err error) {
	iov := unix.Iovec{Base: &buf[0]}
	iov.SetLen(len(buf))
	msg := unix.Msghdr{Iov: &iov}
	msg.SetIovlen(1)
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	r, _, errno := unix.RawSyscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&msg)), unix.MSG_DONTWAIT)
	if errno != 0 {
		return 0, 0, 0, errno
	}
	return int(r), int(msg.Controllen), int(msg.Flags), nil
}
