package datapath

import (
	"bytes"
	"encoding/binary"
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
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x6d32686f))

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
			for i := range segmentsPerFraming {
				if i%100 == 0 {
					freeze := rng.IntN(10) == 0
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
					floor := uint16(ceilShift(hostMSS, fl.shift))
					if after != 0 {
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
			assert.Zero(t, c.Malformed)
		})
	}
}

// withoutWindowAndChecksum copies frame with the TCP window and checksum
// fields zeroed.
func withoutWindowAndChecksum(frame []byte, l4 int) []byte {
	c := append([]byte(nil), frame...)
	clear(c[l4+tcpWindowOffset : l4+tcpChecksumOffset+2])
	return c
}
