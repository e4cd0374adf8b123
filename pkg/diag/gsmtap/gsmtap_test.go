package gsmtap_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/shareddata"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/gsmtap"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
)

// v2 builds a GSMTAP v2 datagram as libosmocore defines it:
// '!BBBBHBBLBBBB' then the payload.
func v2(typ uint8, arfcn uint16, subtype uint8, pdu []byte) []byte {
	b := []byte{2, 4, typ, 0}
	b = binary.BigEndian.AppendUint16(b, arfcn)
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint32(b, 1234)
	b = append(b, subtype, 0, 0, 0)
	return append(b, pdu...)
}

// v3 builds a GSMTAP v3 datagram as SCAT 2.1.2 writes LTE and NR RRC:
// '!BBHHH'; metadata tags timestamp, channel number, PCI, SFN and
// sub-frame number; the end-of-metadata tag without a length; the header
// length rounded up to 32-bit words (56 for these 54 bytes) and no
// padding, so the PDU starts right after the end tag.
func v3(typ, subtype uint16, at time.Time, arfcn uint32, pci uint16, pdu []byte) []byte {
	md := v3Tags(at, arfcn, pci)
	md = binary.BigEndian.AppendUint16(md, 0x0008) // SFN
	md = binary.BigEndian.AppendUint16(md, 4)
	md = binary.BigEndian.AppendUint32(md, 883)
	md = binary.BigEndian.AppendUint16(md, 0x0009) // sub-frame number
	md = binary.BigEndian.AppendUint16(md, 2)
	md = binary.BigEndian.AppendUint16(md, 0)
	md = binary.BigEndian.AppendUint16(md, 0xFFFE)
	return v3Datagram(typ, subtype, (8+len(md)+3)/4, md, pdu)
}

// v3Tags is the timestamp, channel number and PCI metadata.
func v3Tags(at time.Time, arfcn uint32, pci uint16) []byte {
	var md []byte
	md = binary.BigEndian.AppendUint16(md, 0x0000)
	md = binary.BigEndian.AppendUint16(md, 12)
	md = binary.BigEndian.AppendUint64(md, uint64(at.Unix()))
	md = binary.BigEndian.AppendUint32(md, uint32(at.Nanosecond()))
	md = binary.BigEndian.AppendUint16(md, 0x0002)
	md = binary.BigEndian.AppendUint16(md, 4)
	md = binary.BigEndian.AppendUint32(md, arfcn)
	md = binary.BigEndian.AppendUint16(md, 0x0005)
	md = binary.BigEndian.AppendUint16(md, 2)
	md = binary.BigEndian.AppendUint16(md, pci)
	return md
}

func v3Datagram(typ, subtype uint16, words int, md, pdu []byte) []byte {
	b := []byte{3, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(words))
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint16(b, subtype)
	return append(append(b, md...), pdu...)
}

