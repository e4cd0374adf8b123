package qcdiag

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
)

// embeddedFrameScan is the definition embeddedFrame implements: the first
// candidate offset whose suffix CRC is want, computing a CRC at each one.
func embeddedFrameScan(body []byte, want uint16) int {
	for k := 1; k < len(body); k++ {
		if embeddedStart(body, k) && CRC16(body[k:]) == want {
			return k
		}
	}
	return 0
}

func TestCRCUnstep(t *testing.T) {
	for c := range 1 << 16 {
		x := byte(c*7 + 3)
		after := uint16(c)>>8 ^ crcTables[0][byte(c)^x]
		if got := crcUnstep(after, x); got != uint16(c) {
			t.Fatalf("unstep(step(%#04x, %#02x)) = %#04x", c, x, got)
		}
	}
}

// embeddedCase is a truncated frame start followed by a whole log packet,
// bare or in the multi-radio wrapper, as a frame whose flag was lost gives.
func embeddedCase(rng *rand.Rand) (body []byte, packetAt int) {
	payload := make([]byte, rng.IntN(300))
	for i := range payload {
		payload[i] = byte(rng.UintN(256))
	}
	packet := EncodeLogPacket(uint16(rng.UintN(1<<16)), time.Unix(1700000000, 0), payload)
	if rng.IntN(2) == 0 {
		packet = append([]byte{CmdMultiRadio, 1, 0, 0, 1, 0, 0, 0}, packet...)
	}
	prefix := make([]byte, 1+rng.IntN(200))
	for i := range prefix {
		switch rng.IntN(8) {
		case 0:
			prefix[i] = CmdLog
		case 1:
			prefix[i] = CmdMultiRadio
		default:
			prefix[i] = byte(rng.UintN(256))
		}
	}
	// Decoys: log commands in the prefix whose length reaches the end.
	for range rng.IntN(4) {
		k := rng.IntN(len(prefix))
		if k+4 > len(prefix) {
			continue
		}
		prefix[k] = CmdLog
		binary.LittleEndian.PutUint16(prefix[k+2:], uint16(len(prefix)+len(packet)-k-4))
	}
	return append(prefix, packet...), len(prefix)
}

func TestEmbeddedFrameMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	recovered := 0
	for i := range 5000 {
		body, at := embeddedCase(rng)
		want := CRC16(body[at:])
		if i%5 == 0 {
			want = uint16(rng.UintN(1 << 16)) // usually nothing to recover
		}
		got, ref := embeddedFrame(body, want), embeddedFrameScan(body, want)
		if got != ref {
			t.Fatalf("case %d: embeddedFrame %d, scan %d (packet at %d, %d bytes)", i, got, ref, at, len(body))
		}
		if i%5 != 0 && got != at {
			t.Fatalf("case %d: recovered offset %d, packet at %d", i, got, at)
		}
		if got > 0 {
			recovered++
		}
	}
	if recovered < 3000 {
		t.Fatalf("only %d of 5000 cases recovered a frame", recovered)
	}
}

// When two offsets qualify (a wrapper and the packet it wraps whose CRCs
// happen to agree), the first wins, wrapper included.
func TestEmbeddedFrameFirstOffsetWins(t *testing.T) {
	packet := EncodeLogPacket(0xB0C0, time.Unix(1700000000, 0), []byte("payload"))
	wrapped := append([]byte{CmdMultiRadio, 1, 0, 0, 1, 0, 0, 0}, packet...)
	body := append([]byte{0x55, 0x66, 0x77}, wrapped...)
	want := CRC16(packet)
	// Bytes 2 and 3 of the wrapper are free: choose them so that the
	// wrapped frame has the CRC of the bare one.
	for v := range 1 << 16 {
		binary.LittleEndian.PutUint16(body[3+2:], uint16(v))
		if CRC16(body[3:]) == want {
			break
		}
	}
	if CRC16(body[3:]) != want {
		t.Fatal("no wrapper bytes give the bare packet's CRC")
	}
	if got := embeddedFrame(body, want); got != 3 {
		t.Fatalf("embeddedFrame = %d, want the wrapper at 3", got)
	}
	if got := embeddedFrame(body[3:], want); got != multiRadioHeaderLen {
		t.Fatalf("embeddedFrame without the prefix = %d, want the bare packet at %d", got, multiRadioHeaderLen)
	}
}

func FuzzEmbeddedFrame(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		body, at := embeddedCase(rng)
		f.Add(body, CRC16(body[at:]))
	}
	f.Add([]byte{0, CmdLog, 0, 12, 0}, uint16(0))
	f.Fuzz(func(t *testing.T, body []byte, want uint16) {
		if len(body) > 8<<10 {
			return // the reference scan is quadratic
		}
		if got, ref := embeddedFrame(body, want), embeddedFrameScan(body, want); got != ref {
			t.Fatalf("embeddedFrame %d, scan %d", got, ref)
		}
	})
}
