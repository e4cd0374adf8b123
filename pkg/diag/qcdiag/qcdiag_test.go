package qcdiag_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/shareddata"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag/qcdiagtest"
)

var t0 = time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)

// frame is one escaped log packet frame.
func frame(code uint16, at time.Time, payload []byte) []byte {
	return qcdiag.Escape(qcdiagtest.EncodeLogPacket(code, at, payload))
}

// wrapped is a frame inside the 0x98 multi-radio wrapper.
func wrapped(code uint16, at time.Time, payload []byte) []byte {
	body := append([]byte{qcdiag.CmdMultiRadio, 1, 0, 0, 1, 0, 0, 0}, qcdiagtest.EncodeLogPacket(code, at, payload)...)
	return qcdiag.Escape(body)
}

func readAll(t *testing.T, stream []byte) ([]qcdiag.LogPacket, qcdiag.Counters, *diag.Stats) {
	t.Helper()
	stats := &diag.Stats{}
	r := qcdiag.NewReader(bytes.NewReader(stream), stats)
	var out []qcdiag.LogPacket
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, r.Counters(), stats
		}
		require.NoError(t, err)
		out = append(out, p)
	}
}

func errorCounts(s *diag.Stats) map[string]uint64 {
	_, errs := s.Snapshot()
	m := map[string]uint64{}
	for _, c := range errs {
		m[c.Label] = c.Value
	}
	return m
}

func TestReaderFraming(t *testing.T) {
	// Payloads full of flag and escape bytes exercise the escaping.
	special := []byte{0x7E, 0x7D, 0x5E, 0x5D, 0x7E, 0x7E, 0x00}
	good := frame(0x1234, t0, special)
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)-4] ^= 0x01
	// A frame whose tail (and flag) was lost, followed by a whole frame.
	cut := frame(0xB0C0, t0, bytes.Repeat([]byte{1}, 40))
	truncatedThenWhole := append(bytes.Clone(cut[:20]), wrapped(0x4321, t0.Add(time.Second), []byte{9})...)
	oversize := append(bytes.Repeat([]byte{0x55}, qcdiag.MaxFrame+10), 0x7E)
	tests := []struct {
		name      string
		stream    []byte
		codes     []uint16
		counters  qcdiag.Counters
		errorsBy  map[string]uint64
		payload0  []byte
		checkTime bool
	}{
		{name: "plain frame with escapes", stream: good, codes: []uint16{0x1234}, payload0: special, checkTime: true,
			counters: qcdiag.Counters{Frames: 1, LogPackets: 1, UnknownCodes: 1}, errorsBy: map[string]uint64{}},
		{name: "multi-radio wrapper and leading flags", stream: append([]byte{0x7E, 0x7E}, wrapped(0x1234, t0, special)...),
			codes: []uint16{0x1234}, payload0: special, checkTime: true,
			counters: qcdiag.Counters{Frames: 1, LogPackets: 1, UnknownCodes: 1}, errorsBy: map[string]uint64{}},
		{name: "crc error skipped", stream: append(bytes.Clone(corrupt), good...), codes: []uint16{0x1234},
			counters: qcdiag.Counters{Frames: 2, CRCErrors: 1, LogPackets: 1, UnknownCodes: 1},
			errorsBy: map[string]uint64{qcdiag.ReasonCRC: 1}},
		{name: "lost flag recovers the next frame", stream: truncatedThenWhole, codes: []uint16{0x4321},
			counters: qcdiag.Counters{Frames: 1, Truncated: 1, LogPackets: 1, UnknownCodes: 1},
			errorsBy: map[string]uint64{qcdiag.ReasonTruncatedFrame: 1}},
		{name: "partial frame at end of input", stream: append(bytes.Clone(good), good[:10]...), codes: []uint16{0x1234},
			counters: qcdiag.Counters{Frames: 1, Truncated: 1, LogPackets: 1, UnknownCodes: 1},
			errorsBy: map[string]uint64{qcdiag.ReasonTruncatedFrame: 1}},
		{name: "oversize frame dropped", stream: append(oversize, good...), codes: []uint16{0x1234},
			counters: qcdiag.Counters{Frames: 2, Oversize: 1, LogPackets: 1, UnknownCodes: 1},
			errorsBy: map[string]uint64{qcdiag.ReasonOversizeFrame: 1}},
		{name: "frame ending in escape", stream: append([]byte{0x10, 0x7D, 0x7E}, good...), codes: []uint16{0x1234},
			counters: qcdiag.Counters{Frames: 2, BadEscapes: 1, LogPackets: 1, UnknownCodes: 1},
			errorsBy: map[string]uint64{qcdiag.ReasonBadEscape: 1}},
		{name: "command response is not a log packet", stream: append(qcdiag.Escape([]byte{0x7D, 5, 1}), good...), codes: []uint16{0x1234},
			counters: qcdiag.Counters{Frames: 2, NonLog: 1, LogPackets: 1, UnknownCodes: 1}, errorsBy: map[string]uint64{}},
		{name: "log packet with wrong length", stream: append(qcdiag.Escape([]byte{0x10, 0, 40, 0, 40, 0, 0xC0, 0xB0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), good...),
			codes:    []uint16{0x1234},
			counters: qcdiag.Counters{Frames: 2, Malformed: 1, LogPackets: 1, UnknownCodes: 1},
			errorsBy: map[string]uint64{qcdiag.ReasonMalformedLog: 1}},
		{name: "unknown version of a known code", stream: frame(qcdiag.CodeLTERRCOTA, t0, []byte{200, 1, 2}), codes: []uint16{qcdiag.CodeLTERRCOTA},
			counters: qcdiag.Counters{Frames: 1, LogPackets: 1, UnknownVersions: 1},
			errorsBy: map[string]uint64{qcdiag.ReasonUnknownLogVersion: 1}},
		{name: "empty input", stream: nil, counters: qcdiag.Counters{}, errorsBy: map[string]uint64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			packets, counters, stats := readAll(t, tc.stream)
			var codes []uint16
			for _, p := range packets {
				codes = append(codes, p.Code)
			}
			assert.Equal(t, tc.codes, codes)
			assert.Equal(t, tc.counters, counters)
			assert.Equal(t, tc.errorsBy, errorCounts(stats))
			if tc.payload0 != nil {
				require.NotEmpty(t, packets)
				assert.Equal(t, tc.payload0, packets[0].Payload)
			}
			if tc.checkTime {
				assert.WithinDuration(t, t0, packets[0].Time, time.Microsecond)
			}
		})
	}
}

