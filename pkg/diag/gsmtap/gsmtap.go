// Package gsmtap reads RRC messages that QCSuper and SCAT forward from a
// Qualcomm modem as GSMTAP over UDP (port 4729); live or from pcap/pcapng.
// QCSuper forwards NR RRC as raw NR RRC OTA log payloads (port 47928),
// which a qcdiag.RRCJoiner reads, joining their segments.
package gsmtap

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
)

// UDP ports.
const (
	// Port is the IANA GSMTAP port.
	Port = 4729
	// QCSuperNRPort carries QCSuper's raw NR RRC OTA payloads.
	QCSuperNRPort = 47928
)

// SCATBaseAddr is where SCAT sends the first SIM subscription's GSMTAP
// by default, and the address its pcap files always name; the second
// subscription's goes to the next address (127.0.0.2).
var SCATBaseAddr = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// Subscription is the SIM subscription (0 for the first) of a datagram
// sent to dst by a sender whose first subscription goes to base, as SCAT
// addresses multi-SIM modems: base, then base+1. Other addresses are 0.
func Subscription(base, dst netip.Addr) uint8 {
	if !base.Is4() || !dst.Is4() {
		return 0
	}
	b, d := base.As4(), dst.As4()
	if b[0] != d[0] || b[1] != d[1] || b[2] != d[2] || d[3] < b[3] {
		return 0
	}
	return d[3] - b[3]
}

// Payload types of the GSMTAP versions read here (libosmocore gsmtap.h
// for version 2; the version 3 draft as SCAT writes it).
const (
	typeV2LTERRC = 0x0D
	typeV3LTERRC = 0x0403
	typeV3NRRRC  = 0x0503
)

// Error reasons, carried by the *diag.ParseError values returned here.
const (
	ReasonMalformed      = "gsmtap_malformed"
	ReasonUnknownVersion = "gsmtap_version"
	ReasonUnknownSubtype = "gsmtap_subtype"
)

// Header layout.
const (
	// v2MinHeaderWords: the v2 header is at least 16 bytes.
	v2MinHeaderWords = 4
	// v2ARFCNMask drops the PCS and uplink flags from the v2 ARFCN.
	v2ARFCNMask      = 0x3FFF
	v3FixedHeaderLen = 8
	// v3 metadata tags and their value lengths.
	v3TagTimestamp     = 0x0000
	v3TagChannelNumber = 0x0002
	v3TagPCI           = 0x0005
	v3TagEndOfMetadata = 0xFFFE
	// v3TagLen and v3LengthLen: every tag is 16 bits, and every tag but
	// the end tag is followed by a 16-bit length.
	v3TagLen           = 2
	v3LengthLen        = 2
	v3TimestampLen     = 12
	v3ChannelNumberLen = 4
	v3PCILen           = 2
)

func malformed(format string, args ...any) error {
	return &diag.ParseError{Reason: ReasonMalformed, Err: fmt.Errorf(format, args...)}
}

// v2LTEChannels maps GSMTAP v2 LTE RRC subtypes (libosmocore
// gsmtap_lte_rrc_types) to channels; the MBMS, sidelink and NB-IoT ones
// are valid but not read by M2HO.
var v2LTEChannels = map[uint8]diag.RRCChannel{
	0: diag.ChannelDLCCCH, 1: diag.ChannelDLDCCH, 2: diag.ChannelULCCCH, 3: diag.ChannelULDCCH,
	4: diag.ChannelBCCHBCH, 5: diag.ChannelBCCHDLSCH, 6: diag.ChannelPCCH,
}

// v2LTELastSubtype is the last LTE RRC subtype libosmocore defines
// (SC-MCCH NB); above it a subtype is unknown rather than unused.
const v2LTELastSubtype = 22

// v3 subtypes of LTE RRC and NR RRC (SCAT util.py gsmtapv3_*_rrc_types).
var (
	v3LTEChannels = map[uint16]diag.RRCChannel{
		0x01: diag.ChannelBCCHBCH, 0x03: diag.ChannelBCCHDLSCH, 0x07: diag.ChannelPCCH,
		0x08: diag.ChannelDLCCCH, 0x09: diag.ChannelDLDCCH, 0x0A: diag.ChannelULCCCH, 0x0B: diag.ChannelULDCCH,
	}
	v3NRChannels = map[uint16]diag.RRCChannel{
		0x01: diag.ChannelBCCHBCH, 0x02: diag.ChannelBCCHDLSCH, 0x03: diag.ChannelDLCCCH,
		0x04: diag.ChannelDLDCCH, 0x06: diag.ChannelPCCH, 0x07: diag.ChannelULCCCH, 0x09: diag.ChannelULDCCH,
		0x0201: diag.ChannelRRCReconfiguration, 0x0202: diag.ChannelRRCReconfigurationComplete,
	}
)

// Parse reads one GSMTAP datagram. It returns (_, false, nil) for GSMTAP
// of other payload types (GSM, UMTS, NAS, ...) and for RRC channels M2HO
// does not read. Time is set only when the header carries one (v3), the
// PCI only in v3 (v2 messages have PCIUnknown set). The PDU aliases
// udpPayload.
func Parse(udpPayload []byte) (diag.RRCMessage, bool, error) {
	if len(udpPayload) < 2 {
		return diag.RRCMessage{}, false, malformed("%d bytes", len(udpPayload))
	}
	switch udpPayload[0] {
	case 2:
		return parseV2(udpPayload)
	case 3:
		return parseV3(udpPayload)
	}
	return diag.RRCMessage{}, false, &diag.ParseError{Reason: ReasonUnknownVersion, Err: fmt.Errorf("gsmtap version %d", udpPayload[0])}
}