func TestParse(t *testing.T) {
	pdu := []byte{0x20, 0x10, 0x09}
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	tests := []struct {
		name   string
		in     []byte
		ok     bool
		want   diag.RRCMessage
		reason string
	}{
		{name: "v2 lte DL-DCCH", in: v2(0x0D, 1850, 1, pdu), ok: true,
			want: diag.RRCMessage{RAT: diag.RATLTE, Channel: diag.ChannelDLDCCH, ARFCN: 1850, PCIUnknown: true, PDU: pdu}},
		{name: "v2 lte uplink flag masked", in: v2(0x0D, 0x4000|1850, 3, pdu), ok: true,
			want: diag.RRCMessage{RAT: diag.RATLTE, Channel: diag.ChannelULDCCH, ARFCN: 1850, PCIUnknown: true, PDU: pdu}},
		{name: "v2 lte PCCH", in: v2(0x0D, 0, 6, pdu), ok: true,
			want: diag.RRCMessage{RAT: diag.RATLTE, Channel: diag.ChannelPCCH, PCIUnknown: true, PDU: pdu}},
		{name: "v2 lte MCCH skipped", in: v2(0x0D, 0, 7, pdu)},
		{name: "v2 lte unknown subtype", in: v2(0x0D, 0, 99, pdu), reason: gsmtap.ReasonUnknownSubtype},
		{name: "v2 gsm skipped", in: v2(0x01, 0, 1, pdu)},
		{name: "v2 short header", in: []byte{2, 4, 0x0D, 0, 0, 0}, reason: gsmtap.ReasonMalformed},
		{name: "v2 header length below 16", in: v2(0x0D, 0, 1, pdu)[:2], reason: gsmtap.ReasonMalformed},
		{name: "v2 without pdu", in: v2(0x0D, 0, 1, nil), reason: gsmtap.ReasonMalformed},
		{name: "v3 nr RRCReconfiguration", in: v3(0x0503, 0x0201, at, 2079167, 501, pdu), ok: true,
			want: diag.RRCMessage{Time: at, RAT: diag.RATNR, Channel: diag.ChannelRRCReconfiguration, PCI: 501, ARFCN: 2079167, PDU: pdu}},
		{name: "v3 nr UL-DCCH", in: v3(0x0503, 9, at, 640704, 433, pdu), ok: true,
			want: diag.RRCMessage{Time: at, RAT: diag.RATNR, Channel: diag.ChannelULDCCH, PCI: 433, ARFCN: 640704, PDU: pdu}},
		{name: "v3 lte DL-DCCH", in: v3(0x0403, 9, at, 66486, 12, pdu), ok: true,
			want: diag.RRCMessage{Time: at, RAT: diag.RATLTE, Channel: diag.ChannelDLDCCH, PCI: 12, ARFCN: 66486, PDU: pdu}},
		{name: "v3 header of whole words", in: func() []byte {
			md := binary.BigEndian.AppendUint16(v3Tags(at, 66486, 12), 0xFFFE) // 40 bytes with the fixed part
			return v3Datagram(0x0403, 9, 10, md, pdu)
		}(), ok: true,
			want: diag.RRCMessage{Time: at, RAT: diag.RATLTE, Channel: diag.ChannelDLDCCH, PCI: 12, ARFCN: 66486, PDU: pdu}},
		{name: "v3 padded without end tag", in: v3Datagram(0x0403, 9, 10, append(v3Tags(at, 66486, 12), 0, 0), pdu), ok: true,
			want: diag.RRCMessage{Time: at, RAT: diag.RATLTE, Channel: diag.ChannelDLDCCH, PCI: 12, ARFCN: 66486, PDU: pdu}},
		{name: "v3 padded by a word after the end tag", in: v3Datagram(0x0403, 9, 11, append(v3Tags(at, 66486, 12), 0xFF, 0xFE, 0, 0, 0, 0), pdu), ok: true,
			want: diag.RRCMessage{Time: at, RAT: diag.RATLTE, Channel: diag.ChannelDLDCCH, PCI: 12, ARFCN: 66486, PDU: pdu}},
		{name: "v3 end tag in the last word", in: v3Datagram(0x0403, 9, 10, append(v3Tags(at, 66486, 12)[:24], 0, 1, 0, 2, 0, 0, 0xFF, 0xFE), pdu), ok: true,
			want: diag.RRCMessage{Time: at, RAT: diag.RATLTE, Channel: diag.ChannelDLDCCH, ARFCN: 66486, PDU: pdu}},
		{name: "v3 nr capability skipped", in: v3(0x0503, 0x0204, at, 0, 0, pdu)},
		{name: "v3 nas skipped", in: v3(0x0504, 0, at, 0, 0, pdu)},
		{name: "v3 metadata overruns header", in: func() []byte {
			b := v3(0x0503, 9, at, 1, 1, pdu)
			b[10], b[11] = 0x00, 0x40 // timestamp length 64
			return b
		}(), reason: gsmtap.ReasonMalformed},
		{name: "v3 metadata ends in the middle of a tag", in: v3Datagram(0x0403, 9, 10, append(v3Tags(at, 1, 1)[:24], 0, 8, 0, 8, 0, 0), pdu),
			reason: gsmtap.ReasonMalformed},
		{name: "v3 header length beyond datagram", in: func() []byte {
			b := v3(0x0503, 9, at, 1, 1, pdu)
			b[3] = 200
			return b
		}(), reason: gsmtap.ReasonMalformed},
		{name: "unknown version", in: []byte{5, 0, 0, 0}, reason: gsmtap.ReasonUnknownVersion},
		{name: "empty", in: nil, reason: gsmtap.ReasonMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg, ok, err := gsmtap.Parse(tc.in)
			if tc.reason != "" {
				var pe *diag.ParseError
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, tc.reason, pe.Reason)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.ok, ok)
			if tc.ok {
				assert.Equal(t, tc.want, msg)
			}
		})
	}
}

