package qcdiag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/m2ho/m2ho/pkg/diag"
)

// Log codes with a layout in this package.
const (
	CodeLTERRCOTA uint16 = 0xB0C0
	CodeNRRRCOTA  uint16 = 0xB821
)

// Error reasons of the RRC layer, carried by the *diag.ParseError values
// that RRCJoiner returns.
const (
	ReasonMalformedRRC   = "malformed_rrc_log"
	ReasonUnknownRRCPDU  = "unknown_rrc_pdu_type"
	ReasonRRCSegmentLost = "rrc_segment_lost"
)

// Sentinel errors wrapped in the *diag.ParseError values returned here.
var (
	// ErrUnknownVersion: a known code in a version without a layout here.
	ErrUnknownVersion = errors.New("unknown log packet version")
	// ErrUnknownPDU: a PDU number the version's table does not list.
	ErrUnknownPDU = errors.New("unknown rrc pdu number")
)

// rrcHeader is what an RRC OTA log packet header says about its PDU.
type rrcHeader struct {
	pci       uint16
	arfcn     uint32
	pduNumber uint8
	// segment is 0 for a whole PDU, 1..6 for leading parts and 7 for the
	// last part of a segmented one.
	segment uint8
}

// lastSegment is the segment number of the final part of a PDU.
const lastSegment = 7

// rrcFormat is the header layout of one range of packet versions.
type rrcFormat struct {
	headerLen                    int
	pciAt, arfcnAt, pduAt, lenAt int
	arfcnWidth                   int // bytes: 2 or 4
	segmentAt                    int // 0: not segmented
}

// rrcLayout describes one RRC OTA log code: how to read its version, which
// header layout each version uses and how its PDU numbers map to channels.
type rrcLayout struct {
	rat     diag.RAT
	version func(payload []byte) (uint32, bool)
	format  func(version uint32) (rrcFormat, bool)
	pdus    func(version uint32) (*pduTable, bool)
}

var rrcLayouts = map[uint16]rrcLayout{
	CodeLTERRCOTA: {rat: diag.RATLTE, version: lteVersion, format: lteFormat, pdus: ltePDUs},
	CodeNRRRCOTA:  {rat: diag.RATNR, version: nrVersion, format: nrFormat, pdus: nrPDUs},
}

// classify returns the packet version (as LogPacket carries it) and
// whether the code and version are understood.
func classify(code uint16, payload []byte) (uint8, LayoutStatus) {
	l, ok := rrcLayouts[code]
	if !ok {
		return 0, LayoutUnknownCode
	}
	v, ok := l.version(payload)
	if !ok {
		return 0, LayoutUnknownVersion
	}
	if _, known := l.pdus(v); !known {
		return uint8(v), LayoutUnknownVersion
	}
	if _, known := l.format(v); !known {
		return uint8(v), LayoutUnknownVersion
	}
	return uint8(v), LayoutKnown
}

// The LTE RRC OTA packet (0xB0C0) starts with a one-byte version. Header
// layouts and PDU numbers per version follow the public parsers SCAT
// (fgsect/scat, diagltelogparser.py) and MobileInsight (log_packet.h),
// checked against the shared captures (versions 8, 9 and 26).
func lteVersion(p []byte) (uint32, bool) {
	if len(p) < 1 {
		return 0, false
	}
	return uint32(p[0]), true
}

func lteFormat(v uint32) (rrcFormat, bool) {
	switch {
	case v >= 30:
		return rrcFormat{headerLen: 24, pciAt: 6, arfcnAt: 8, arfcnWidth: 4, pduAt: 14, lenAt: 19, segmentAt: 23}, true
	case v >= 25:
		return rrcFormat{headerLen: 21, pciAt: 6, arfcnAt: 8, arfcnWidth: 4, pduAt: 14, lenAt: 19}, true
	case v >= 8:
		return rrcFormat{headerLen: 19, pciAt: 4, arfcnAt: 6, arfcnWidth: 4, pduAt: 12, lenAt: 17}, true
	case v >= 5:
		return rrcFormat{headerLen: 17, pciAt: 4, arfcnAt: 6, arfcnWidth: 2, pduAt: 10, lenAt: 15}, true
	case v >= 2:
		return rrcFormat{headerLen: 13, pciAt: 4, arfcnAt: 6, arfcnWidth: 2, pduAt: 10, lenAt: 11}, true
	}
	return rrcFormat{}, false
}

