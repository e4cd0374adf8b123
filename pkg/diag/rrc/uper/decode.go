package uper

import (
	"errors"
	"fmt"
)

// Value is a decoded ASN.1 value. Which fields are meaningful depends on
// the kind of its type:
//   - INTEGER: Int; BOOLEAN: Int 0 or 1; ENUMERATED: Int is the enumerant
//     index (root first, then extension enumerants)
//   - BIT STRING: Bytes (left aligned) and Bits; OCTET STRING: Bytes
//   - SEQUENCE: Children, one per component of the type in order (up to
//     the root components only when no extension addition was encoded),
//     with a nil Type for an absent one
//   - SEQUENCE OF: Children, the items
//   - CHOICE: Int is the alternative index and Children its value; an
//     extension alternative the schema does not know has a nil Type and its
//     encoding in Bytes
type Value struct {
	Type     *Type
	Int      int64
	Bytes    []byte
	Bits     int
	Children []Value
}

// Present reports whether the value was in the encoding.
func (v *Value) Present() bool { return v != nil && v.Type != nil }

// Integer returns Int, 0 for an absent value.
func (v *Value) Integer() int64 {
	if !v.Present() {
		return 0
	}
	return v.Int
}

// Field returns the named component of a SEQUENCE, or the alternative of
// a CHOICE when it is the one chosen; nil when absent or not applicable.
func (v *Value) Field(name string) *Value {
	if !v.Present() {
		return nil
	}
	i, ok := v.Type.fieldIndex[name]
	if !ok {
		return nil
	}
	switch v.Type.Kind {
	case KindSequence:
		// Children stops after the root when no addition was encoded.
		if i < len(v.Children) && v.Children[i].Present() {
			return &v.Children[i]
		}
	case KindChoice:
		if int(v.Int) == i && len(v.Children) == 1 && v.Children[0].Present() {
			return &v.Children[0]
		}
	}
	return nil
}

// Path follows Field through each name in turn.
func (v *Value) Path(names ...string) *Value {
	for _, name := range names {
		v = v.Field(name)
	}
	return v
}

// Chosen returns the name and value of a CHOICE's alternative; the name
// is empty for an extension alternative the schema does not know.
func (v *Value) Chosen() (string, *Value) {
	if !v.Present() || v.Type.Kind != KindChoice || len(v.Children) != 1 {
		return "", nil
	}
	if int(v.Int) >= len(v.Type.fields) {
		return "", nil
	}
	return v.Type.fields[v.Int].Name, &v.Children[0]
}

// Enumerant returns the name of an ENUMERATED value, empty for an
// extension enumerant the schema does not know.
func (v *Value) Enumerant() string {
	if !v.Present() || v.Type.Kind != KindEnum || v.Int < 0 || int(v.Int) >= len(v.Type.enumerants) {
		return ""
	}
	return v.Type.enumerants[v.Int]
}

// Items returns the items of a SEQUENCE OF (nil when absent).
func (v *Value) Items() []Value {
	if !v.Present() || v.Type.Kind != KindSequenceOf {
		return nil
	}
	return v.Children
}

// ErrBudget means a decode would create more values than its input can
// justify, the signature of a crafted encoding.
var ErrBudget = errors.New("uper: value budget exhausted")

// decoder carries the per-call state: the value budget bounds allocation
// to a multiple of the input size whatever the encoding claims, and
// values are carved from slabs to keep allocations few.
type decoder struct {
	budget int
	slab   []Value
}

// slabMin is the smallest slab of values; messages of a few bytes need a
// few dozen values.
const slabMin = 32

// values returns n zero values for the children of one value.
func (d *decoder) values(n int) []Value {
	if n == 0 {
		return nil
	}
	if cap(d.slab)-len(d.slab) < n {
		d.slab = make([]Value, 0, max(n, 2*cap(d.slab), slabMin))
	}
	start := len(d.slab)
	d.slab = d.slab[:start+n]
	return d.slab[start : start+n : start+n]
}

