package qcdiag_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag/qcdiagtest"
)

// escapeBytes escapes raw for the wire without adding a CRC or a flag.
func escapeBytes(raw []byte) []byte {
	out := make([]byte, 0, len(raw)+len(raw)/8+3)
	for _, b := range raw {
		if b == 0x7E || b == 0x7D {
			out = append(out, 0x7D, b^0x20)
			continue
		}
		out = append(out, b)
	}
	return out
}

// escapeWithCRC frames body followed by crc; unlike qcdiag.Escape it lets
// a test write a wrong CRC.
func escapeWithCRC(body []byte, crc uint16) []byte {
	return append(escapeBytes(binary.LittleEndian.AppendUint16(bytes.Clone(body), crc)), 0x7E)
}

// decoys is n bytes holding, at every 4th offset from 1, a log command
// whose outer length reaches exactly to tail bytes past the end: each is a
// candidate for frame recovery whose CRC does not match.
func decoys(n, tail int) []byte {
	b := make([]byte, n)
	for k := 1; k+16 <= n; k += 4 {
		b[k] = qcdiag.CmdLog
		binary.LittleEndian.PutUint16(b[k+2:], uint16(n+tail-k-4))
	}
	return b
}

// crcFailingFrame is one 65,000-byte frame full of decoys whose CRC is
// wrong, so the reader tries to recover a frame from it and finds none.
func crcFailingFrame() []byte {
	body := decoys(65000, 0)
	return escapeWithCRC(body, qcdiag.CRC16(body)^1)
}

// decoysThenFrame is the start of a 60,000-byte frame full of decoys whose
// end and flag were lost, followed by a whole 4,000-byte log packet frame:
// the reader must recover the packet from behind the decoys.
func decoysThenFrame() ([]byte, []byte) {
	payload := bytes.Repeat([]byte{0x7E, 0x10, 0x7D, 0x98, 0x33}, 4000/5)
	packet := qcdiagtest.EncodeLogPacket(0x1234, t0, payload)
	// The cut frame has neither CRC nor flag: its tail was lost.
	stream := escapeBytes(decoys(60000, len(packet)))
	return append(stream, qcdiag.Escape(packet)...), payload
}

func TestReaderRecoversFrameBehindDecoys(t *testing.T) {
	stream, payload := decoysThenFrame()
	packets, counters, stats := readAll(t, stream)
	require.Len(t, packets, 1)
	assert.Equal(t, uint16(0x1234), packets[0].Code)
	assert.Equal(t, payload, packets[0].Payload)
	assert.Equal(t, qcdiag.Counters{Frames: 1, Truncated: 1, LogPackets: 1, UnknownCodes: 1}, counters)
	assert.Equal(t, map[string]uint64{qcdiag.ReasonTruncatedFrame: 1}, errorCounts(stats))
}

func TestReaderCRCFailingFrameOfDecoys(t *testing.T) {
	stream := append(crcFailingFrame(), frame(0x4321, t0, []byte{1, 2, 3})...)
	packets, counters, stats := readAll(t, stream)
	require.Len(t, packets, 1)
	assert.Equal(t, uint16(0x4321), packets[0].Code)
	assert.Equal(t, qcdiag.Counters{Frames: 2, CRCErrors: 1, LogPackets: 1, UnknownCodes: 1}, counters)
	assert.Equal(t, map[string]uint64{qcdiag.ReasonCRC: 1}, errorCounts(stats))
}

// BenchmarkRecoveryCRCFailing reads one CRC-failing 65 KB frame with a
// recovery candidate at every 4th byte, the worst case of frame recovery.
func BenchmarkRecoveryCRCFailing(b *testing.B) {
	benchmarkStream(b, crcFailingFrame())
}

// BenchmarkRecoveryBehindDecoys recovers a whole frame from behind 60 KB of
// a truncated frame full of recovery candidates.
func BenchmarkRecoveryBehindDecoys(b *testing.B) {
	stream, _ := decoysThenFrame()
	benchmarkStream(b, stream)
}

func benchmarkStream(b *testing.B, stream []byte) {
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		r := qcdiag.NewReader(bytes.NewReader(stream), nil)
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
	}
}
