package handshakes

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Attributes of include/uapi/linux/netfilter/nfnetlink_conntrack.h and
// values of include/uapi/linux/netfilter/nf_conntrack_tcp.h.
const (
	ipctnlMsgCTGet = 1 // IPCTNL_MSG_CT_GET
	nfgenMsgLen    = 4

	ctaTupleOrig  = 1
	ctaTupleReply = 2
	ctaProtoinfo  = 4

	ctaTupleIP    = 1
	ctaTupleProto = 2
	ctaIPv4Src    = 1
	ctaIPv4Dst    = 2
	ctaIPv6Src    = 3
	ctaIPv6Dst    = 4
	ctaProtoNum   = 1
	ctaProtoSport = 2
	ctaProtoDport = 3

	ctaProtoinfoTCP   = 1
	ctaTCPState       = 1
	ctaTCPWScaleOrig  = 2
	ctaTCPWScaleReply = 3
	ctaTCPFlagsOrig   = 4
	ctaTCPFlagsReply  = 5

	// IP_CT_TCP_FLAG_WINDOW_SCALE: that direction's SYN offered a scale.
	ctTCPFlagWindowScale = 0x01
	// IP_CT_TCP_FLAG_BE_LIBERAL: conntrack does not check that
	// direction's windows, as for a connection it picked up mid-stream.
	ctTCPFlagBeLiberal = 0x08

	tcpConntrackSynSent     = 1
	tcpConntrackSynRecv     = 2
	tcpConntrackEstablished = 3
	tcpConntrackFinWait     = 4
	tcpConntrackCloseWait   = 5
	// tcpConntrackSynSent2 is a simultaneous open.
	tcpConntrackSynSent2 = 9
)

// conntrackInto hands into the handshakes of the TCP connections
// conntrack tracks that may still carry data, and the ends of those still
// in their handshake, IPv4 and IPv6. Conntrack keeps each side's scale
// when both SYNs offered one; when either did not, the handshake agreed on
// no scaling. A connection conntrack picked up mid-stream, whose SYNs it
// never saw, is marked liberal instead: it counts as Unknown, unless both
// offers are there all the same (conntrack also marks liberal a connection
// it saw from the start, for flow offload).
//
// An entry cannot tell which side's ACKs leave through the modem link, so
// each yields two handshakes: the originator's, keyed as its packets look
// once translated (the reply tuple reversed), and the responder's, keyed
// as the original tuple reversed. Only the one matching a flow on the link
// is ever used; the collector's onLink (the scanner's), when set, leaves
// the other out. Conntrack is active only in a namespace whose rules use
// it (NAT, state matches); elsewhere it finds nothing.
func (s *Scanner) conntrackInto(into collector) error {
	return s.dumpFamilies("conntrack", unix.NETLINK_NETFILTER, unix.NFNL_SUBSYS_CTNETLINK<<8|ipctnlMsgCTGet,
		func(family uint8) []byte { return []byte{family, unix.NFNETLINK_V0, 0, 0} }, parseConntrackInto, into)
}

func parseConntrackInto(msg []byte, into collector) {
	sides, o, err := parseConntrack(msg)
	into.record(o, err, sides[:]...)
}

// entrySides are the two handshakes of a conntrack entry: the
// originator's, then the responder's.
type entrySides [2]Handshake

// ctTuple is one direction of a conntrack entry.
type ctTuple struct {
	src, dst netip.AddrPort
	proto    uint8
}

// ctTCP is an entry's TCP state.
type ctTCP struct {
	state                 uint8
	scaleOrig, scaleReply uint8
	flagsOrig, flagsReply uint8
	hasState              bool
}

