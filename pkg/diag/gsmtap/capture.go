package gsmtap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Datagram is one UDP datagram of a capture.
type Datagram struct {
	Time    time.Time
	DstAddr netip.Addr
	DstPort uint16
	Payload []byte
}

// pcapngMagic starts a pcapng file (its section header block type).
var pcapngMagic = []byte{0x0A, 0x0D, 0x0D, 0x0A}

type packetSource interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
}

// ReadCapture calls fn for every UDP datagram of a pcap or pcapng stream
// (any link type gopacket decodes: raw IP, Ethernet, Linux cooked, ...),
// stopping at the first error fn returns. Packets that are not UDP over IP
// are skipped; skipped reports how many could not be decoded at all.
func ReadCapture(r io.Reader, fn func(Datagram) error) (skipped int, err error) {
	br := bufio.NewReader(r)
	head, err := br.Peek(4)
	if err != nil {
		return 0, fmt.Errorf("read capture header: %w", err)
	}
	var src packetSource
	var linkType func() layers.LinkType
	if bytes.Equal(head, pcapngMagic) {
		ng, err := pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			return 0, fmt.Errorf("read pcapng: %w", err)
		}
		src, linkType = ng, ng.LinkType
	} else {
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return 0, fmt.Errorf("read pcap: %w", err)
		}
		src, linkType = pr, pr.LinkType
	}
	for {
		data, ci, err := src.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return skipped, nil
		}
		if err != nil {
			return skipped, fmt.Errorf("read capture packet: %w", err)
		}
		pkt := gopacket.NewPacket(data, decoderFor(linkType()), gopacket.DecodeOptions{NoCopy: true, Lazy: true})
		udpLayer := pkt.Layer(layers.LayerTypeUDP)
		if udpLayer == nil {
			if pkt.ErrorLayer() != nil {
				skipped++
			}
			continue
		}
		udp := udpLayer.(*layers.UDP)
		var dst netip.Addr
		switch ip := pkt.NetworkLayer().(type) {
		case *layers.IPv4:
			dst, _ = netip.AddrFromSlice(ip.DstIP.To4())
		case *layers.IPv6:
			dst, _ = netip.AddrFromSlice(ip.DstIP)
		}
		if err := fn(Datagram{Time: ci.Timestamp.UTC(), DstAddr: dst, DstPort: uint16(udp.DstPort), Payload: udp.Payload}); err != nil {
			return skipped, err
		}
	}
}

// Raw IP link types (pcap LINKTYPE_IPV4 and LINKTYPE_IPV6) that QCSuper
// writes and gopacket does not register as link types.
const (
	linkTypeIPv4 layers.LinkType = 228
	linkTypeIPv6 layers.LinkType = 229
)

func decoderFor(lt layers.LinkType) gopacket.Decoder {
	switch lt {
	case linkTypeIPv4:
		return layers.LayerTypeIPv4
	case linkTypeIPv6:
		return layers.LayerTypeIPv6
	}
	return lt
}