// captureCounts are RRC messages per "rat channel" in each shared capture,
// plus unknown NR PDU numbers. They were obtained once, by hand, with a
// separate Python script (its own pcap and pcapng block parser, IPv4 and
// UDP headers read by offset, the GSMTAP v2 subtype byte at offset 12 and
// the QCSuper NR PDU number at offset 16 of the v12 header).
var captureCounts = map[string]struct {
	channels   map[string]int
	unknownPDU int
}{
	"qcsuper_xperia_2g3g4g.pcap": {channels: map[string]int{
		"lte DL-CCCH": 5, "lte DL-DCCH": 32, "lte UL-CCCH": 5, "lte UL-DCCH": 38, "lte BCCH-DL-SCH": 8, "lte PCCH": 53,
	}},
	"tram_ride_lte_nr.pcapng": {channels: map[string]int{
		"lte DL-CCCH": 7, "lte DL-DCCH": 38, "lte UL-CCCH": 7, "lte UL-DCCH": 50, "lte BCCH-DL-SCH": 59, "lte PCCH": 1545,
		"nr BCCH-BCH": 3, "nr DL-DCCH": 3, "nr BCCH-DL-SCH": 2, "nr UL-CCCH": 2, "nr DL-CCCH": 2, "nr UL-DCCH": 2,
	}, unknownPDU: 3},
}

func TestRealCaptures(t *testing.T) {
	dir := shareddata.DataDir(t, "gsmtap")
	for name, want := range captureCounts {
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(filepath.Join(dir, name))
			require.NoError(t, err)
			defer f.Close()
			channels := map[string]int{}
			unknownPDU := 0
			// QCSuper's NR datagrams go through a joiner, as diagsrc reads
			// them
			var joiner qcdiag.RRCJoiner
			var first time.Time
			skipped, err := gsmtap.ReadCapture(f, func(d gsmtap.Datagram) error {
				if first.IsZero() {
					first = d.Time
				}
				var msg diag.RRCMessage
				var ok bool
				var err error
				switch d.DstPort {
				case gsmtap.Port:
					msg, ok, err = gsmtap.Parse(d.Payload)
				case gsmtap.QCSuperNRPort:
					msg, ok, err = joiner.Add(qcdiag.LogPacket{Code: qcdiag.CodeNRRRCOTA, Payload: d.Payload})
				default:
					return fmt.Errorf("unexpected port %d", d.DstPort)
				}
				if errors.Is(err, qcdiag.ErrUnknownPDU) {
					unknownPDU++
					return nil
				}
				if err != nil {
					return err
				}
				if ok {
					channels[fmt.Sprintf("%s %s", msg.RAT, msg.Channel)]++
				}
				return nil
			})
			require.NoError(t, err)
			assert.Zero(t, skipped)
			assert.Equal(t, want.channels, channels)
			assert.Equal(t, want.unknownPDU, unknownPDU)
			assert.Greater(t, first.Year(), 2015, "capture timestamps")
		})
	}
}

func FuzzParse(f *testing.F) {
	// Seed with datagrams of the shared captures: every QCSuper NR one and
	// a sample of the GSMTAP ones.
	for _, data := range shareddata.Files("gsmtap", "*") {
		n := 0
		_, err := gsmtap.ReadCapture(bytes.NewReader(data), func(d gsmtap.Datagram) error {
			n++
			if d.DstPort == gsmtap.QCSuperNRPort || n%25 == 0 {
				f.Add(d.DstPort == gsmtap.QCSuperNRPort, bytes.Clone(d.Payload))
			}
			return nil
		})
		if err != nil {
			f.Fatalf("seed corpus: %v", err)
		}
	}
	f.Add(false, v3(0x0503, 0x0201, time.Unix(1, 2), 3, 4, []byte{5}))
	f.Fuzz(func(t *testing.T, qcsuper bool, payload []byte) {
		parse := gsmtap.Parse
		if qcsuper {
			parse = func(payload []byte) (diag.RRCMessage, bool, error) {
				var j qcdiag.RRCJoiner
				return j.Add(qcdiag.LogPacket{Code: qcdiag.CodeNRRRCOTA, Payload: payload})
			}
		}
		msg, ok, err := parse(payload)
		if err != nil {
			var pe *diag.ParseError
			if !errors.As(err, &pe) || pe.Reason == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		if ok && (len(msg.PDU) == 0 || len(msg.PDU) > len(payload) || msg.Channel == diag.ChannelUnknown) {
			t.Fatalf("bad message %+v from %d bytes", msg, len(payload))
		}
	})
}