// pduTable maps the PDU numbers of one range of versions to channels.
// Other lists the valid PDU numbers of channels M2HO does not read (MCCH,
// NB-IoT, UL-CCCH1, capability and radio bearer containers): they are
// skipped without being counted as unknown.
type pduTable struct {
	channels map[uint8]diag.RRCChannel
	other    []uint8
}

var (
	ltePDUsClassic = &pduTable{channels: map[uint8]diag.RRCChannel{
		1: diag.ChannelBCCHBCH, 2: diag.ChannelBCCHDLSCH, 4: diag.ChannelPCCH, 5: diag.ChannelDLCCCH,
		6: diag.ChannelDLDCCH, 7: diag.ChannelULCCCH, 8: diag.ChannelULDCCH,
	}, other: []uint8{3}}
	ltePDUsV9 = &pduTable{channels: map[uint8]diag.RRCChannel{
		8: diag.ChannelBCCHBCH, 9: diag.ChannelBCCHDLSCH, 11: diag.ChannelPCCH, 12: diag.ChannelDLCCCH,
		13: diag.ChannelDLDCCH, 14: diag.ChannelULCCCH, 15: diag.ChannelULDCCH,
	}, other: []uint8{10}}
	ltePDUsV14 = &pduTable{channels: map[uint8]diag.RRCChannel{
		1: diag.ChannelBCCHBCH, 2: diag.ChannelBCCHDLSCH, 5: diag.ChannelPCCH, 6: diag.ChannelDLCCCH,
		7: diag.ChannelDLDCCH, 8: diag.ChannelULCCCH, 9: diag.ChannelULDCCH,
	}, other: []uint8{4, 54, 55, 56, 57, 58, 59, 61}}
	ltePDUsV19 = &pduTable{channels: map[uint8]diag.RRCChannel{
		1: diag.ChannelBCCHBCH, 3: diag.ChannelBCCHDLSCH, 7: diag.ChannelPCCH, 8: diag.ChannelDLCCCH,
		9: diag.ChannelDLDCCH, 10: diag.ChannelULCCCH, 11: diag.ChannelULDCCH,
	}, other: []uint8{6, 45, 46, 47, 48, 49, 50, 52}}
)

func ltePDUs(v uint32) (*pduTable, bool) {
	switch v {
	case 2, 3, 4, 6, 7, 8, 13, 22:
		return ltePDUsClassic, true
	case 9, 12:
		return ltePDUsV9, true
	case 14, 15, 16, 20, 24, 25:
		return ltePDUsV14, true
	case 19, 26, 27, 29, 30:
		return ltePDUsV19, true
	}
	return nil, false
}

// The NR RRC OTA packet (0xB821) starts with a 32-bit version. Layouts
// follow SCAT (diagnrlogparser.py) for versions 9 to 26 and MobileInsight
// for 7 and 8, which share the version 9 header; version 8 PDU numbers 1,
// 8, 9 and 10 were checked against the shared Xiaomi Mi 10 captures.
func nrVersion(p []byte) (uint32, bool) {
	if len(p) < 4 {
		return 0, false
	}
	return binary.LittleEndian.Uint32(p), true
}

func nrFormat(v uint32) (rrcFormat, bool) {
	switch v {
	case 7, 8, 9:
		return rrcFormat{headerLen: 24, pciAt: 7, arfcnAt: 9, arfcnWidth: 4, pduAt: 17, lenAt: 22}, true
	case 12, 14:
		return rrcFormat{headerLen: 23, pciAt: 7, arfcnAt: 9, arfcnWidth: 4, pduAt: 16, lenAt: 21}, true
	case 17:
		return rrcFormat{headerLen: 31, pciAt: 7, arfcnAt: 17, arfcnWidth: 4, pduAt: 24, lenAt: 29}, true
	case 19, 20:
		return rrcFormat{headerLen: 32, pciAt: 7, arfcnAt: 17, arfcnWidth: 4, pduAt: 24, lenAt: 29}, true
	case 23, 26:
		return rrcFormat{headerLen: 35, pciAt: 7, arfcnAt: 17, arfcnWidth: 4, pduAt: 24, lenAt: 29, segmentAt: 34}, true
	}
	return rrcFormat{}, false
}

