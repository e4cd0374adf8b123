package nstest

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// ConntrackEntry is an established TCP connection for a namespace's
// conntrack table. Orig and Reply are its two directions, each a source
// and a destination; a Reply that is not Orig reversed is a connection
// through NAT. Each side offered the window scale it has.
type ConntrackEntry struct {
	Orig, Reply             [2]netip.AddrPort
	WScaleOrig, WScaleReply uint8
}

// Attributes and values of include/uapi/linux/netfilter/nfnetlink_conntrack.h
// and nf_conntrack_tcp.h that the vishvananda/netlink package does not name.
const (
	ipctnlMsgCTNew           = 0
	ctaProtoinfoTCPWScaleOrg = 2
	ctaProtoinfoTCPWScaleRep = 3
	ctaProtoinfoTCPFlagsOrg  = 4
	ctaProtoinfoTCPFlagsRep  = 5
	tcpConntrackEstablished  = 3
	// IP_CT_TCP_FLAG_WINDOW_SCALE and IP_CT_TCP_FLAG_SACK_PERM
	ctTCPFlagsOffered = 0x01 | 0x02
	// conntrackTimeout keeps the entries for the length of a test
	conntrackTimeout = 3600
	// conntrackBatch is how many requests go in one write.
	conntrackBatch = 256
)

// AddConntrackEntries enters entries in the namespace's conntrack table
// through ctnetlink, as if its rules had seen their handshakes, and fails
// at the first the kernel refuses.
func (n *NS) AddConntrackEntries(entries []ConntrackEntry) error {
	return n.Do(func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return fmt.Errorf("ctnetlink socket: %w", err)
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return fmt.Errorf("ctnetlink bind: %w", err)
		}
		for start := 0; start < len(entries); start += conntrackBatch {
			batch := entries[start:min(start+conntrackBatch, len(entries))]
			var msgs []byte
			for i, e := range batch {
				msg, err := conntrackNew(e, uint32(start+i+1))
				if err != nil {
					return err
				}
				msgs = append(msgs, msg...)
			}
			if _, err := unix.Write(fd, msgs); err != nil {
				return fmt.Errorf("ctnetlink write: %w", err)
			}
			if err := readAcks(fd, len(batch)); err != nil {
				return err
			}
		}
		return nil
	})
}

// conntrackNew is the IPCTNL_MSG_CT_NEW request that creates e, asking for
// an acknowledgement.
func conntrackNew(e ConntrackEntry, seq uint32) ([]byte, error) {
	family := uint8(unix.AF_INET6)
	if e.Orig[0].Addr().Is4() {
		family = unix.AF_INET
	}
	for _, ap := range [...]netip.AddrPort{e.Orig[0], e.Orig[1], e.Reply[0], e.Reply[1]} {
		if ap.Addr().Is4() != (family == unix.AF_INET) {
			return nil, fmt.Errorf("conntrack entry %v mixes address families", e)
		}
	}
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_CTNETLINK<<8|ipctnlMsgCTNew,
		unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	req.Seq = seq
	req.AddData(&nl.Nfgenmsg{NfgenFamily: family, Version: unix.NFNETLINK_V0})
	req.AddData(conntrackTuple(nl.CTA_TUPLE_ORIG, e.Orig))
	req.AddData(conntrackTuple(nl.CTA_TUPLE_REPLY, e.Reply))
	req.AddData(nl.NewRtAttr(nl.CTA_TIMEOUT, nl.BEUint32Attr(conntrackTimeout)))
	info := nl.NewRtAttr(unix.NLA_F_NESTED|nl.CTA_PROTOINFO, nil)
	tcp := info.AddRtAttr(unix.NLA_F_NESTED|nl.CTA_PROTOINFO_TCP, nil)
	tcp.AddRtAttr(nl.CTA_PROTOINFO_TCP_STATE, nl.Uint8Attr(tcpConntrackEstablished))
	tcp.AddRtAttr(ctaProtoinfoTCPWScaleOrg, nl.Uint8Attr(e.WScaleOrig))
	tcp.AddRtAttr(ctaProtoinfoTCPWScaleRep, nl.Uint8Attr(e.WScaleReply))
	// struct nf_ct_tcp_flags: the flags, then the mask of those to set
	tcp.AddRtAttr(ctaProtoinfoTCPFlagsOrg, []byte{ctTCPFlagsOffered, ctTCPFlagsOffered})
	tcp.AddRtAttr(ctaProtoinfoTCPFlagsRep, []byte{ctTCPFlagsOffered, ctTCPFlagsOffered})
	req.AddData(info)
	return req.Serialize(), nil
}

func conntrackTuple(which int, ends [2]netip.AddrPort) *nl.RtAttr {
	src, dst := nl.CTA_IP_V6_SRC, nl.CTA_IP_V6_DST
	if ends[0].Addr().Is4() {
		src, dst = nl.CTA_IP_V4_SRC, nl.CTA_IP_V4_DST
	}
	tuple := nl.NewRtAttr(unix.NLA_F_NESTED|which, nil)
	ip := tuple.AddRtAttr(unix.NLA_F_NESTED|nl.CTA_TUPLE_IP, nil)
	ip.AddRtAttr(src, ends[0].Addr().AsSlice())
	ip.AddRtAttr(dst, ends[1].Addr().AsSlice())
	proto := tuple.AddRtAttr(unix.NLA_F_NESTED|nl.CTA_TUPLE_PROTO, nil)
	proto.AddRtAttr(nl.CTA_PROTO_NUM, nl.Uint8Attr(unix.IPPROTO_TCP))
	proto.AddRtAttr(nl.CTA_PROTO_SRC_PORT, nl.BEUint16Attr(ends[0].Port()))
	proto.AddRtAttr(nl.CTA_PROTO_DST_PORT, nl.BEUint16Attr(ends[1].Port()))
	return tuple
}

// readAcks reads the acknowledgements of n requests and returns the first
// error the kernel reports.
func readAcks(fd int, n int) error {
	buf := make([]byte, 1<<16)
	var firstErr error
	for n > 0 {
		got, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("ctnetlink read: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:got])
		if err != nil {
			return fmt.Errorf("ctnetlink reply: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
				continue
			}
			n--
			if errno := -int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 && firstErr == nil {
				firstErr = fmt.Errorf("ctnetlink refused entry %d: %w", m.Header.Seq, unix.Errno(errno))
			}
		}
	}
	return firstErr
}
