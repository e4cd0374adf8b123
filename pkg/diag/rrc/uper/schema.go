package uper

import (
	"encoding/json"
	"fmt"
)

// Kind is the ASN.1 type class of a schema node.
type Kind uint8

// The type classes a schema can hold.
const (
	KindNull Kind = iota
	KindBool
	KindInt
	KindEnum
	KindBitString
	KindOctetString
	KindSequence
	KindSequenceOf
	KindChoice
)

var kindByToken = map[string]Kind{
	"null": KindNull, "bool": KindBool, "int": KindInt, "enum": KindEnum,
	"bits": KindBitString, "octets": KindOctetString, "seq": KindSequence,
	"seqof": KindSequenceOf, "choice": KindChoice,
}

// bounds is a PER-visible value or size constraint.
type bounds struct {
	lb, ub       int64
	hasLB, hasUB bool
	extensible   bool
}

// Component is a SEQUENCE component or a CHOICE alternative.
type Component struct {
	Name     string
	Type     *Type
	Optional bool
}

// addition is one extension addition of a SEQUENCE: a single component or
// an extension group whose members are fields[first:first+count].
type addition struct {
	group *Type
	first int
	count int
}

// Type is one schema node.
type Type struct {
	Kind Kind
	Name string

	constraint bounds // INTEGER values; string and SEQUENCE OF sizes

	// ENUMERATED: root then extension enumerants.
	enumerants []string
	enumRoot   int
	extensible bool

	// SEQUENCE: root components then the members of every addition, in
	// order; CHOICE: root then extension alternatives.
	fields     []Component
	rootCount  int
	optCount   int
	additions  []addition
	fieldIndex map[string]int

	element *Type // SEQUENCE OF
}

// Schema is a set of named top-level types.
type Schema struct {
	roots map[string]*Type
}

// Root returns the top-level type of that name.
func (s *Schema) Root(name string) (*Type, bool) {
	t, ok := s.roots[name]
	return t, ok
}

// schemaFile is the JSON layout; its "source" member (provenance, for
// people) is not read.
type schemaFile struct {
	Roots map[string]int   `json:"roots"`
	Types []schemaFileNode `json:"types"`
}

type schemaFileNode struct {
	Kind    string            `json:"k"`
	Name    string            `json:"n"`
	Value   []*int64          `json:"v"`
	Size    []*int64          `json:"s"`
	Root    []json.RawMessage `json:"r"`
	Ext     []json.RawMessage `json:"x"`
	Element *int              `json:"c"`
}

// LoadSchema parses a schema produced by tools/rrc-oracle/gen_schema.py:
// {"roots": {name: index}, "types": [node...]} where a node is
// {"k": kind, "n": name, "v"/"s": [lb, ub, extensible], "r": root
// components, "x": extension additions or null, "c": element index}.
func LoadSchema(data []byte) (*Schema, error) {
	var file schemaFile
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("uper: schema: %w", err)
	}
	// Nodes refer only to earlier nodes, so one pass in order builds them.
	types := make([]Type, len(file.Types))
	for i := range file.Types {
		if err := buildType(&types[i], &file.Types[i], types[:i]); err != nil {
			return nil, fmt.Errorf("uper: schema type %d: %w", i, err)
		}
	}
	s := &Schema{roots: make(map[string]*Type, len(file.Roots))}
	for name, idx := range file.Roots {
		if idx < 0 || idx >= len(types) {
			return nil, fmt.Errorf("uper: schema root %s: index %d out of range", name, idx)
		}
		s.roots[name] = &types[idx]
	}
	return s, nil
}

func typeAt(types []Type, idx int) (*Type, error) {
	if idx < 0 || idx >= len(types) {
		return nil, fmt.Errorf("type index %d out of range", idx)
	}
	return &types[idx], nil
}

func parseBounds(v []*int64) (bounds, error) {
	if len(v) != 3 {
		return bounds{}, fmt.Errorf("constraint needs [lb, ub, extensible], got %d items", len(v))
	}
	var b bounds
	if v[0] != nil {
		b.lb, b.hasLB = *v[0], true
	}
	if v[1] != nil {
		b.ub, b.hasUB = *v[1], true
	}
	if b.hasLB && b.hasUB && b.ub < b.lb {
		return bounds{}, fmt.Errorf("empty constraint %d..%d", b.lb, b.ub)
	}
	b.extensible = v[2] != nil && *v[2] != 0
	return b, nil
}