// parseConntrack reads one conntrack entry: the two handshakes it yields,
// settled, or under way with only their ends known; nothing (zero) for an
// entry that is not an open TCP connection, stays on the host, or whose
// scales went unseen (unknownScale).
func parseConntrack(msg []byte) (entrySides, outcome, error) {
	if len(msg) < nfgenMsgLen {
		return entrySides{}, ignored, fmt.Errorf("%w: conntrack message of %d bytes", errMalformed, len(msg))
	}
	var orig, reply ctTuple
	var tcp ctTCP
	var origSeen, replySeen bool
	err := walkAttrs(msg[nfgenMsgLen:], func(typ uint16, value []byte) error {
		var err error
		switch typ {
		case ctaTupleOrig:
			orig, err = parseTuple(value)
			origSeen = true
		case ctaTupleReply:
			reply, err = parseTuple(value)
			replySeen = true
		case ctaProtoinfo:
			tcp, err = parseProtoinfo(value)
		}
		return err
	})
	if err != nil {
		return entrySides{}, ignored, err
	}
	if !origSeen || !replySeen {
		return entrySides{}, ignored, fmt.Errorf("%w: conntrack entry without both tuples", errMalformed)
	}
	if orig.proto != unix.IPPROTO_TCP {
		return entrySides{}, ignored, nil
	}
	if !orig.src.IsValid() || !reply.src.IsValid() || !tcp.hasState {
		return entrySides{}, ignored, fmt.Errorf("%w: TCP conntrack entry without addresses or state", errMalformed)
	}
	if onLoopback(orig.src, orig.dst) || onLoopback(reply.src, reply.dst) {
		return entrySides{}, ignored, nil
	}
	originator := Handshake{Local: reply.dst, Remote: reply.src, Source: FromConntrack}
	responder := Handshake{Local: orig.dst, Remote: orig.src, Source: FromConntrack}
	switch tcp.state {
	case tcpConntrackSynSent, tcpConntrackSynRecv, tcpConntrackSynSent2:
		return entrySides{originator, responder}, underWay, nil
	case tcpConntrackEstablished, tcpConntrackFinWait, tcpConntrackCloseWait:
	default:
		return entrySides{}, ignored, nil
	}
	bothOffered := tcp.flagsOrig&tcp.flagsReply&ctTCPFlagWindowScale != 0
	if bothOffered {
		originator.WScale, responder.WScale = tcp.scaleOrig, tcp.scaleReply
	} else if (tcp.flagsOrig|tcp.flagsReply)&ctTCPFlagBeLiberal != 0 {
		return entrySides{}, unknownScale, nil
	}
	return entrySides{originator, responder}, settled, nil
}

// parseTuple reads a CTA_TUPLE_ORIG or CTA_TUPLE_REPLY. Its addresses stay
// invalid unless both are present.
func parseTuple(b []byte) (ctTuple, error) {
	var t ctTuple
	var src, dst netip.Addr
	var sport, dport uint16
	err := walkAttrs(b, func(typ uint16, value []byte) error {
		var err error
		switch typ {
		case ctaTupleIP:
			src, dst, err = parseTupleIP(value)
		case ctaTupleProto:
			t.proto, sport, dport, err = parseTupleProto(value)
		}
		return err
	})
	if err != nil {
		return ctTuple{}, err
	}
	if src.IsValid() && dst.IsValid() {
		t.src, t.dst = netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	}
	return t, nil
}

// parseTupleIP reads a CTA_TUPLE_IP.
func parseTupleIP(b []byte) (src, dst netip.Addr, err error) {
	err = walkAttrs(b, func(typ uint16, value []byte) error {
		var err error
		switch typ {
		case ctaIPv4Src:
			src, err = addrFrom(afInet, value)
		case ctaIPv4Dst:
			dst, err = addrFrom(afInet, value)
		case ctaIPv6Src:
			src, err = addrFrom(afInet6, value)
		case ctaIPv6Dst:
			dst, err = addrFrom(afInet6, value)
		}
		if err != nil {
			return fmt.Errorf("%w: %w", errMalformed, err)
		}
		return nil
	})
	return src, dst, err
}

// parseTupleProto reads a CTA_TUPLE_PROTO.
func parseTupleProto(b []byte) (proto uint8, sport, dport uint16, err error) {
	err = walkAttrs(b, func(typ uint16, value []byte) error {
		switch typ {
		case ctaProtoNum:
			if len(value) < 1 {
				return fmt.Errorf("%w: empty protocol number", errMalformed)
			}
			proto = value[0]
		case ctaProtoSport, ctaProtoDport:
			if len(value) < 2 {
				return fmt.Errorf("%w: port of %d bytes", errMalformed, len(value))
			}
			if typ == ctaProtoSport {
				sport = binary.BigEndian.Uint16(value)
			} else {
				dport = binary.BigEndian.Uint16(value)
			}
		}
		return nil
	})
	return proto, sport, dport, err
}

// parseProtoinfo reads the TCP part of a CTA_PROTOINFO.
func parseProtoinfo(b []byte) (ctTCP, error) {
	var tcp ctTCP
	err := walkAttrs(b, func(typ uint16, value []byte) error {
		if typ != ctaProtoinfoTCP {
			return nil
		}
		return walkAttrs(value, func(typ uint16, value []byte) error {
			if len(value) < 1 {
				return fmt.Errorf("%w: empty TCP protocol info %d", errMalformed, typ)
			}
			switch typ {
			case ctaTCPState:
				tcp.state, tcp.hasState = value[0], true
			case ctaTCPWScaleOrig:
				tcp.scaleOrig = value[0]
			case ctaTCPWScaleReply:
				tcp.scaleReply = value[0]
			case ctaTCPFlagsOrig:
				// struct nf_ct_tcp_flags: the flags, then a mask
				tcp.flagsOrig = value[0]
			case ctaTCPFlagsReply:
				tcp.flagsReply = value[0]
			}
			return nil
		})
	})
	return tcp, err
}
