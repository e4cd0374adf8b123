package qcdiag_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/m2ho/m2ho/internal/shareddata"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag/qcdiagtest"
)

// realPackets returns log packets of the shared captures, at most perFile
// from each file and only of code (0: any).
func realPackets(code uint16, perFile int) []qcdiag.LogPacket {
	var out []qcdiag.LogPacket
	for _, data := range shareddata.Files("diag", "*.mi2log") {
		r := qcdiag.NewReader(bytes.NewReader(data), nil)
		n := 0
		for n < perFile {
			p, err := r.Next()
			if err != nil {
				break
			}
			if code == 0 || p.Code == code {
				out = append(out, p)
				n++
			}
		}
	}
	return out
}

func FuzzReader(f *testing.F) {
	for _, data := range shareddata.Files("diag", "*.mi2log") {
		f.Add(data[:min(len(data), 2048)])
	}
	f.Add(frame(0xB0C0, t0, []byte{0x7E, 0x7D}))
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := qcdiag.NewReader(bytes.NewReader(stream), &diag.Stats{})
		var j qcdiag.RRCJoiner
		packets := 0
		for {
			p, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("Next on an in-memory stream: %v", err)
			}
			packets++
			j.Add(p)
		}
		c := r.Counters()
		if c.LogPackets != uint64(packets) {
			t.Fatalf("LogPackets %d, delivered %d", c.LogPackets, packets)
		}
		if c.LogPackets+c.NonLog+c.Malformed+c.CRCErrors+c.Oversize+c.BadEscapes != c.Frames {
			t.Fatalf("frames and their outcomes disagree: %+v", c)
		}
	})
}

func FuzzParseLogPacket(f *testing.F) {
	for _, p := range realPackets(0, 20) {
		f.Add(qcdiagtest.EncodeLogPacket(p.Code, p.Time, p.Payload))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := qcdiag.ParseLogPacket(body)
		if err != nil {
			return
		}
		// A parsed packet re-encodes to the bytes it came from, up to the
		// timestamp's sub-tick resolution and trailing bytes the inner
		// length excludes.
		again, err := qcdiag.ParseLogPacket(qcdiagtest.EncodeLogPacket(p.Code, p.Time, p.Payload))
		if err != nil {
			t.Fatalf("re-encoded packet rejected: %v", err)
		}
		if again.Code != p.Code || !bytes.Equal(again.Payload, p.Payload) || again.Layout != p.Layout {
			t.Fatalf("round trip changed the packet: %+v -> %+v", p, again)
		}
		var j qcdiag.RRCJoiner
		j.Add(p)
	})
}

// fuzzLayout feeds arbitrary payloads of one RRC OTA code to a joiner,
// once and then repeated; every lifted PDU must lie within the payload.
func fuzzLayout(f *testing.F, code uint16) {
	for _, p := range realPackets(code, 30) {
		f.Add(p.Payload)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		p := qcdiag.LogPacket{Code: code, Time: t0, Payload: payload}
		var j qcdiag.RRCJoiner
		msg, ok, err := j.Add(p)
		if err != nil {
			var pe *diag.ParseError
			if !errors.As(err, &pe) || pe.Reason == "" {
				t.Fatalf("error without a reason: %v", err)
			}
		}
		if ok && (len(msg.PDU) > len(payload) || msg.RAT == "" || msg.Channel == diag.ChannelUnknown) {
			t.Fatalf("bad message %+v from %d bytes", msg, len(payload))
		}
		for range 3 {
			j.Add(p)
		}
	})
}

func FuzzLTERRCLayout(f *testing.F) { fuzzLayout(f, qcdiag.CodeLTERRCOTA) }

func FuzzNRRRCLayout(f *testing.F) { fuzzLayout(f, qcdiag.CodeNRRRCOTA) }
