package diag

import (
	"encoding/json"
	"math"
)

// decodeRBAlloc decodes the usual form of an rb_alloc record without
// encoding/json: it is the one record a modem sends hundreds of times a
// second, and the reflective decoder costs ten times what this does. It
// reports false for any record it does not take; encoding/json decodes
// those. What it takes it decodes exactly as encoding/json would, since
// it takes only a subset of what that accepts: an object with the keys
// "v", "type" (which must be rb_alloc), "t", "cell", "slot_us" and
// "slots", each at most once and spelled as here; a cell object with
// "rat", "band", "pci" and "arfcn"; plain integers; strings without
// escapes or bytes beyond ASCII; slots of two numbers each; and nothing
// but white space around it all.
//
// The decoded "t" is a part of line, not a copy. The slots are not in
// the record's Slots but appended to pairs, given and total of each in
// turn, and returned apart: with room for them in pairs, on the caller's
// stack, decoding a record allocates once.
func decodeRBAlloc(line []byte, pairs []int64) (_ wireEvent, slots []int64, ok bool) {
	s := rbAllocScanner{b: line}
	var (
		out             wireEvent
		scanned         rbAllocValues
		cell            scannedCell
		seen            [6]bool
		isRBAlloc, done bool
	)
	if !s.consume('{') {
		return wireEvent{}, nil, false
	}
	for !done {
		key, ok := s.key()
		if !ok {
			return wireEvent{}, nil, false
		}
		field := rbAllocField(key)
		if field < 0 || seen[field] {
			return wireEvent{}, nil, false
		}
		seen[field] = true
		switch field {
		case fieldV:
			n, ok := s.integer()
			if !ok {
				return wireEvent{}, nil, false
			}
			scanned.v = int(n)
		case fieldType:
			t, ok := s.str()
			if !ok || string(t) != string(TypeRBAlloc) {
				return wireEvent{}, nil, false
			}
			out.Type, isRBAlloc = TypeRBAlloc, true
		case fieldT:
			raw, ok := s.timeValue()
			if !ok {
				return wireEvent{}, nil, false
			}
			out.T = json.RawMessage(raw)
		case fieldCell:
			if !s.cell(&cell) {
				return wireEvent{}, nil, false
			}
		case fieldSlotUS:
			if scanned.slotUS, ok = s.integer(); !ok {
				return wireEvent{}, nil, false
			}
		case fieldSlots:
			if slots, ok = s.slots(pairs); !ok {
				return wireEvent{}, nil, false
			}
		}
		if done, ok = s.next('}'); !ok {
			return wireEvent{}, nil, false
		}
	}
	if !isRBAlloc || !s.end() {
		return wireEvent{}, nil, false
	}
	if seen[fieldV] || seen[fieldSlotUS] || seen[fieldCell] {
		// Allocated once the record is known to be taken: others are
		// turned down without an allocation.
		out = out.pointTo(new(rbAllocValues), scanned, cell, seen)
	}
	return out, slots, true
}

// pointTo points w's fields that were seen to v, which it fills with
// scanned and cell.
func (w wireEvent) pointTo(v *rbAllocValues, scanned rbAllocValues, cell scannedCell, seen [6]bool) wireEvent {
	v.v, v.slotUS = scanned.v, scanned.slotUS
	if seen[fieldV] {
		w.V = &v.v
	}
	if seen[fieldSlotUS] {
		w.SlotUS = &v.slotUS
	}
	if seen[fieldCell] {
		v.pci, v.arfcn = cell.pci, cell.arfcn
		v.cell.RAT, v.cell.Band = cell.rat, cell.band
		if cell.seen[fieldPCI] {
			v.cell.PCI = &v.pci
		}
		if cell.seen[fieldARFCN] {
			v.cell.ARFCN = &v.arfcn
		}
		w.Cell = &v.cell
	}
	return w
}

// rbAllocValues are the values the pointers of a decoded rb_alloc record
// point to, allocated together.
type rbAllocValues struct {
	v          int
	slotUS     int64
	cell       wireCell
	pci, arfcn int64
}

// scannedCell is a cell object as read.
type scannedCell struct {
	rat        RAT
	band       Band
	pci, arfcn int64
	seen       [4]bool
}

// Fields of an rb_alloc record.
const (
	fieldV = iota
	fieldType
	fieldT
	fieldCell
	fieldSlotUS
	fieldSlots
)

func rbAllocField(key []byte) int {
	switch string(key) {
	case "v":
		return fieldV
	case "type":
		return fieldType
	case "t":
		return fieldT
	case "cell":
		return fieldCell
	case "slot_us":
		return fieldSlotUS
	case "slots":
		return fieldSlots
	}
	return -1
}

