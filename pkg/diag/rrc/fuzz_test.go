package rrc

import (
	"testing"

	"github.com/m2ho/m2ho/pkg/diag"
)

// fuzzDecoder feeds arbitrary PDUs on one RAT and channel to a decoder
// that keeps its state across inputs (measConfig, pending commands, SCG),
// seeded with the committed vectors of that channel. Errors are the
// expected outcome of garbage; a panic or hang is a failure.
func fuzzDecoder(f *testing.F, rat diag.RAT, channel diag.RRCChannel) {
	for _, v := range loadVectors(f) {
		if v.msg.RAT == rat && v.msg.Channel == channel {
			f.Add(v.msg.PDU)
		}
	}
	f.Add([]byte{})
	d := NewDecoder(nil)
	f.Fuzz(func(t *testing.T, pdu []byte) {
		events, err := d.Decode(diag.RRCMessage{RAT: rat, Channel: channel, PCI: 1, ARFCN: 100, PDU: pdu})
		if err != nil && len(events) > 0 {
			t.Fatalf("events with an error: %v", err)
		}
		for _, ev := range events {
			if ev.Type == "" {
				t.Fatalf("event without type: %+v", ev)
			}
		}
	})
}

func FuzzLTEDLDCCH(f *testing.F) { fuzzDecoder(f, diag.RATLTE, diag.ChannelDLDCCH) }
func FuzzLTEULDCCH(f *testing.F) { fuzzDecoder(f, diag.RATLTE, diag.ChannelULDCCH) }
func FuzzLTEULCCCH(f *testing.F) { fuzzDecoder(f, diag.RATLTE, diag.ChannelULCCCH) }
func FuzzNRDLDCCH(f *testing.F)  { fuzzDecoder(f, diag.RATNR, diag.ChannelDLDCCH) }
func FuzzNRULDCCH(f *testing.F)  { fuzzDecoder(f, diag.RATNR, diag.ChannelULDCCH) }
func FuzzNRULCCCH(f *testing.F)  { fuzzDecoder(f, diag.RATNR, diag.ChannelULCCCH) }
func FuzzNRRRCReconfiguration(f *testing.F) {
	fuzzDecoder(f, diag.RATNR, diag.ChannelRRCReconfiguration)
}