// budgetBase and budgetPerBit size the value budget of a decode: the
// 6,000 RRC messages of the shared captures use at most a quarter of it
// (a 132-byte LTE reconfiguration; large messages make under 0.1 value
// per bit), and a 9,000-byte PDU can make at most 145k values (10 MB).
const (
	budgetBase   = 512
	budgetPerBit = 2
)

// Decode decodes data as one value of type t. Bits after the value
// (padding to the octet) are ignored.
func Decode(t *Type, data []byte) (Value, error) {
	d := decoder{budget: budgetBase + budgetPerBit*8*len(data)}
	var v Value
	if err := d.value(newReader(data), t, &v); err != nil {
		return Value{}, err
	}
	return v, nil
}

func (d *decoder) spend(n int) error {
	d.budget -= n
	if d.budget < 0 {
		return ErrBudget
	}
	return nil
}

func (d *decoder) value(r *reader, t *Type, v *Value) error {
	if err := d.spend(1); err != nil {
		return err
	}
	v.Type = t
	switch t.Kind {
	case KindNull:
		return nil
	case KindBool:
		b, err := r.bit()
		if b {
			v.Int = 1
		}
		return err
	case KindInt:
		return d.integer(r, t, v)
	case KindEnum:
		return d.enumerated(r, t, v)
	case KindBitString, KindOctetString:
		return d.str(r, t, v)
	case KindSequence:
		return d.sequence(r, t, v)
	case KindSequenceOf:
		return d.sequenceOf(r, t, v)
	case KindChoice:
		return d.choice(r, t, v)
	}
	return fmt.Errorf("uper: %s: unknown kind %d", t.Name, t.Kind)
}

// extended reads the extension bit that precedes extensible encodings.
func extended(r *reader, extensible bool) (bool, error) {
	if !extensible {
		return false, nil
	}
	return r.bit()
}

func (d *decoder) integer(r *reader, t *Type, v *Value) error {
	c := t.constraint
	ext, err := extended(r, c.extensible)
	if err != nil {
		return err
	}
	switch {
	case ext || !c.hasLB:
		v.Int, err = r.unconstrainedInt(nil)
	case c.hasUB:
		v.Int, err = r.constrainedWhole(c.lb, c.ub)
	default:
		v.Int, err = r.unconstrainedInt(&c.lb)
	}
	return err
}

func (d *decoder) enumerated(r *reader, t *Type, v *Value) error {
	ext, err := extended(r, t.extensible)
	if err != nil {
		return err
	}
	if ext {
		idx, err := r.normallySmall()
		v.Int = int64(t.enumRoot + idx)
		return err
	}
	v.Int, err = r.constrainedWhole(0, int64(t.enumRoot-1))
	return err
}

// size reads the item count or length of a string or SEQUENCE OF
// (X.691 16, 17, 20): absent when fixed below 64K, otherwise a length
// determinant.
func size(r *reader, c bounds) (int, error) {
	ext, err := extended(r, c.extensible)
	if err != nil {
		return 0, err
	}
	if ext || !c.hasUB {
		return r.length(0, 0, false)
	}
	if c.lb == c.ub && c.ub < 65536 {
		if c.ub > maxLength {
			return 0, fmt.Errorf("uper: fixed size %d above %d", c.ub, maxLength)
		}
		return int(c.ub), nil
	}
	return r.length(c.lb, c.ub, true)
}

func (d *decoder) str(r *reader, t *Type, v *Value) error {
	n, err := size(r, t.constraint)
	if err != nil {
		return err
	}
	if t.Kind == KindBitString {
		v.Bits = n
		v.Bytes, err = r.bitString(n)
		return err
	}
	v.Bytes, err = r.octets(n)
	return err
}