// component decodes [name, typeIndex] or [name, typeIndex, optional].
func component(raw json.RawMessage, types []Type) (Component, error) {
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil || len(parts) < 2 {
		return Component{}, fmt.Errorf("bad component %s", raw)
	}
	var c Component
	var idx, opt int
	if err := json.Unmarshal(parts[0], &c.Name); err != nil {
		return Component{}, fmt.Errorf("component name: %w", err)
	}
	if err := json.Unmarshal(parts[1], &idx); err != nil {
		return Component{}, fmt.Errorf("component type: %w", err)
	}
	if len(parts) > 2 {
		if err := json.Unmarshal(parts[2], &opt); err != nil {
			return Component{}, fmt.Errorf("component optionality: %w", err)
		}
	}
	t, err := typeAt(types, idx)
	if err != nil {
		return Component{}, err
	}
	c.Type, c.Optional = t, opt != 0
	return c, nil
}

// buildType fills t from its file node; types holds the nodes already
// built, the only ones it may refer to. An "x" list (possibly empty)
// marks an extensible SEQUENCE, CHOICE or ENUMERATED, null a closed one.
func buildType(t *Type, n *schemaFileNode, types []Type) error {
	kind, ok := kindByToken[n.Kind]
	if !ok {
		return fmt.Errorf("unknown kind %q", n.Kind)
	}
	t.Kind, t.Name, t.extensible = kind, n.Name, n.Ext != nil
	var err error
	switch kind {
	case KindInt:
		t.constraint, err = parseBounds(n.Value)
	case KindBitString, KindOctetString:
		t.constraint, err = parseBounds(n.Size)
	case KindSequenceOf:
		if t.constraint, err = parseBounds(n.Size); err != nil {
			return err
		}
		if n.Element == nil {
			return fmt.Errorf("SEQUENCE OF without element type")
		}
		t.element, err = typeAt(types, *n.Element)
	case KindEnum:
		err = buildEnum(t, n)
	case KindSequence, KindChoice:
		err = buildConstructed(t, n, types)
	}
	return err
}

func buildEnum(t *Type, n *schemaFileNode) error {
	for _, raw := range append(append([]json.RawMessage{}, n.Root...), n.Ext...) {
		var name string
		if err := json.Unmarshal(raw, &name); err != nil {
			return fmt.Errorf("enumerant: %w", err)
		}
		t.enumerants = append(t.enumerants, name)
	}
	t.enumRoot = len(n.Root)
	if t.enumRoot == 0 {
		return fmt.Errorf("ENUMERATED without root enumerants")
	}
	return nil
}

func buildConstructed(t *Type, n *schemaFileNode, types []Type) error {
	t.fieldIndex = make(map[string]int)
	add := func(c Component) {
		t.fieldIndex[c.Name] = len(t.fields)
		t.fields = append(t.fields, c)
	}
	for _, raw := range n.Root {
		c, err := component(raw, types)
		if err != nil {
			return err
		}
		if c.Optional {
			t.optCount++
		}
		add(c)
	}
	t.rootCount = len(t.fields)
	if t.Kind == KindChoice && t.rootCount == 0 {
		return fmt.Errorf("CHOICE %s without root alternatives", t.Name)
	}
	for _, raw := range n.Ext {
		c, err := component(raw, types)
		if err != nil {
			return err
		}
		if t.Kind == KindChoice || c.Name != "" {
			t.additions = append(t.additions, addition{first: len(t.fields), count: 1})
			add(c)
			continue
		}
		// An extension group: its members become fields of this type.
		if c.Type.Kind != KindSequence || c.Type.extensible {
			return fmt.Errorf("extension group of %s is not a plain SEQUENCE", t.Name)
		}
		t.additions = append(t.additions, addition{group: c.Type, first: len(t.fields), count: len(c.Type.fields)})
		for _, member := range c.Type.fields {
			add(member)
		}
	}
	return nil
}