// shortReads hands out one byte per Read, as a slow serial port may.
type shortReads struct{ r io.Reader }

func (s shortReads) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return s.r.Read(p)
}

func TestReaderShortReads(t *testing.T) {
	var stream []byte
	for i := range 50 {
		stream = append(stream, frame(uint16(0xB000+i), t0.Add(time.Duration(i)*time.Millisecond), bytes.Repeat([]byte{0x7E}, i))...)
	}
	r := qcdiag.NewReader(shortReads{bytes.NewReader(stream)}, nil)
	for i := range 50 {
		p, err := r.Next()
		require.NoError(t, err)
		assert.Equal(t, uint16(0xB000+i), p.Code)
		assert.Len(t, p.Payload, i)
	}
	_, err := r.Next()
	assert.ErrorIs(t, err, io.EOF)
}

func TestTimestamp(t *testing.T) {
	tests := []struct {
		name string
		ts   uint64
		want time.Time
	}{
		{name: "epoch", ts: 0, want: time.Date(1980, 1, 6, 0, 0, 0, 0, time.UTC)},
		{name: "one tick is 1.25 ms", ts: 1 << 16, want: time.Date(1980, 1, 6, 0, 0, 0, 1_250_000, time.UTC)},
		{name: "fraction of 40960 units is 1 ms", ts: 40960, want: time.Date(1980, 1, 6, 0, 0, 0, 1_000_000, time.UTC)},
		{name: "800 ticks are a second", ts: 800 << 16, want: time.Date(1980, 1, 6, 0, 0, 1, 0, time.UTC)},
		{name: "largest value does not overflow", ts: ^uint64(0), want: time.Unix(315964800+(1<<48-1)/800, (1<<48-1)%800*1_250_000+65535*3125/128).UTC()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, qcdiag.TimeFromTimestamp(tc.ts))
		})
	}
	at := time.Date(2025, 6, 1, 10, 11, 12, 123456789, time.UTC)
	assert.WithinDuration(t, at, qcdiag.TimeFromTimestamp(qcdiagtest.TimestampFromTime(at)), 25*time.Nanosecond)
}