// rbAllocScanner reads the JSON of decodeRBAlloc; every method reports
// false on anything outside it.
type rbAllocScanner struct {
	b []byte
	i int
}

func (s *rbAllocScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// consume skips white space and then c.
func (s *rbAllocScanner) consume(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// next reads the separator after a member or element: a comma (more
// follow) or closing (done).
func (s *rbAllocScanner) next(closing byte) (done, ok bool) {
	s.space()
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case ',':
			s.i++
			return false, true
		case closing:
			s.i++
			return true, true
		}
	}
	return false, false
}

// end says whether only white space is left.
func (s *rbAllocScanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// str reads a string of printable ASCII without escapes.
func (s *rbAllocScanner) str() ([]byte, bool) {
	if !s.consume('"') {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// key reads a member's name and its colon.
func (s *rbAllocScanner) key() ([]byte, bool) {
	k, ok := s.str()
	return k, ok && s.consume(':')
}

// integer reads an integer without fraction or exponent that fits an
// int64 (a negative one down to -math.MaxInt64).
func (s *rbAllocScanner) integer() (int64, bool) {
	s.space()
	negative := s.i < len(s.b) && s.b[s.i] == '-'
	if negative {
		s.i++
	}
	start := s.i
	var n int64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		digit := int64(s.b[s.i] - '0')
		if n > (math.MaxInt64-digit)/10 {
			return 0, false
		}
		n = 10*n + digit
		s.i++
	}
	switch {
	case s.i == start:
		return 0, false
	case s.i-start > 1 && s.b[start] == '0': // not JSON
		return 0, false
	case s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E'):
		return 0, false
	}
	if negative {
		n = -n
	}
	return n, true
}

// timeValue reads "t", a string or a positive integer, as its raw JSON.
func (s *rbAllocScanner) timeValue() ([]byte, bool) {
	s.space()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '"' {
		_, ok := s.str()
		return s.b[start:s.i], ok
	}
	if n, ok := s.integer(); !ok || n <= 0 {
		return nil, false
	}
	return s.b[start:s.i], true
}

// Fields of a cell.
const (
	fieldRAT = iota
	fieldBand
	fieldPCI
	fieldARFCN
)

// cell reads a cell object.
func (s *rbAllocScanner) cell(c *scannedCell) bool {
	if !s.consume('{') {
		return false
	}
	for done := false; !done; {
		key, ok := s.key()
		if !ok {
			return false
		}
		field := -1
		switch string(key) {
		case "rat":
			field = fieldRAT
		case "band":
			field = fieldBand
		case "pci":
			field = fieldPCI
		case "arfcn":
			field = fieldARFCN
		}
		if field < 0 || c.seen[field] {
			return false
		}
		c.seen[field] = true
		switch field {
		case fieldRAT, fieldBand:
			v, ok := s.str()
			if !ok {
				return false
			}
			if field == fieldRAT {
				c.rat = knownRAT(v)
			} else {
				c.band = knownBand(v)
			}
		case fieldPCI, fieldARFCN:
			n, ok := s.integer()
			if !ok {
				return false
			}
			if field == fieldPCI {
				c.pci = n
			} else {
				c.arfcn = n
			}
		}
		if done, ok = s.next('}'); !ok {
			return false
		}
	}
	return true
}

// knownRAT converts v without a copy when it is a RAT of the contract.
func knownRAT(v []byte) RAT {
	switch RAT(v) {
	case RATLTE:
		return RATLTE
	case RATNR:
		return RATNR
	}
	return RAT(v)
}

// knownBand converts v without a copy when it is a band of the contract.
func knownBand(v []byte) Band {
	switch Band(v) {
	case BandSub6:
		return BandSub6
	case BandMmWave:
		return BandMmWave
	}
	return Band(v)
}

// slots reads a non-empty array of [given, total] pairs, appending
// given and total of each to pairs.
func (s *rbAllocScanner) slots(pairs []int64) ([]int64, bool) {
	if !s.consume('[') {
		return nil, false
	}
	for done := false; !done; {
		if !s.consume('[') {
			return nil, false
		}
		given, ok := s.integer()
		if !ok || !s.consume(',') {
			return nil, false
		}
		total, ok := s.integer()
		if !ok || !s.consume(']') {
			return nil, false
		}
		pairs = append(pairs, given, total)
		if done, ok = s.next(']'); !ok {
			return nil, false
		}
	}
	return pairs, true
}
