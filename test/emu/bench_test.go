package emu

import (
	"testing"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/scenario"
)

// BenchmarkLinkPacket is the model's cost per packet (arrival, buffering,
// slot scheduling, delivery) at 1 Gbit/s in mmWave slots, without I/O.
func BenchmarkLinkPacket(b *testing.B) {
	sc := &scenario.Scenario{Name: "bench", Duration: time.Hour, Scale: 1, InitialCell: "m", Cells: []scenario.Cell{{
		Name: "m", RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 1, ARFCN: 2079167,
		Capacity: scenario.CapacitySpec{ConstantMbps: 1000}, BufferBytes: 64 << 20,
		Slot: scenario.SlotMmWave, CarrierRBs: scenario.CarrierRBsMmWave,
	}}}
	delivered := 0
	link, err := NewLink(sc, time.Now(), func(diag.Event) {}, func(*Packet, time.Duration) { delivered++ })
	if err != nil {
		b.Fatal(err)
	}
	frame := make([]byte, 1514)
	frame[12], frame[13] = 0x08, 0x00
	frame[14], frame[16], frame[17] = 0x45, 0x05, 0xdc // IPv4, total length 1500
	size, _, tcp := ParseFrame(frame, true)
	// One 1500-byte packet every 12 us: 1 Gbit/s.
	const gap = 12 * time.Microsecond
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		at := time.Duration(i) * gap
		link.Arrive(&Packet{Frame: frame, Size: size, TCP: tcp}, at)
		link.Advance(at)
	}
	b.StopTimer()
	b.ReportMetric(float64(delivered)/float64(b.N), "delivered/op")
}

// BenchmarkParseFrame is the per-packet header parsing cost.
func BenchmarkParseFrame(b *testing.B) {
	frame := make([]byte, 1514)
	frame[12], frame[13] = 0x08, 0x00
	frame[14], frame[16], frame[17], frame[23] = 0x45, 0x05, 0xdc, protoTCP
	frame[14+20+12] = 0x50
	b.ReportAllocs()
	for range b.N {
		ParseFrame(frame, true)
	}
}
