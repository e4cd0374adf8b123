package qcdiag

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

// bitwiseCRC16 is the textbook definition, one bit at a time.
func bitwiseCRC16(b []byte) uint16 {
	c := uint16(0xFFFF)
	for _, x := range b {
		c ^= uint16(x)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0x8408
			} else {
				c >>= 1
			}
		}
	}
	return ^c
}

func TestCRC16(t *testing.T) {
	// 0x906E is the published check value of CRC-16/X-25 for "123456789".
	assert.Equal(t, uint16(0x906E), CRC16([]byte("123456789")))
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 70 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		assert.Equal(t, bitwiseCRC16(b), CRC16(b), "length %d", n)
	}
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
