package emu

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// maxFrame is the largest frame read: offloads are off on the emulated
// link, so frames are at most MTU plus the Ethernet and VLAN headers.
const maxFrame = 9216

// socketBuffer absorbs bursts between the emulator's wake-ups.
const socketBuffer = 8 << 20

// readTimeout bounds a blocking read so the readers notice cancellation.
const readTimeout = 100 * time.Millisecond

var errTimeout = errors.New("read timeout")

// packetSocket is an AF_PACKET socket bound to one interface, that does not
// see its own transmissions.
type packetSocket struct {
	fd int
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func openPacketSocket(ifname string) (*packetSocket, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", ifname, err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	s := &packetSocket{fd: fd}
	setup := []struct {
		name string
		do   func() error
	}{
		{"ignore outgoing", func() error { return unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1) }},
		{"receive buffer", func() error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, socketBuffer) }},
		{"send buffer", func() error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, socketBuffer) }},
		{"read timeout", func() error {
			tv := unix.NsecToTimeval(readTimeout.Nanoseconds())
			return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		}},
		{"bind", func() error {
			return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
		}},
	}
	for _, step := range setup {
		if err := step.do(); err != nil {
			s.close()
			return nil, fmt.Errorf("packet socket on %s: %s: %w", ifname, step.name, err)
		}
	}
	return s, nil
}

func (s *packetSocket) read(buf []byte) (int, error) {
	for {
		n, _, err := unix.Recvfrom(s.fd, buf, 0)
		switch {
		case err == nil:
			return n, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return 0, errTimeout
		default:
			return 0, err
		}
	}
}

func (s *packetSocket) write(frame []byte) error {
	for {
		_, err := unix.Write(s.fd, frame)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func (s *packetSocket) close() { unix.Close(s.fd) }