// Test payload builders, transcribed from the public parsers' struct
// strings independently of the package's offset tables.
type rrcFields struct {
	version uint32
	pci     uint16
	arfcn   uint32
	pdu     uint8
	segment uint8
	body    []byte
	badLen  bool
}

func le16(b []byte, v uint16) []byte { return binary.LittleEndian.AppendUint16(b, v) }
func le32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }

func (f rrcFields) pduLen() uint16 {
	if f.badLen {
		return uint16(len(f.body) + 1)
	}
	return uint16(len(f.body))
}

// ltePayload: version, then '<BB BHHH BH' (v2-4), '<BB BHHH BLH' (v5-7),
// '<BB BHLH BLH' (v8-24), '<BBBB BHLH BLH' (v25-29), '<BBBB BHLH BLHBBB' (v30).
func ltePayload(f rrcFields) []byte {
	v := uint8(f.version)
	b := []byte{v, 14, 0x50}
	if v >= 25 {
		b = append(b, 15, 0x60)
	}
	b = append(b, 3) // radio bearer
	b = le16(b, f.pci)
	if v >= 8 {
		b = le32(b, f.arfcn)
	} else {
		b = le16(b, uint16(f.arfcn))
	}
	b = le16(b, 0x1234) // sfn/subframe
	b = append(b, f.pdu)
	if v >= 5 {
		b = le32(b, 0) // sib mask
	}
	b = le16(b, f.pduLen())
	if v >= 30 {
		b = append(b, 0, 0, f.segment)
	}
	return append(b, f.body...)
}

// nrPayload: 32-bit version, then '<BBBHIIBIH' (v7-9), '<BBBHI3sBIH'
// (v12, 14), '<BBBH Q I3sBIH' (v17), same plus one byte (v19, 20), plus
// four bytes ending in the segment number (v23, 26).
func nrPayload(f rrcFields) []byte {
	b := le32(nil, f.version)
	b = append(b, 15, 0x60, 1)
	b = le16(b, f.pci)
	v := f.version
	switch {
	case v <= 9:
		b = le32(b, f.arfcn)
		b = le32(b, 0xAABBCC) // sfn
	case v <= 14:
		b = le32(b, f.arfcn)
		b = append(b, 1, 2, 3)
	default:
		b = binary.LittleEndian.AppendUint64(b, 0x0123456789) // NR CGI
		b = le32(b, f.arfcn)
		b = append(b, 1, 2, 3)
	}
	b = append(b, f.pdu)
	b = le32(b, 0)
	b = le16(b, f.pduLen())
	switch {
	case v == 19 || v == 20:
		b = append(b, 0)
	case v >= 23:
		b = append(b, 0, 0, 0, f.segment)
	}
	return append(b, f.body...)
}