var (
	nrChannelsV9 = map[uint8]diag.RRCChannel{
		1: diag.ChannelBCCHBCH, 2: diag.ChannelBCCHDLSCH, 3: diag.ChannelDLCCCH, 4: diag.ChannelDLDCCH,
		5: diag.ChannelPCCH, 6: diag.ChannelULCCCH, 8: diag.ChannelULDCCH,
		9: diag.ChannelRRCReconfiguration, 10: diag.ChannelRRCReconfigurationComplete,
	}
	nrChannelsV20 = map[uint8]diag.RRCChannel{
		1: diag.ChannelBCCHBCH, 2: diag.ChannelBCCHDLSCH, 3: diag.ChannelDLCCCH, 4: diag.ChannelDLDCCH,
		6: diag.ChannelPCCH, 7: diag.ChannelULCCCH, 9: diag.ChannelULDCCH,
		10: diag.ChannelRRCReconfiguration, 11: diag.ChannelRRCReconfigurationComplete,
	}
	nrPDUsV7  = &pduTable{channels: nrChannelsV9, other: []uint8{7, 24}}
	nrPDUsV8  = &pduTable{channels: nrChannelsV9, other: []uint8{7, 26}}
	nrPDUsV9  = &pduTable{channels: nrChannelsV9, other: []uint8{7, 25, 28, 29}}
	nrPDUsV14 = &pduTable{channels: nrChannelsV9, other: []uint8{7, 31, 32, 33}}
	nrPDUsV17 = &pduTable{channels: nrChannelsV9, other: []uint8{7, 29}}
	nrPDUsV20 = &pduTable{channels: nrChannelsV20, other: []uint8{5, 8, 36}}
	nrPDUsV26 = &pduTable{channels: map[uint8]diag.RRCChannel{
		1: diag.ChannelBCCHBCH, 2: diag.ChannelBCCHDLSCH, 3: diag.ChannelDLCCCH, 4: diag.ChannelDLDCCH,
		6: diag.ChannelPCCH, 7: diag.ChannelULCCCH, 9: diag.ChannelULDCCH,
		11: diag.ChannelRRCReconfiguration, 12: diag.ChannelRRCReconfigurationComplete,
	}, other: []uint8{5, 8, 36}}
)

func nrPDUs(v uint32) (*pduTable, bool) {
	switch v {
	case 7:
		return nrPDUsV7, true
	case 8:
		return nrPDUsV8, true
	case 9, 12:
		return nrPDUsV9, true
	case 14:
		return nrPDUsV14, true
	case 17, 19:
		return nrPDUsV17, true
	case 20, 23:
		return nrPDUsV20, true
	case 26:
		return nrPDUsV26, true
	}
	return nil, false
}

func malformedRRC(p LogPacket, format string, args ...any) error {
	return &diag.ParseError{Reason: ReasonMalformedRRC,
		Err: fmt.Errorf("0x%04X: "+format, append([]any{p.Code}, args...)...)}
}

