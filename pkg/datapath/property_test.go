package datapath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRandomSegmentsOnlyWindowChanges sends thousands of random valid TCP
// segments through egress with a random clamp: the verdict is always pass
// (no suppression), the checksum stays valid, only the window and checksum
// bytes change, and the window never grows nor, outside freeze, drops
// below one MSS unless it already was. One in eight data-bearing segments
// is a BIG TCP GSO packet, whose IP length field is 0.
func TestRandomSegmentsOnlyWindowChanges(t *testing.T) {
	const segmentsPerFraming = 1500
	rng := seededRand(t, 0x6d32686f)

	for _, f := range framings {
		t.Run(f.name, func(t *testing.T) {
			d := datapathFor(t, f)
			// flows with every window scale, handshakes seen
			type flow struct {
				seg   segment
				shift int
			}
			flows := make([]flow, 15)
			for shift := range flows {
				s := freshPorts(segment{ipv6: f.ipv6, ethernet: f.ethernet, vlans: f.vlans})
				handshake(t, d, s, shift, 1)
				flows[shift] = flow{s, shift}
			}
			changed, bigChanged := 0, 0
			freeze := false
			for i := range segmentsPerFraming {
				if i%100 == 0 {
					freeze = rng.IntN(10) == 0
					if freeze {
						require.NoError(t, d.SetFreeze(time.Now().Add(time.Minute)))
					} else {
						require.NoError(t, d.SetClamp(rng.Uint32N(1<<24), time.Now().Add(time.Minute)))
					}
				}
				fl := flows[rng.IntN(len(flows))]
				seg := hostACK(fl.seg, uint16(rng.Uint32N(1<<16)), rng.IntN(1400))
				seg.seq, seg.ack = rng.Uint32(), rng.Uint32()
				seg.psh = rng.IntN(2) == 0
				seg.fin = rng.IntN(20) == 0
				seg.timestamps = rng.IntN(2) == 0
				seg.tsval, seg.tsecr = rng.Uint32(), rng.Uint32()
				seg.sack = rng.IntN(3) == 0
				if f.ipv6 && rng.IntN(4) == 0 {
					seg.ipv6Ext = []uint8{0, 60}[:1+rng.IntN(2)]
				}
				if !f.ipv6 && rng.IntN(4) == 0 {
					seg.ipv4Options = true
				}
				frame, l4 := seg.build(t)
				run := d.egress
				bigTCP := seg.payload > 0 && rng.IntN(8) == 0
				if bigTCP {
					// a GSO packet whose length field BIG TCP leaves at 0
					seg.clearIPLength(frame)
					run = d.egressGSO
				}
				verdict, out := run(t, frame)
				require.Equal(t, int32(verdictPass), verdict)
				require.Len(t, out, len(frame))
				assert.True(t, tcpChecksumOK(out, l4, seg.ipv6, seg.l3Offset()), "checksum of segment %d", i)
				assert.True(t, bytes.Equal(withoutWindowAndChecksum(frame, l4), withoutWindowAndChecksum(out, l4)),
					"segment %d: bytes other than window and checksum changed", i)
				before, after := tcpWindow(frame, l4), tcpWindow(out, l4)
				assert.LessOrEqual(t, after, before, "window raised")
				if after != before {
					changed++
					if bigTCP {
						bigChanged++
					}
					if freeze {
						assert.Zero(t, after, "a window left open by freeze")
					} else {
						floor := uint16(ceilShift(hostMSS, fl.shift))
						assert.GreaterOrEqual(t, after, min(before, floor), "below one MSS")
					}
				} else {
					assert.Equal(t, binary.BigEndian.Uint16(frame[l4+16:]), binary.BigEndian.Uint16(out[l4+16:]))
				}
			}
			assert.Positive(t, changed)
			assert.Positive(t, bigChanged, "BIG TCP segments clamped")
			c, err := d.Counters()
			require.NoError(t, err)
			assert.Zero(t, c[m2hoCounterIdCNT_MALFORMED])
		})
	}
}

// seededRand is a generator seeded from the clock, on stream; the seed is
// logged, so that a failure can be replayed.
func seededRand(t *testing.T, stream uint64) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, stream))
}

// withoutWindowAndChecksum copies frame with the TCP window and checksum
// fields zeroed.
func withoutWindowAndChecksum(frame []byte, l4 int) []byte {
	c := append([]byte(nil), frame...)
	clear(c[l4+tcpWindowOffset : l4+tcpChecksumOffset+2])
	return c
}