// TestRRCPackets reads one RRC OTA packet of each layout through a fresh
// joiner: a whole PDU comes out at once, a part of a segmented one does
// not, and a malformed packet is an error whose reason is a metric label.
func TestRRCPackets(t *testing.T) {
	body := []byte{0x08, 0x11, 0x28, 0x18}
	type want struct {
		ok      bool
		channel diag.RRCChannel
		reason  string
	}
	tests := []struct {
		name string
		code uint16
		f    rrcFields
		want want
	}{
		{"lte v2 DL-DCCH", qcdiag.CodeLTERRCOTA, rrcFields{version: 2, pci: 100, arfcn: 1850, pdu: 6}, want{ok: true, channel: diag.ChannelDLDCCH}},
		{"lte v7 UL-DCCH", qcdiag.CodeLTERRCOTA, rrcFields{version: 7, pci: 100, arfcn: 1850, pdu: 8}, want{ok: true, channel: diag.ChannelULDCCH}},
		{"lte v8 UL-DCCH", qcdiag.CodeLTERRCOTA, rrcFields{version: 8, pci: 391, arfcn: 850, pdu: 8}, want{ok: true, channel: diag.ChannelULDCCH}},
		{"lte v9 PCCH", qcdiag.CodeLTERRCOTA, rrcFields{version: 9, pci: 7, arfcn: 66486, pdu: 11}, want{ok: true, channel: diag.ChannelPCCH}},
		{"lte v14 DL-CCCH", qcdiag.CodeLTERRCOTA, rrcFields{version: 14, pci: 7, arfcn: 5230, pdu: 6}, want{ok: true, channel: diag.ChannelDLCCCH}},
		{"lte v19 UL-CCCH", qcdiag.CodeLTERRCOTA, rrcFields{version: 19, pci: 7, arfcn: 5230, pdu: 10}, want{ok: true, channel: diag.ChannelULCCCH}},
		{"lte v26 BCCH-DL-SCH", qcdiag.CodeLTERRCOTA, rrcFields{version: 26, pci: 132, arfcn: 39148, pdu: 3}, want{ok: true, channel: diag.ChannelBCCHDLSCH}},
		{"lte v30 whole DL-DCCH", qcdiag.CodeLTERRCOTA, rrcFields{version: 30, pci: 5, arfcn: 66936, pdu: 9}, want{ok: true, channel: diag.ChannelDLDCCH}},
		{"lte v30 first segment waits", qcdiag.CodeLTERRCOTA, rrcFields{version: 30, pci: 5, arfcn: 66936, pdu: 9, segment: 1}, want{}},
		{"lte MCCH skipped", qcdiag.CodeLTERRCOTA, rrcFields{version: 8, pdu: 3}, want{}},
		{"lte unknown pdu", qcdiag.CodeLTERRCOTA, rrcFields{version: 8, pdu: 99}, want{reason: qcdiag.ReasonUnknownRRCPDU}},
		{"lte unknown version", qcdiag.CodeLTERRCOTA, rrcFields{version: 5, pdu: 8}, want{reason: qcdiag.ReasonUnknownLogVersion}},
		{"lte bad length", qcdiag.CodeLTERRCOTA, rrcFields{version: 8, pdu: 8, badLen: true}, want{reason: qcdiag.ReasonMalformedRRC}},
		{"nr v8 RRCReconfiguration", qcdiag.CodeNRRRCOTA, rrcFields{version: 8, pci: 283, arfcn: 504990, pdu: 9}, want{ok: true, channel: diag.ChannelRRCReconfiguration}},
		{"nr v8 radio bearer config skipped", qcdiag.CodeNRRRCOTA, rrcFields{version: 8, pdu: 26}, want{}},
		{"nr v12 DL-DCCH", qcdiag.CodeNRRRCOTA, rrcFields{version: 12, pci: 433, arfcn: 640704, pdu: 4}, want{ok: true, channel: diag.ChannelDLDCCH}},
		{"nr v14 UL-DCCH", qcdiag.CodeNRRRCOTA, rrcFields{version: 14, pci: 433, arfcn: 640704, pdu: 8}, want{ok: true, channel: diag.ChannelULDCCH}},
		{"nr v17 complete", qcdiag.CodeNRRRCOTA, rrcFields{version: 17, pci: 1007, arfcn: 2079167, pdu: 10}, want{ok: true, channel: diag.ChannelRRCReconfigurationComplete}},
		{"nr v19 PCCH", qcdiag.CodeNRRRCOTA, rrcFields{version: 19, pci: 9, arfcn: 2079167, pdu: 5}, want{ok: true, channel: diag.ChannelPCCH}},
		{"nr v20 UL-DCCH", qcdiag.CodeNRRRCOTA, rrcFields{version: 20, pci: 9, arfcn: 2079167, pdu: 9}, want{ok: true, channel: diag.ChannelULDCCH}},
		{"nr v23 RRCReconfiguration", qcdiag.CodeNRRRCOTA, rrcFields{version: 23, pci: 9, arfcn: 2079167, pdu: 10}, want{ok: true, channel: diag.ChannelRRCReconfiguration}},
		{"nr v26 RRCReconfiguration", qcdiag.CodeNRRRCOTA, rrcFields{version: 26, pci: 9, arfcn: 2079167, pdu: 11}, want{ok: true, channel: diag.ChannelRRCReconfiguration}},
		{"nr v26 segment without the first", qcdiag.CodeNRRRCOTA, rrcFields{version: 26, pdu: 11, segment: 2}, want{}},
		{"nr UL-CCCH1 skipped", qcdiag.CodeNRRRCOTA, rrcFields{version: 9, pdu: 7}, want{}},
		{"nr unknown version", qcdiag.CodeNRRRCOTA, rrcFields{version: 0x20000, pdu: 1}, want{reason: qcdiag.ReasonUnknownLogVersion}},
		{"nr bad length", qcdiag.CodeNRRRCOTA, rrcFields{version: 9, pdu: 1, badLen: true}, want{reason: qcdiag.ReasonMalformedRRC}},
		{"other code", 0xB0C1, rrcFields{version: 8}, want{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.body = body
			payload := ltePayload(tc.f)
			if tc.code == qcdiag.CodeNRRRCOTA {
				payload = nrPayload(tc.f)
			}
			p, err := qcdiag.ParseLogPacket(qcdiagtest.EncodeLogPacket(tc.code, t0, payload))
			require.NoError(t, err)
			var j qcdiag.RRCJoiner
			msg, ok, err := j.Add(p)
			assert.Equal(t, tc.want.ok, ok)
			if tc.want.reason != "" {
				var pe *diag.ParseError
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, tc.want.reason, pe.Reason)
				return
			}
			require.NoError(t, err)
			if !tc.want.ok {
				return
			}
			rat := diag.RATLTE
			if tc.code == qcdiag.CodeNRRRCOTA {
				rat = diag.RATNR
			}
			assert.Equal(t, diag.RRCMessage{Time: p.Time, RAT: rat, Channel: tc.want.channel, PCI: tc.f.pci, ARFCN: tc.f.arfcn, PDU: body}, msg)
		})
	}
}

