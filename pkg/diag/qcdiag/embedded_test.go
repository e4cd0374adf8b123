package qcdiag_test

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag/qcdiagtest"
)

// embeddedFrameScan is the definition embeddedFrame implements: the first
// candidate offset whose suffix CRC is want, computing a CRC at each one.
func embeddedFrameScan(body []byte, want uint16) int {
	for k := 1; k < len(body); k++ {
		if qcdiag.EmbeddedStart(body, k) && qcdiag.CRC16(body[k:]) == want {
			return k
		}
	}
	return 0
}

// embeddedCase is a truncated frame start followed by a whole log packet,
// bare or in the multi-radio wrapper, as a frame whose flag was lost gives.
func embeddedCase(rng *rand.Rand) (body []byte, packetAt int) {
	payload := make([]byte, rng.IntN(300))
	for i := range payload {
		payload[i] = byte(rng.UintN(256))
	}
	packet := qcdiagtest.EncodeLogPacket(uint16(rng.UintN(1<<16)), time.Unix(1700000000, 0), payload)
	if rng.IntN(2) == 0 {
		packet = append([]byte{qcdiag.CmdMultiRadio, 1, 0, 0, 1, 0, 0, 0}, packet...)
	}
	prefix := make([]byte, 1+rng.IntN(200))
	for i := range prefix {
		switch rng.IntN(8) {
		case 0:
			prefix[i] = qcdiag.CmdLog
		case 1:
			prefix[i] = qcdiag.CmdMultiRadio
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
		prefix[k] = qcdiag.CmdLog
		binary.LittleEndian.PutUint16(prefix[k+2:], uint16(len(prefix)+len(packet)-k-4))
	}
	return append(prefix, packet...), len(prefix)
}

func TestEmbeddedFrameMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	recovered := 0
	for i := range 5000 {
		body, at := embeddedCase(rng)
		want := qcdiag.CRC16(body[at:])
		if i%5 == 0 {
			want = uint16(rng.UintN(1 << 16)) // usually nothing to recover
		}
		got, ref := qcdiag.EmbeddedFrame(body, want), embeddedFrameScan(body, want)
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
	packet := qcdiagtest.EncodeLogPacket(0xB0C0, time.Unix(1700000000, 0), []byte("payload"))
	wrapped := append([]byte{qcdiag.CmdMultiRadio, 1, 0, 0, 1, 0, 0, 0}, packet...)
	body := append([]byte{0x55, 0x66, 0x77}, wrapped...)
	want := qcdiag.CRC16(packet)
	// Bytes 2 and 3 of the wrapper are free: choose them so that the
	// wrapped frame has the CRC of the bare one.
	for v := range 1 << 16 {
		binary.LittleEndian.PutUint16(body[3+2:], uint16(v))
		if qcdiag.CRC16(body[3:]) == want {
			break
		}
	}
	if qcdiag.CRC16(body[3:]) != want {
		t.Fatal("no wrapper bytes give the bare packet's CRC")
	}
	if got := qcdiag.EmbeddedFrame(body, want); got != 3 {
		t.Fatalf("embeddedFrame = %d, want the wrapper at 3", got)
	}
	if got := qcdiag.EmbeddedFrame(body[3:], want); got != qcdiag.MultiRadioHeaderLen {
		t.Fatalf("embeddedFrame without the prefix = %d, want the bare packet at %d", got, qcdiag.MultiRadioHeaderLen)
	}
}

func FuzzEmbeddedFrame(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		body, at := embeddedCase(rng)
		f.Add(body, qcdiag.CRC16(body[at:]))
	}
	f.Add([]byte{0, qcdiag.CmdLog, 0, 12, 0}, uint16(0))
	f.Fuzz(func(t *testing.T, body []byte, want uint16) {
		if len(body) > 8<<10 {
			return // the reference scan is quadratic
		}
		if got, ref := qcdiag.EmbeddedFrame(body, want), embeddedFrameScan(body, want); got != ref {
			t.Fatalf("embeddedFrame %d, scan %d", got, ref)
		}
	})
}