// parseV2: version, header length in 32-bit words, type, timeslot,
// ARFCN (16 bits, flags in the top two), signal, SNR, frame number (32),
// subtype, antenna, subslot, reserved.
func parseV2(b []byte) (diag.RRCMessage, bool, error) {
	hdrLen := int(b[1]) * 4
	if hdrLen < v2MinHeaderWords*4 || len(b) < hdrLen {
		return diag.RRCMessage{}, false, malformed("v2 header length %d of %d bytes", hdrLen, len(b))
	}
	if b[2] != typeV2LTERRC {
		return diag.RRCMessage{}, false, nil
	}
	subtype := b[12]
	ch, ok := v2LTEChannels[subtype]
	if !ok {
		if subtype <= v2LTELastSubtype {
			return diag.RRCMessage{}, false, nil
		}
		return diag.RRCMessage{}, false, &diag.ParseError{Reason: ReasonUnknownSubtype, Err: fmt.Errorf("lte rrc subtype %d", subtype)}
	}
	if len(b) == hdrLen {
		return diag.RRCMessage{}, false, malformed("v2 lte rrc without pdu")
	}
	return diag.RRCMessage{
		RAT:        diag.RATLTE,
		Channel:    ch,
		ARFCN:      uint32(binary.BigEndian.Uint16(b[4:]) & v2ARFCNMask),
		PCIUnknown: true,
		PDU:        b[hdrLen:],
	}, true, nil
}

// parseV3: version, reserved, header length in 32-bit words (metadata
// included), type (16), subtype (16), then a chain of tag-length-value
// metadata closed by the end-of-metadata tag, which has no length.
//
// The stated length is the header rounded up to whole words, but SCAT
// sends no padding: with 54 bytes of header it states 56 and the PDU
// starts at byte 54. The header therefore ends where the chain ends, at
// the end tag. A header padded to its stated length (a producer that
// pads, or one that stops the chain at the padding without an end tag)
// is read too: padding is less than a word after the last tag, or is
// stated explicitly by a header length a word or more beyond the end tag.
// Less than a word of zeros after an end tag reads as SCAT's layout, the
// one producer known: those bytes start the PDU.
func parseV3(b []byte) (diag.RRCMessage, bool, error) {
	if len(b) < v3FixedHeaderLen {
		return diag.RRCMessage{}, false, malformed("v3: %d bytes", len(b))
	}
	statedLen := int(binary.BigEndian.Uint16(b[2:])) * 4
	if statedLen < v3FixedHeaderLen || len(b) < statedLen {
		return diag.RRCMessage{}, false, malformed("v3 header length %d of %d bytes", statedLen, len(b))
	}
	typ, subtype := binary.BigEndian.Uint16(b[4:]), binary.BigEndian.Uint16(b[6:])
	var msg diag.RRCMessage
	var ch diag.RRCChannel
	var ok bool
	switch typ {
	case typeV3LTERRC:
		msg.RAT = diag.RATLTE
		ch, ok = v3LTEChannels[subtype]
	case typeV3NRRRC:
		msg.RAT = diag.RATNR
		ch, ok = v3NRChannels[subtype]
	default:
		return diag.RRCMessage{}, false, nil
	}
	if !ok {
		// Subtypes M2HO does not read (MCCH, sidelink, capabilities, SIB
		// containers) and unassigned ones look alike; neither is an error
		// of the transport.
		return diag.RRCMessage{}, false, nil
	}
	msg.Channel = ch
	hdrLen, err := readV3Metadata(b[:statedLen], &msg)
	if err != nil {
		return diag.RRCMessage{}, false, err
	}
	if len(b) == hdrLen {
		return diag.RRCMessage{}, false, malformed("v3 rrc without pdu")
	}
	msg.PDU = b[hdrLen:]
	return msg, true, nil
}

// readV3Metadata walks the metadata chain of the header hdr (cut at its
// stated length) and returns where the PDU starts.
func readV3Metadata(hdr []byte, msg *diag.RRCMessage) (int, error) {
	statedLen := len(hdr)
	for p := v3FixedHeaderLen; ; {
		if statedLen-p < v3TagLen+v3LengthLen {
			if statedLen-p >= v3TagLen && binary.BigEndian.Uint16(hdr[p:]) == v3TagEndOfMetadata {
				return p + v3TagLen, nil
			}
			// No end tag: what is left is padding to the stated length.
			return statedLen, nil
		}
		tag := binary.BigEndian.Uint16(hdr[p:])
		if tag == v3TagEndOfMetadata {
			end := p + v3TagLen
			if statedLen-end >= 4 {
				// Padded beyond the rounding on purpose.
				return statedLen, nil
			}
			return end, nil
		}
		n := int(binary.BigEndian.Uint16(hdr[p+v3TagLen:]))
		p += v3TagLen + v3LengthLen
		if n > statedLen-p {
			return 0, malformed("v3 metadata tag 0x%04X: %d bytes of %d", tag, n, statedLen-p)
		}
		v := hdr[p : p+n]
		p += n
		switch {
		case tag == v3TagTimestamp && n == v3TimestampLen:
			sec, nsec := binary.BigEndian.Uint64(v), binary.BigEndian.Uint32(v[8:])
			if sec > 1<<40 || nsec >= 1e9 {
				return 0, malformed("v3 timestamp %d s %d ns", sec, nsec)
			}
			msg.Time = time.Unix(int64(sec), int64(nsec)).UTC()
		case tag == v3TagChannelNumber && n == v3ChannelNumberLen:
			msg.ARFCN = binary.BigEndian.Uint32(v)
		case tag == v3TagPCI && n == v3PCILen:
			msg.PCI = binary.BigEndian.Uint16(v)
		}
	}
}