// TestQCSuperNRPayload reads a QCSuper NR datagram, an NR RRC OTA payload
// without its log header, through a joiner as diagsrc does: no time, and
// a truncated one is malformed.
func TestQCSuperNRPayload(t *testing.T) {
	// The first datagram of the shared tram ride capture: NR RRC OTA v12,
	// PCI 433, NR-ARFCN 640704, MIB.
	mib := []byte{0x0c, 0, 0, 0, 0x0f, 0x90, 0xff, 0xb1, 0x01, 0xc0, 0xc6, 0x09, 0, 0, 0, 0x08, 0x01, 0, 0, 0, 0, 0x04, 0, 0, 0, 0, 0}
	var j qcdiag.RRCJoiner
	msg, ok, err := j.Add(qcdiag.LogPacket{Code: qcdiag.CodeNRRRCOTA, Payload: mib})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, diag.RRCMessage{RAT: diag.RATNR, Channel: diag.ChannelBCCHBCH, PCI: 433, ARFCN: 640704, PDU: []byte{0, 0, 0, 0}}, msg)

	_, _, err = j.Add(qcdiag.LogPacket{Code: qcdiag.CodeNRRRCOTA, Payload: mib[:20]})
	var pe *diag.ParseError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, qcdiag.ReasonMalformedRRC, pe.Reason)
}

func TestRRCJoiner(t *testing.T) {
	seg := func(segment uint8, body string) qcdiag.LogPacket {
		p, err := qcdiag.ParseLogPacket(qcdiagtest.EncodeLogPacket(qcdiag.CodeNRRRCOTA, t0,
			nrPayload(rrcFields{version: 26, pci: 9, arfcn: 2079167, pdu: 11, segment: segment, body: []byte(body)})))
		require.NoError(t, err)
		return p
	}
	tests := []struct {
		name   string
		parts  []qcdiag.LogPacket
		pdus   []string
		losses uint64
	}{
		{"whole pdu", []qcdiag.LogPacket{seg(0, "abc")}, []string{"abc"}, 0},
		{"two parts", []qcdiag.LogPacket{seg(1, "ab"), seg(7, "cd")}, []string{"abcd"}, 0},
		{"seven parts", []qcdiag.LogPacket{seg(1, "a"), seg(2, "b"), seg(3, "c"), seg(4, "d"), seg(5, "e"), seg(6, "f"), seg(7, "g")}, []string{"abcdefg"}, 0},
		{"missing middle part", []qcdiag.LogPacket{seg(1, "a"), seg(3, "c"), seg(7, "z"), seg(0, "ok")}, []string{"ok"}, 2},
		{"last part alone", []qcdiag.LogPacket{seg(7, "z")}, nil, 1},
		{"restart drops the unfinished pdu", []qcdiag.LogPacket{seg(1, "a"), seg(1, "b"), seg(7, "c")}, []string{"bc"}, 1},
		{"whole pdu abandons an unfinished one", []qcdiag.LogPacket{seg(1, "a"), seg(0, "w")}, []string{"w"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stats := &diag.Stats{}
			j := qcdiag.RRCJoiner{Stats: stats}
			var pdus []string
			for _, p := range tc.parts {
				msg, ok, err := j.Add(p)
				require.NoError(t, err)
				if ok {
					pdus = append(pdus, string(msg.PDU))
					assert.Equal(t, diag.ChannelRRCReconfiguration, msg.Channel)
				}
			}
			assert.Equal(t, tc.pdus, pdus)
			assert.Equal(t, tc.losses, errorCounts(stats)[qcdiag.ReasonRRCSegmentLost])
		})
	}
}

