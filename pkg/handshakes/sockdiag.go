package handshakes

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Layouts of include/uapi/linux/inet_diag.h and include/uapi/linux/tcp.h.
const (
	inetDiagReqV2Len = 56 // struct inet_diag_req_v2
	inetDiagMsgLen   = 72 // struct inet_diag_msg
	inetDiagInfo     = 2  // INET_DIAG_INFO: struct tcp_info
	// offsets in struct inet_diag_msg
	diagFamily = 0
	diagState  = 1
	diagSport  = 4
	diagDport  = 6
	diagSrc    = 8
	diagDst    = 24
	// offsets in struct tcp_info
	tcpInfoOptions = 5  // tcpi_options
	tcpInfoScales  = 6  // tcpi_snd_wscale : 4, tcpi_rcv_wscale : 4
	tcpInfoAdvMSS  = 84 // tcpi_advmss
	tcpInfoMinLen  = tcpInfoAdvMSS + 4
	tcpiOptWScale  = 4 // TCPI_OPT_WSCALE
)

// TCP states (include/net/tcp_states.h).
const (
	tcpEstablished = 1
	tcpSynSent     = 2
	tcpSynRecv     = 3
	tcpFinWait1    = 4
	tcpFinWait2    = 5
	// tcpNewSynRecv is a listener's request socket; sock_diag reports it
	// as tcpSynRecv.
	tcpNewSynRecv = 12
)

// dumpedStates, as a sock_diag state mask: the states in which a socket
// may still receive data and acknowledge it, and those of a handshake
// under way.
const dumpedStates = 1<<tcpEstablished | 1<<tcpFinWait1 | 1<<tcpFinWait2 |
	1<<tcpSynSent | 1<<tcpSynRecv | 1<<tcpNewSynRecv

// Sockets lists the handshakes of the host's TCP sockets that still
// receive, and the ends of those still in their handshake, IPv4 and IPv6
// (an IPv6 socket talking IPv4 comes with its IPv4 addresses). Loopback
// connections are left out.
func (s *Scanner) Sockets() (Found, error) {
	var found Found
	err := s.socketsInto(gathering(&found, s.onLink))
	return found, err
}

func (s *Scanner) socketsInto(into collector) error {
	return s.dumpFamilies("sock_diag", unix.NETLINK_INET_DIAG, unix.SOCK_DIAG_BY_FAMILY, socketRequest, parseSocketInto, into)
}

// socketRequest is a struct inet_diag_req_v2 asking for every TCP socket
// of family in dumpedStates, with its struct tcp_info.
func socketRequest(family uint8) []byte {
	req := make([]byte, inetDiagReqV2Len)
	req[0] = family
	req[1] = unix.IPPROTO_TCP
	req[2] = 1 << (inetDiagInfo - 1)
	binary.NativeEndian.PutUint32(req[4:], dumpedStates)
	return req
}

func parseSocketInto(msg []byte, into collector) {
	h, o, err := parseSocket(msg)
	into.record(o, err, h)
}

// parseSocket reads one struct inet_diag_msg with its attributes: a socket
// whose handshake is over, with its struct tcp_info, or one whose
// handshake is under way, of which only the ends count (a request socket
// comes without the info).
func parseSocket(msg []byte) (Handshake, outcome, error) {
	if len(msg) < inetDiagMsgLen {
		return Handshake{}, ignored, fmt.Errorf("%w: inet_diag_msg of %d bytes", errMalformed, len(msg))
	}
	family := msg[diagFamily]
	src, err := addrFrom(family, msg[diagSrc:diagDst])
	if err != nil {
		return Handshake{}, ignored, fmt.Errorf("%w: %w", errMalformed, err)
	}
	dst, err := addrFrom(family, msg[diagDst:diagDst+16])
	if err != nil {
		return Handshake{}, ignored, fmt.Errorf("%w: %w", errMalformed, err)
	}
	var info []byte
	err = walkAttrs(msg[inetDiagMsgLen:], func(typ uint16, value []byte) error {
		if typ == inetDiagInfo {
			info = value
		}
		return nil
	})
	if err != nil {
		return Handshake{}, ignored, err
	}
	h := Handshake{
		Local:  netip.AddrPortFrom(src, binary.BigEndian.Uint16(msg[diagSport:])),
		Remote: netip.AddrPortFrom(dst, binary.BigEndian.Uint16(msg[diagDport:])),
		Source: FromSocket,
	}
	if onLoopback(h.Local, h.Remote) {
		return Handshake{}, ignored, nil
	}
	switch msg[diagState] {
	case tcpSynSent, tcpSynRecv:
		return h, underWay, nil
	}
	if len(info) < tcpInfoMinLen {
		return Handshake{}, ignored, fmt.Errorf("%w: tcp_info of %d bytes", errMalformed, len(info))
	}
	if info[tcpInfoOptions]&tcpiOptWScale != 0 {
		h.WScale = receiveScale(info[tcpInfoScales])
	}
	h.MSS = uint16(min(binary.NativeEndian.Uint32(info[tcpInfoAdvMSS:]), 0xffff))
	return h, settled, nil
}

// receiveScale reads tcpi_rcv_wscale, the second of two 4-bit fields in
// one byte: C puts the first field of a byte in its low bits on
// little-endian targets and in its high bits on big-endian ones.
func receiveScale(scales byte) uint8 {
	if littleEndian {
		return scales >> 4
	}
	return scales & 0x0f
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1