func (d *decoder) sequenceOf(r *reader, t *Type, v *Value) error {
	n, err := size(r, t.constraint)
	if err != nil {
		return err
	}
	if err := d.spend(n); err != nil {
		return err
	}
	v.Children = d.values(n)
	for i := range v.Children {
		if err := d.value(r, t.element, &v.Children[i]); err != nil {
			return fmt.Errorf("%s[%d]: %w", t.Name, i, err)
		}
	}
	return nil
}

func (d *decoder) sequence(r *reader, t *Type, v *Value) error {
	ext, err := extended(r, t.extensible)
	if err != nil {
		return err
	}
	// The presence bitmap precedes the components; it may exceed 64 bits,
	// so it is read in place as each optional component comes up.
	presence := r.pos
	if t.optCount > r.remaining() {
		return ErrTruncated
	}
	r.pos += t.optCount
	width := t.rootCount
	if ext {
		width = len(t.fields)
	}
	if err := d.spend(width); err != nil {
		return err
	}
	v.Children = d.values(width)
	for i, f := range t.fields[:t.rootCount] {
		if f.Optional {
			isPresent := r.bitAt(presence)
			presence++
			if !isPresent {
				continue
			}
		}
		if err := d.value(r, f.Type, &v.Children[i]); err != nil {
			return fmt.Errorf("%s.%s: %w", t.Name, f.Name, err)
		}
	}
	if !ext {
		return nil
	}
	return d.additions(r, t, v)
}

// additions reads the extension additions of a SEQUENCE (X.691 19.7-9):
// a normally small length, a presence bitmap, then each present addition
// as an open type. Additions beyond the schema are skipped.
func (d *decoder) additions(r *reader, t *Type, v *Value) error {
	count, err := r.normallySmallLength()
	if err != nil {
		return err
	}
	if count > r.remaining() {
		return ErrTruncated
	}
	present := make([]bool, count)
	for i := range present {
		if present[i], err = r.bit(); err != nil {
			return err
		}
	}
	for i, isPresent := range present {
		if !isPresent {
			continue
		}
		content, err := r.openType()
		if err != nil {
			return fmt.Errorf("%s extension %d: %w", t.Name, i, err)
		}
		if i >= len(t.additions) {
			continue
		}
		add := t.additions[i]
		sub := newReader(content)
		if add.group == nil {
			if err := d.value(sub, t.fields[add.first].Type, &v.Children[add.first]); err != nil {
				return fmt.Errorf("%s.%s: %w", t.Name, t.fields[add.first].Name, err)
			}
			continue
		}
		var group Value
		if err := d.value(sub, add.group, &group); err != nil {
			return fmt.Errorf("%s extension group %d: %w", t.Name, i, err)
		}
		copy(v.Children[add.first:add.first+add.count], group.Children)
	}
	return nil
}

func (d *decoder) choice(r *reader, t *Type, v *Value) error {
	ext, err := extended(r, t.extensible)
	if err != nil {
		return err
	}
	v.Children = d.values(1)
	if !ext {
		idx, err := r.constrainedWhole(0, int64(t.rootCount-1))
		if err != nil {
			return err
		}
		v.Int = idx
		f := t.fields[idx]
		if err := d.value(r, f.Type, &v.Children[0]); err != nil {
			return fmt.Errorf("%s.%s: %w", t.Name, f.Name, err)
		}
		return nil
	}
	idx, err := r.normallySmall()
	if err != nil {
		return err
	}
	content, err := r.openType()
	if err != nil {
		return fmt.Errorf("%s extension alternative %d: %w", t.Name, idx, err)
	}
	v.Int = int64(t.rootCount + idx)
	if int(v.Int) >= len(t.fields) {
		v.Children[0].Bytes = content
		return nil
	}
	f := t.fields[v.Int]
	if err := d.value(newReader(content), f.Type, &v.Children[0]); err != nil {
		return fmt.Errorf("%s.%s: %w", t.Name, f.Name, err)
	}
	return nil
}
