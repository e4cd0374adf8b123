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

// receivingStates are the TCP states in which a socket may still receive
// data and acknowledge it: ESTABLISHED, FIN_WAIT1 and FIN_WAIT2
// (include/net/tcp_states.h), as a sock_diag state mask.
const receivingStates = 1<<1 | 1<<4 | 1<<5

// Sockets lists the handshakes of the host's TCP sockets that still
// receive, IPv4 and IPv6 (an IPv6 socket talking IPv4 comes with its
// IPv4 addresses). Loopback connections are left out.
func Sockets() (Found, error) {
	return dumpFamilies("sock_diag", unix.NETLINK_INET_DIAG, unix.SOCK_DIAG_BY_FAMILY, socketRequest, parseSocketInto)
}

// socketRequest is a struct inet_diag_req_v2 asking for every receiving
// TCP socket of family with its struct tcp_info.
func socketRequest(family uint8) []byte {
	req := make([]byte, inetDiagReqV2Len)
	req[0] = family
	req[1] = unix.IPPROTO_TCP
	req[2] = 1 << (inetDiagInfo - 1)
	binary.NativeEndian.PutUint32(req[4:], receivingStates)
	return req
}

func parseSocketInto(msg []byte, into *Found) {
	h, ok, err := parseSocket(msg)
	switch {
	case err != nil:
		into.Malformed++
	case ok:
		into.Handshakes = append(into.Handshakes, h)
	}
}

// parseSocket reads one struct inet_diag_msg with its attributes. It says
// false, without error, for a loopback connection.
func parseSocket(msg []byte) (Handshake, bool, error) {
	if len(msg) < inetDiagMsgLen {
		return Handshake{}, false, fmt.Errorf("%w: inet_diag_msg of %d bytes", errMalformed, len(msg))
	}
	family := msg[diagFamily]
	src, err := addrFrom(family, msg[diagSrc:diagDst])
	if err != nil {
		return Handshake{}, false, fmt.Errorf("%w: %w", errMalformed, err)
	}
	dst, err := addrFrom(family, msg[diagDst:diagDst+16])
	if err != nil {
		return Handshake{}, false, fmt.Errorf("%w: %w", errMalformed, err)
	}
	var info []byte
	err = walkAttrs(msg[inetDiagMsgLen:], func(typ uint16, value []byte) error {
		if typ == inetDiagInfo {
			info = value
		}
		return nil
	})
	if err != nil {
		return Handshake{}, false, err
	}
	if len(info) < tcpInfoMinLen {
		return Handshake{}, false, fmt.Errorf("%w: tcp_info of %d bytes", errMalformed, len(info))
	}
	h := Handshake{
		Local:  netip.AddrPortFrom(src, binary.BigEndian.Uint16(msg[diagSport:])),
		Remote: netip.AddrPortFrom(dst, binary.BigEndian.Uint16(msg[diagDport:])),
		Source: FromSocket,
	}
	if onLoopback(h.Local, h.Remote) {
		return Handshake{}, false, nil
	}
	if info[tcpInfoOptions]&tcpiOptWScale != 0 {
		h.WScale = receiveScale(info[tcpInfoScales])
	}
	h.MSS = uint16(min(binary.NativeEndian.Uint32(info[tcpInfoAdvMSS:]), 0xffff))
	return h, true, nil
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