func TestSetMaskRequest(t *testing.T) {
	tests := []struct {
		name    string
		codes   []uint16
		wantErr bool
	}{
		{"rrc codes", []uint16{0xB0C0, 0xB821}, false},
		{"first and last item", []uint16{0xB000, 0xB000 | (qcdiag.DefaultMaskItems - 1)}, false},
		{"other equipment", []uint16{0x7130}, true},
		{"beyond the item count", []uint16{0xBFFF}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := qcdiag.SetMaskRequest(qcdiag.EquipmentLTE, qcdiag.DefaultMaskItems, tc.codes)
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []byte{0x73, 0, 0, 0, 3, 0, 0, 0, 0x0B, 0, 0, 0}, req[:12])
			equipment, codes, err := qcdiagtest.ParseSetMaskRequest(req)
			require.NoError(t, err)
			assert.Equal(t, uint32(qcdiag.EquipmentLTE), equipment)
			assert.Equal(t, tc.codes, codes)
		})
	}
}

func BenchmarkReplayLargest(b *testing.B) {
	dir := shareddata.DataDir(b, "diag")
	files, err := filepath.Glob(filepath.Join(dir, "*.mi2log"))
	require.NoError(b, err)
	var largest []byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(b, err)
		if len(data) > len(largest) {
			largest = data
		}
	}
	b.SetBytes(int64(len(largest)))
	b.ReportAllocs()
	for b.Loop() {
		r := qcdiag.NewReader(bytes.NewReader(largest), nil)
		var j qcdiag.RRCJoiner
		for {
			p, err := r.Next()
			if err != nil {
				break
			}
			j.Add(p)
		}
	}
}

// TestReaderSubscription reads the subscription from the multi-radio
// wrapper: IDs count from 1, and 0 and -1 also mean the first.
func TestReaderSubscription(t *testing.T) {
	inWrapper := func(id uint32) []byte {
		body := binary.LittleEndian.AppendUint32([]byte{qcdiag.CmdMultiRadio, 1, 0, 0}, id)
		return qcdiag.Escape(append(body, qcdiagtest.EncodeLogPacket(0x1234, t0, []byte{1})...))
	}
	stream := slices.Concat(frame(0x1234, t0, []byte{1}), inWrapper(1), inWrapper(2), inWrapper(0), inWrapper(0xFFFFFFFF), inWrapper(3))
	packets, _, _ := readAll(t, stream)
	var subs []uint8
	for _, p := range packets {
		subs = append(subs, p.Subscription)
	}
	assert.Equal(t, []uint8{0, 0, 1, 0, 0, 2}, subs)
}

// TestRRCJoinerSubscriptions joins the segments of two subscriptions that
// interleave, each on its own.
func TestRRCJoinerSubscriptions(t *testing.T) {
	seg := func(sub, segment uint8, body string) qcdiag.LogPacket {
		p, err := qcdiag.ParseLogPacket(qcdiagtest.EncodeLogPacket(qcdiag.CodeNRRRCOTA, t0,
			nrPayload(rrcFields{version: 26, pci: 9, arfcn: 2079167, pdu: 11, segment: segment, body: []byte(body)})))
		require.NoError(t, err)
		p.Subscription = sub
		return p
	}
	stats := &diag.Stats{}
	j := qcdiag.RRCJoiner{Stats: stats}
	got := map[uint8][]string{}
	for _, p := range []qcdiag.LogPacket{seg(0, 1, "a"), seg(1, 1, "x"), seg(0, 7, "b"), seg(1, 7, "y")} {
		msg, ok, err := j.Add(p)
		require.NoError(t, err)
		if ok {
			got[msg.Subscription] = append(got[msg.Subscription], string(msg.PDU))
		}
	}
	assert.Equal(t, map[uint8][]string{0: {"ab"}, 1: {"xy"}}, got)
	assert.Zero(t, errorCounts(stats)[qcdiag.ReasonRRCSegmentLost])
}
