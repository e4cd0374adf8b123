// Package uper decodes ASN.1 values in the unaligned variant of the Packed
// Encoding Rules (ITU-T X.691, UPER), driven by a schema held as data.
//
// The schema describes only what UPER encoding depends on: component
// order, optionality, extension markers and additions, value and size
// constraints. Any ASN.1 module made of NULL, BOOLEAN, INTEGER,
// ENUMERATED, BIT STRING, OCTET STRING, SEQUENCE, SEQUENCE OF and CHOICE
// (as 3GPP RRC is) can be decoded. Malformed input yields an error; every
// length is checked against the bits that remain and the number of values
// a decode may create is bounded by the input size.
package uper

import (
	"errors"
	"fmt"
)

// ErrTruncated means the encoding ended before the value did.
var ErrTruncated = errors.New("uper: truncated encoding")

// maxLength caps every length determinant. X.691 fragments lengths of
// 16K and more; no RRC field reaches that, so a larger length is treated as
// malformed rather than reassembled.
const maxLength = 16383

// reader reads bits most significant first from a byte slice.
type reader struct {
	data []byte
	pos  int // next bit
	end  int // bit count
}

func newReader(data []byte) *reader {
	return &reader{data: data, end: len(data) * 8}
}

func (r *reader) remaining() int { return r.end - r.pos }

// bits reads n (at most 64) bits as an unsigned number.
func (r *reader) bits(n int) (uint64, error) {
	if n < 0 || n > 64 {
		return 0, fmt.Errorf("uper: bit-field of %d bits", n)
	}
	if n > r.remaining() {
		return 0, ErrTruncated
	}
	var v uint64
	for n > 0 {
		byteIdx, bitOff := r.pos/8, r.pos%8
		take := 8 - bitOff
		if take > n {
			take = n
		}
		chunk := uint64(r.data[byteIdx]>>(8-bitOff-take)) & (1<<take - 1)
		v = v<<take | chunk
		r.pos += take
		n -= take
	}
	return v, nil
}

// bitAt returns the bit at an absolute position already known to be in
// range (a presence bitmap that was skipped over).
func (r *reader) bitAt(pos int) bool {
	return r.data[pos/8]>>(7-pos%8)&1 == 1
}

func (r *reader) bit() (bool, error) {
	v, err := r.bits(1)
	return v == 1, err
}

// octets reads n whole octets that need not be byte-aligned.
func (r *reader) octets(n int) ([]byte, error) {
	if n < 0 || n*8 > r.remaining() {
		return nil, ErrTruncated
	}
	out := make([]byte, n)
	if r.pos%8 == 0 {
		copy(out, r.data[r.pos/8:])
		r.pos += n * 8
		return out, nil
	}
	for i := range out {
		v, err := r.bits(8)
		if err != nil {
			return nil, err
		}
		out[i] = byte(v)
	}
	return out, nil
}

// bitString reads n bits into a left-aligned byte slice.
func (r *reader) bitString(n int) ([]byte, error) {
	if n < 0 || n > r.remaining() {
		return nil, ErrTruncated
	}
	out, err := r.octets(n / 8)
	if err != nil {
		return nil, err
	}
	if rest := n % 8; rest > 0 {
		v, err := r.bits(rest)
		if err != nil {
			return nil, err
		}
		out = append(out, byte(v<<(8-rest)))
	}
	return out, nil
}

// bitsFor is the width of a constrained whole number with the given
// range (X.691 11.5.7.1, unaligned: the minimum number of bits).
func bitsFor(valueRange uint64) int {
	n := 0
	for valueRange > 1<<n && n < 64 {
		n++
	}
	return n
}

// constrainedWhole reads a constrained whole number in lb..ub.
func (r *reader) constrainedWhole(lb, ub int64) (int64, error) {
	if ub < lb {
		return 0, fmt.Errorf("uper: empty range %d..%d", lb, ub)
	}
	span := uint64(ub - lb)
	if span == 0 {
		return lb, nil
	}
	width := 64
	if span < 1<<63 {
		width = bitsFor(span + 1)
	}
	v, err := r.bits(width)
	if err != nil {
		return 0, err
	}
	if v > span {
		return 0, fmt.Errorf("uper: value offset %d above range %d..%d", v, lb, ub)
	}
	return lb + int64(v), nil
}

// length reads a length determinant. With an upper bound below 64K it is
// a constrained whole number (absent when lb == ub); otherwise the general
// form of X.691 11.9.3.6-8, where fragmentation is rejected.
func (r *reader) length(lb int64, ub int64, bounded bool) (int, error) {
	if bounded && ub < 65536 {
		n, err := r.constrainedWhole(lb, ub)
		if err != nil {
			return 0, err
		}
		if n > maxLength {
			return 0, fmt.Errorf("uper: length %d above %d", n, maxLength)
		}
		return int(n), nil
	}
	first, err := r.bits(8)
	if err != nil {
		return 0, err
	}
	switch {
	case first&0x80 == 0:
		return int(first), nil
	case first&0xC0 == 0x80:
		second, err := r.bits(8)
		if err != nil {
			return 0, err
		}
		n := int(first&0x3F)<<8 | int(second)
		if n > maxLength {
			return 0, fmt.Errorf("uper: length %d above %d", n, maxLength)
		}
		return n, nil
	default:
		return 0, errors.New("uper: fragmented length not supported")
	}
}

// normallySmall reads a normally small non-negative whole number
// (X.691 11.6), used for extension indexes.
func (r *reader) normallySmall() (int, error) {
	large, err := r.bit()
	if err != nil {
		return 0, err
	}
	if !large {
		v, err := r.bits(6)
		return int(v), err
	}
	n, err := r.length(0, 0, false)
	if err != nil {
		return 0, err
	}
	if n == 0 || n > 8 {
		return 0, fmt.Errorf("uper: normally small number of %d octets", n)
	}
	v, err := r.bits(8 * n)
	if err != nil {
		return 0, err
	}
	if v > maxLength {
		return 0, fmt.Errorf("uper: extension index %d above %d", v, maxLength)
	}
	return int(v), nil
}

// normallySmallLength reads a normally small length (X.691 11.9.3.4):
// the count of a SEQUENCE's extension additions.
func (r *reader) normallySmallLength() (int, error) {
	large, err := r.bit()
	if err != nil {
		return 0, err
	}
	if !large {
		v, err := r.bits(6)
		return int(v) + 1, err
	}
	n, err := r.length(0, 0, false)
	if err == nil && n == 0 {
		err = errors.New("uper: zero normally small length")
	}
	return n, err
}

// openType reads the octets of an open type (X.691 11.2): extension
// additions and extension alternatives are wrapped in one.
func (r *reader) openType() ([]byte, error) {
	n, err := r.length(0, 0, false)
	if err != nil {
		return nil, err
	}
	return r.octets(n)
}

// unconstrainedInt reads a length-prefixed integer. When lb is set the
// octets are a non-negative offset from lb (semi-constrained, X.691
// 11.7); otherwise they are two's complement (11.8).
func (r *reader) unconstrainedInt(lb *int64) (int64, error) {
	n, err := r.length(0, 0, false)
	if err != nil {
		return 0, err
	}
	if n == 0 || n > 8 {
		return 0, fmt.Errorf("uper: integer of %d octets", n)
	}
	v, err := r.bits(8 * n)
	if err != nil {
		return 0, err
	}
	if lb != nil {
		if v > 1<<62 {
			return 0, fmt.Errorf("uper: integer offset %d too large", v)
		}
		return *lb + int64(v), nil
	}
	shift := 64 - 8*n
	return int64(v<<shift) >> shift, nil
}