// TestCorruptedSegmentsPassUnchanged corrupts thousands of ACKs and data
// segments of clamped flows, as a faulty link or a hostile peer may: cut
// short, or with random header bytes overwritten. Whatever comes of it,
// both programs pass it; ingress leaves it as it was; egress leaves it as
// it was or lowers one window field, with the checksum moved by exactly
// that change (RFC 1624), so a packet whose checksum was valid stays
// valid. A truncated packet, whose IP length states more bytes than it
// holds, passes byte for byte.
func TestCorruptedSegmentsPassUnchanged(t *testing.T) {
	const segmentsPerFraming = 2000
	rng := seededRand(t, 0x636f7272)

	for _, f := range framings {
		t.Run(f.name, func(t *testing.T) {
			d := datapathFor(t, f)
			flows := make([]segment, 4)
			for i := range flows {
				flows[i] = freshPorts(segment{ipv6: f.ipv6, ethernet: f.ethernet, vlans: f.vlans})
				handshake(t, d, flows[i], 7, 7)
			}
			require.NoError(t, d.SetClamp(4096, time.Now().Add(time.Minute)))
			var truncated, untouched, lowered int
			for i := range segmentsPerFraming {
				fl := flows[rng.IntN(len(flows))]
				seg := hostACK(fl, 50000, rng.IntN(3)*700)
				if rng.IntN(2) == 0 {
					seg = peerData(fl, rng.Uint32N(1<<20), rng.IntN(1400))
				}
				seg.timestamps = rng.IntN(2) == 0
				seg.sack = rng.IntN(4) == 0
				frame, l4 := seg.build(t)
				cut := rng.IntN(3) == 0
				if cut {
					shortest := shortestRunnable(frame)
					frame = frame[:shortest+rng.IntN(len(frame)-shortest)]
					truncated++
				} else {
					// headers and the first payload bytes
					headers := min(len(frame), l4+60)
					for range 1 + rng.IntN(4) {
						frame[rng.IntN(headers)] = byte(rng.Uint32())
					}
				}

				verdict, out := d.ingress(t, append([]byte(nil), frame...))
				require.Equal(t, int32(verdictPass), verdict, "ingress, segment %d: % x", i, frame)
				require.Equal(t, frame, out, "ingress changed segment %d", i)

				verdict, out = d.egress(t, append([]byte(nil), frame...))
				require.Equal(t, int32(verdictPass), verdict, "egress, segment %d: % x", i, frame)
				switch {
				case bytes.Equal(frame, out):
					if !cut {
						untouched++
					}
				case cut:
					require.Fail(t, "egress changed a truncated segment", "segment %d:\n in % x\nout % x", i, frame, out)
				default:
					require.NoError(t, windowLowered(frame, out), "segment %d:\n in % x\nout % x", i, frame, out)
					lowered++
				}
			}
			t.Logf("%d segments truncated; of the corrupted ones, egress left %d untouched and lowered the window of %d",
				truncated, untouched, lowered)
			assert.Positive(t, truncated)
			assert.Positive(t, lowered, "segments whose corruption left a clamped ACK")
		})
	}
}

// shortestRunnable is the shortest prefix of frame that BPF_PROG_RUN runs
// a tc program on: it reads the first 14 bytes as an Ethernet header,
// whatever the link, and refuses one of type IPv4 or IPv6 with less than
// that IP header after it. The programs handle shorter packets (the
// fixtures of TestPassUntouched); the kernel's test harness does not take
// them.
func shortestRunnable(frame []byte) int {
	const ethernetHeader, ipv4Header, ipv6Header = 14, 20, 40
	switch binary.BigEndian.Uint16(frame[12:]) {
	case 0x0800:
		return ethernetHeader + ipv4Header
	case 0x86dd:
		return ethernetHeader + ipv6Header
	}
	return ethernetHeader
}

// windowLowered checks that out differs from in only in a TCP window field
// that went down and the checksum two bytes after it, by the window's
// change (RFC 1624, eqn. 3, compared modulo 0xffff since the one's
// complement sum has two zeros).
func windowLowered(in, out []byte) error {
	if len(in) != len(out) {
		return fmt.Errorf("length %d became %d", len(in), len(out))
	}
	first, last := -1, -1
	for i := range in {
		if in[i] != out[i] {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	// the window's high byte may be unchanged, its low byte and the
	// checksum's never all are
	for _, w := range []int{first, first - 1} {
		if w < 0 || last > w+3 || w+4 > len(in) {
			continue
		}
		oldWindow, newWindow := binary.BigEndian.Uint16(in[w:]), binary.BigEndian.Uint16(out[w:])
		oldSum, newSum := binary.BigEndian.Uint16(in[w+2:]), binary.BigEndian.Uint16(out[w+2:])
		if newWindow >= oldWindow {
			continue
		}
		if onesComplementSum(^oldSum, ^oldWindow, newWindow)%0xffff != uint32(^newSum)%0xffff {
			return fmt.Errorf("checksum %#04x became %#04x for window %d to %d", oldSum, newSum, oldWindow, newWindow)
		}
		return nil
	}
	return fmt.Errorf("bytes %d to %d changed, not one lowered window and its checksum", first, last)
}

// onesComplementSum adds 16-bit words with end-around carry.
func onesComplementSum(words ...uint16) uint32 {
	var sum uint32
	for _, w := range words {
		sum += uint32(w)
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum
}

// TestWindowLowered checks the check itself on a segment whose window a
// clamp took down, and on outputs that must fail it.
func TestWindowLowered(t *testing.T) {
	s := freshPorts(segment{})
	in, l4 := hostACK(s, 5000, 0).build(t)
	lowered, _ := hostACK(s, 300, 0).build(t)
	require.True(t, tcpChecksumOK(lowered, l4, false, 0))
	edit := func(frame []byte, f func([]byte) []byte) []byte { return f(append([]byte(nil), frame...)) }
	tests := []struct {
		name    string
		out     []byte
		wantErr string
	}{
		{"lowered, checksum updated", lowered, ""},
		{"lowered, checksum kept", edit(lowered, func(b []byte) []byte {
			copy(b[l4+tcpChecksumOffset:], in[l4+tcpChecksumOffset:l4+tcpChecksumOffset+2])
			return b
		}), "checksum"},
		{"raised", edit(in, func(b []byte) []byte { binary.BigEndian.PutUint16(b[l4+tcpWindowOffset:], 6000); return b }), "not one lowered window"},
		{"another byte changed too", edit(lowered, func(b []byte) []byte { b[l4]++; return b }), "not one lowered window"},
		{"shorter", lowered[:len(lowered)-1], "length"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := windowLowered(in, tc.out)
			if tc.wantErr == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tc.wantErr)
			}
		})
	}
}