// parseRRC reads an RRC OTA packet: the message and its segment number.
func parseRRC(p LogPacket) (diag.RRCMessage, uint8, bool, error) {
	l, ok := rrcLayouts[p.Code]
	if !ok {
		return diag.RRCMessage{}, 0, false, nil
	}
	v, ok := l.version(p.Payload)
	if !ok {
		return diag.RRCMessage{}, 0, false, malformedRRC(p, "%d bytes hold no version", len(p.Payload))
	}
	f, fok := l.format(v)
	table, tok := l.pdus(v)
	if !fok || !tok {
		return diag.RRCMessage{}, 0, false, &diag.ParseError{Reason: ReasonUnknownLogVersion,
			Err: fmt.Errorf("%w: 0x%04X version %d", ErrUnknownVersion, p.Code, v)}
	}
	b := p.Payload
	if len(b) < f.headerLen {
		return diag.RRCMessage{}, 0, false, malformedRRC(p, "version %d: %d bytes, header needs %d", v, len(b), f.headerLen)
	}
	h := rrcHeader{pci: binary.LittleEndian.Uint16(b[f.pciAt:]), pduNumber: b[f.pduAt]}
	if f.arfcnWidth == 2 {
		h.arfcn = uint32(binary.LittleEndian.Uint16(b[f.arfcnAt:]))
	} else {
		h.arfcn = binary.LittleEndian.Uint32(b[f.arfcnAt:])
	}
	if f.segmentAt > 0 {
		h.segment = b[f.segmentAt]
	}
	pdu := b[f.headerLen:]
	if n := int(binary.LittleEndian.Uint16(b[f.lenAt:])); n != len(pdu) || n == 0 {
		return diag.RRCMessage{}, 0, false, malformedRRC(p, "version %d: pdu length %d, %d bytes follow", v, n, len(pdu))
	}
	if h.segment > lastSegment {
		return diag.RRCMessage{}, 0, false, malformedRRC(p, "segment number %d", h.segment)
	}
	ch, ok := table.channels[h.pduNumber]
	if !ok {
		if slices.Contains(table.other, h.pduNumber) {
			return diag.RRCMessage{}, 0, false, nil
		}
		return diag.RRCMessage{}, 0, false, &diag.ParseError{Reason: ReasonUnknownRRCPDU,
			Err: fmt.Errorf("%w %d in 0x%04X version %d", ErrUnknownPDU, h.pduNumber, p.Code, v)}
	}
	return diag.RRCMessage{Time: p.Time, RAT: l.rat, Channel: ch, PCI: h.pci, ARFCN: h.arfcn, Subscription: p.Subscription, PDU: pdu}, h.segment, true, nil
}

// RRCJoiner reassembles segmented RRC PDUs (NR from packet version 23,
// LTE from 30): parts 1 to 6 come in order and part 7 ends the PDU. A PDU
// with a part missing is dropped and counted as "rrc_segment_lost" in
// Stats (nil: not counted). The zero value is ready to use.
type RRCJoiner struct {
	Stats   *diag.Stats
	pending map[segmentStream][][]byte
}

// segmentStream is one sequence of segments: the subscriptions of a
// multi-SIM modem segment their PDUs independently.
type segmentStream struct {
	code         uint16
	subscription uint8
}

// Add lifts the RRC PDU out of an LTE (0xB0C0) or NR (0xB821) RRC OTA log
// packet (QCSuper's NR datagrams are the payloads of such packets, without
// their header and so without a time). It returns whole PDUs,
// joined when they came in segments, and (_, false, nil) while a PDU is
// incomplete, for other codes and for PDUs on channels M2HO does not read.
// Errors are *diag.ParseError values whose Reason is a metric label.
func (j *RRCJoiner) Add(p LogPacket) (diag.RRCMessage, bool, error) {
	msg, segment, ok, err := parseRRC(p)
	if err != nil || !ok {
		return diag.RRCMessage{}, false, err
	}
	if j.pending == nil {
		j.pending = make(map[segmentStream][][]byte)
	}
	key := segmentStream{code: p.Code, subscription: p.Subscription}
	parts := j.pending[key]
	switch {
	case segment == 0:
		j.drop(key)
		return msg, true, nil
	case segment == lastSegment:
		if len(parts) == 0 {
			j.lost()
			return diag.RRCMessage{}, false, nil
		}
		delete(j.pending, key)
		msg.PDU = slices.Concat(append(parts, msg.PDU)...)
		return msg, true, nil
	case segment == 1:
		j.drop(key)
		j.pending[key] = [][]byte{msg.PDU}
	case int(segment) == len(parts)+1:
		j.pending[key] = append(parts, msg.PDU)
	default:
		if len(parts) == 0 {
			j.lost()
		}
		j.drop(key)
	}
	return diag.RRCMessage{}, false, nil
}

// drop abandons the PDU being assembled for key, if any.
func (j *RRCJoiner) drop(key segmentStream) {
	if len(j.pending[key]) > 0 {
		j.lost()
	}
	delete(j.pending, key)
}

func (j *RRCJoiner) lost() {
	if j.Stats != nil {
		j.Stats.CountError(ReasonRRCSegmentLost)
	}
}
