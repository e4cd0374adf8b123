package qcdiag

// crcTables are the CRC-16/X.25 tables (reflected polynomial 0x8408) that
// Qualcomm DIAG appends to every HDLC frame: crcTables[0] is the classic
// byte table, crcTables[k] advances a byte that is k positions further
// from the end of an 8-byte block, so that 8 bytes cost 8 lookups and no
// dependency chain (slicing-by-8).
var crcTables = func() (t [8][256]uint16) {
	for i := range t[0] {
		c := uint16(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0x8408
			} else {
				c >>= 1
			}
		}
		t[0][i] = c
	}
	for k := 1; k < len(t); k++ {
		for i := range t[k] {
			prev := t[k-1][i]
			t[k][i] = prev>>8 ^ t[0][byte(prev)]
		}
	}
	return t
}()

// crcInit is the register before the first byte (CRC-16/X.25 init).
const crcInit = 0xFFFF

// crcTableIndex inverts the high byte of crcTables[0]: the reflected
// polynomial's table has 256 distinct high bytes, so the high byte of a
// register after one step names the table entry that step used. It is what
// lets crcUnstep run the register backwards.
var crcTableIndex = func() (inv [256]uint8) {
	var seen [256]bool
	for i, v := range crcTables[0] {
		h := v >> 8
		if seen[h] {
			panic("qcdiag: CRC table high bytes are not distinct")
		}
		seen[h] = true
		inv[h] = uint8(i)
	}
	return inv
}()

// crcUnstep is the inverse of one byte step of the CRC register: given the
// register after x was fed, it returns the register before. A step is
// c' = c>>8 ^ T[byte(c)^x]; the high byte of c' is that of the table entry
// (c>>8 has none), which gives the index, and from it both bytes of c.
func crcUnstep(after uint16, x byte) uint16 {
	i := crcTableIndex[after>>8]
	high := byte(after) ^ byte(crcTables[0][i])
	return uint16(high)<<8 | uint16(i^x)
}

// CRC16 is CRC-16/X.25 (init and xorout 0xFFFF) of b.
func CRC16(b []byte) uint16 {
	c := uint16(crcInit)
	t := &crcTables
	for len(b) >= 8 {
		c ^= uint16(b[0]) | uint16(b[1])<<8
		c = t[7][byte(c)] ^ t[6][c>>8] ^ t[5][b[2]] ^ t[4][b[3]] ^
			t[3][b[4]] ^ t[2][b[5]] ^ t[1][b[6]] ^ t[0][b[7]]
		b = b[8:]
	}
	for _, x := range b {
		c = c>>8 ^ t[0][byte(c)^x]
	}
	return ^c
}
