package uper

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testSchema exercises every construct of the schema format:
//
//	Small ::= INTEGER (0..7)
//	E3 ::= ENUMERATED {a, b, c}
//	E2x ::= ENUMERATED {a, b, ..., c}
//	Wide ::= INTEGER (0..65535, ...)
//	List ::= SEQUENCE (SIZE (1..4)) OF Small
//	S ::= SEQUENCE { a Small, b BOOLEAN OPTIONAL, c E3, ...,
//	                 e1 Small, [[ g1 Small, g2 BOOLEAN OPTIONAL ]] }
//	C ::= CHOICE { x Small, y BOOLEAN, ..., z OCTET STRING }
//	Nulls ::= SEQUENCE OF NULL
const testSchema = `{"source":"test","roots":{"S":9,"C":10,"Small":0,"E3":2,"E2x":3,"Octets":4,
"Nibble":5,"Wide":6,"List":7,"Unconstrained":11,"Semi":12,"Nulls":14,"Many":15},"types":[
{"k":"int","v":[0,7,0]},
{"k":"bool"},
{"k":"enum","r":["a","b","c"],"x":null},
{"k":"enum","r":["a","b"],"x":["c"]},
{"k":"octets","s":[null,null,0]},
{"k":"bits","s":[4,4,0]},
{"k":"int","v":[0,65535,1]},
{"k":"seqof","s":[1,4,0],"c":0},
{"k":"seq","n":"G","r":[["g1",0,0],["g2",1,1]],"x":null},
{"k":"seq","n":"S","r":[["a",0,0],["b",1,1],["c",2,0]],"x":[["e1",0,1],["",8,1]]},
{"k":"choice","n":"C","r":[["x",0],["y",1]],"x":[["z",4]]},
{"k":"int","v":[null,null,0]},
{"k":"int","v":[10,null,0]},
{"k":"null"},
{"k":"seqof","s":[null,null,0],"c":13},
{"k":"seq","n":"Many","r":[["o0",0,1],["o1",0,1],["o2",0,1],["o3",0,1],["o4",0,1],["o5",0,1],["o6",0,1],["o7",0,1],
 ["o8",0,1],["o9",0,1],["o10",0,1],["o11",0,1],["o12",0,1],["o13",0,1],["o14",0,1],["o15",0,1],["o16",0,1],["o17",0,1],
 ["o18",0,1],["o19",0,1],["o20",0,1],["o21",0,1],["o22",0,1],["o23",0,1],["o24",0,1],["o25",0,1],["o26",0,1],["o27",0,1],
 ["o28",0,1],["o29",0,1],["o30",0,1],["o31",0,1],["o32",0,1],["o33",0,1],["o34",0,1],["o35",0,1],["o36",0,1],["o37",0,1],
 ["o38",0,1],["o39",0,1],["o40",0,1],["o41",0,1],["o42",0,1],["o43",0,1],["o44",0,1],["o45",0,1],["o46",0,1],["o47",0,1],
 ["o48",0,1],["o49",0,1],["o50",0,1],["o51",0,1],["o52",0,1],["o53",0,1],["o54",0,1],["o55",0,1],["o56",0,1],["o57",0,1],
 ["o58",0,1],["o59",0,1],["o60",0,1],["o61",0,1],["o62",0,1],["o63",0,1],["o64",0,1],["last",0,0]],"x":null}
]}`

// bitsToBytes packs a string of 0 and 1 (spaces ignored) into bytes,
// padding the last octet with zeros, so that test encodings read as the
// X.691 fields they are made of.
func bitsToBytes(bits string) []byte {
	bits = strings.ReplaceAll(bits, " ", "")
	out := make([]byte, (len(bits)+7)/8)
	for i, c := range bits {
		if c == '1' {
			out[i/8] |= 0x80 >> (i % 8)
		}
	}
	return out
}

func loadTestSchema(t *testing.T) *Schema {
	t.Helper()
	s, err := LoadSchema([]byte(testSchema))
	require.NoError(t, err)
	return s
}

func TestDecodeValues(t *testing.T) {
	s := loadTestSchema(t)
	tests := []struct {
		name  string
		root  string
		bits  string
		check func(t *testing.T, v *Value)
	}{
		{"sequence root only", "S", "0 0 101 01", func(t *testing.T, v *Value) {
			assert.Equal(t, int64(5), v.Field("a").Integer())
			assert.Nil(t, v.Field("b"), "absent optional")
			assert.Equal(t, "b", v.Field("c").Enumerant())
			assert.Nil(t, v.Field("e1"), "absent addition")
		}},
		{"sequence with addition and group", "S",
			"1 1 101 1 00 0000001 11 00000001 01100000 00000001 00100000",
			func(t *testing.T, v *Value) {
				assert.Equal(t, int64(5), v.Field("a").Integer())
				assert.Equal(t, int64(1), v.Field("b").Integer())
				assert.Equal(t, "a", v.Field("c").Enumerant())
				assert.Equal(t, int64(3), v.Field("e1").Integer())
				assert.Equal(t, int64(2), v.Field("g1").Integer())
				assert.Nil(t, v.Field("g2"))
			}},
		{"sequence with unknown additions skipped", "S",
			"1 0 111 10 0000011 0011 00000001 11111111 00000010 10101010 10101010",
			func(t *testing.T, v *Value) {
				assert.Equal(t, int64(7), v.Field("a").Integer())
				assert.Equal(t, "c", v.Field("c").Enumerant())
				assert.Nil(t, v.Field("e1"))
				assert.Nil(t, v.Field("g1"))
			}},
		{"addition count in the long form", "S",
			"1 0 111 10 1 00000010 00",
			func(t *testing.T, v *Value) {
				assert.Equal(t, int64(7), v.Field("a").Integer())
				assert.Nil(t, v.Field("e1"))
			}},
		{"extension alternative index in the long form", "C", "1 1 00000001 01000000 00000001 11111111", func(t *testing.T, v *Value) {
			name, _ := v.Chosen()
			assert.Empty(t, name)
			assert.Equal(t, int64(2+64), v.Integer())
		}},
		{"choice root", "C", "0 0 110", func(t *testing.T, v *Value) {
			name, x := v.Chosen()
			assert.Equal(t, "x", name)
			assert.Equal(t, int64(6), x.Integer())
			assert.NotNil(t, v.Field("x"))
			assert.Nil(t, v.Field("y"))
		}},
		{"choice extension alternative", "C", "1 0000000 00000010 00000001 10101011", func(t *testing.T, v *Value) {
			name, z := v.Chosen()
			assert.Equal(t, "z", name)
			assert.Equal(t, []byte{0xAB}, z.Bytes)
		}},
		{"choice unknown extension alternative", "C", "1 0000101 00000001 11111111", func(t *testing.T, v *Value) {
			name, alt := v.Chosen()
			assert.Empty(t, name)
			assert.Nil(t, alt)
		}},
		{"extensible enumerated, extension value", "E2x", "1 0000000", func(t *testing.T, v *Value) {
			assert.Equal(t, int64(2), v.Integer())
			assert.Equal(t, "c", v.Enumerant())
		}},
		{"extensible enumerated, root value", "E2x", "0 1", func(t *testing.T, v *Value) {
			assert.Equal(t, "b", v.Enumerant())
		}},
		{"extensible integer in root", "Wide", "0 00000001 00000000", func(t *testing.T, v *Value) {
			assert.Equal(t, int64(256), v.Integer())
		}},
		{"extensible integer outside root", "Wide", "1 00000011 00000001 00000000 00000000", func(t *testing.T, v *Value) {
			assert.Equal(t, int64(65536), v.Integer())
		}},
		{"unconstrained negative integer", "Unconstrained", "00000001 11111111", func(t *testing.T, v *Value) {
			assert.Equal(t, int64(-1), v.Integer())
		}},
		{"semi-constrained integer", "Semi", "00000001 00000101", func(t *testing.T, v *Value) {
			assert.Equal(t, int64(15), v.Integer())
		}},
		{"fixed-size bit string", "Nibble", "1010", func(t *testing.T, v *Value) {
			assert.Equal(t, 4, v.Bits)
			assert.Equal(t, []byte{0xA0}, v.Bytes)
		}},
		{"sequence of", "List", "01 011 100", func(t *testing.T, v *Value) {
			items := v.Items()
			require.Len(t, items, 2)
			assert.Equal(t, int64(3), items[0].Integer())
			assert.Equal(t, int64(4), items[1].Integer())
		}},
		{"presence bitmap over 64 bits", "Many",
			"1" + strings.Repeat("0", 63) + "1" + " 001 110 101",
			func(t *testing.T, v *Value) {
				assert.Equal(t, int64(1), v.Field("o0").Integer())
				assert.Nil(t, v.Field("o1"))
				assert.Equal(t, int64(6), v.Field("o64").Integer())
				assert.Equal(t, int64(5), v.Field("last").Integer())
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, ok := s.Root(tt.root)
			require.True(t, ok)
			v, err := Decode(root, bitsToBytes(tt.bits))
			require.NoError(t, err)
			tt.check(t, &v)
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	s := loadTestSchema(t)
	tests := []struct {
		name string
		root string
		data []byte
		want error
	}{
		{"empty input", "S", nil, ErrTruncated},
		{"sequence cut in its extension additions", "S", []byte{0x80}, ErrTruncated},
		{"octet string longer than the input", "Octets", []byte{0x05, 0xAA}, ErrTruncated},
		{"extension addition longer than the input", "S", bitsToBytes("1 0 111 10 0000000 1 01111111"), ErrTruncated},
		{"fragmented length", "Octets", []byte{0xC1, 0x00}, nil},
		{"enumerated index beyond the root", "E3", []byte{0xC0}, nil},
		{"huge item count from a tiny input", "Nulls", []byte{0xBF, 0xFF}, ErrBudget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, ok := s.Root(tt.root)
			require.True(t, ok)
			_, err := Decode(root, tt.data)
			require.Error(t, err)
			if tt.want != nil {
				assert.ErrorIs(t, err, tt.want)
			}
		})
	}
}

func TestBitsFor(t *testing.T) {
	tests := []struct {
		valueRange uint64
		want       int
	}{{1, 0}, {2, 1}, {3, 2}, {4, 2}, {5, 3}, {256, 8}, {257, 9}, {1 << 32, 32}, {1<<32 + 1, 33}}
	for _, tt := range tests {
		assert.Equal(t, tt.want, bitsFor(tt.valueRange), "range %d", tt.valueRange)
	}
}

func TestReaderUnalignedOctets(t *testing.T) {
	r := newReader([]byte{0b1010_1011, 0b1100_1101, 0b1110_0000})
	lead, err := r.bits(3)
	require.NoError(t, err)
	assert.Equal(t, uint64(0b101), lead)
	got, err := r.octets(2)
	require.NoError(t, err)
	assert.Equal(t, []byte{0b0101_1110, 0b0110_1111}, got)
	_, err = r.octets(1)
	assert.ErrorIs(t, err, ErrTruncated)
}

func TestLoadSchemaErrors(t *testing.T) {
	tests := []struct {
		name, schema string
	}{
		{"not JSON", `{`},
		{"unknown kind", `{"roots":{},"types":[{"k":"real"}]}`},
		{"forward reference", `{"roots":{},"types":[{"k":"seqof","s":[null,null,0],"c":1},{"k":"null"}]}`},
		{"root out of range", `{"roots":{"X":3},"types":[{"k":"null"}]}`},
		{"empty constraint", `{"roots":{},"types":[{"k":"int","v":[5,1,0]}]}`},
		{"choice without alternatives", `{"roots":{},"types":[{"k":"choice","r":[],"x":null}]}`},
		{"enumerated without enumerants", `{"roots":{},"types":[{"k":"enum","r":[],"x":null}]}`},
		{"extension group that is not a sequence", `{"roots":{},"types":[{"k":"null"},{"k":"seq","r":[],"x":[["",0,1]]}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadSchema([]byte(tt.schema))
			assert.Error(t, err)
		})
	}
}

// TestRRCSchemasLoad checks the generated 3GPP schemas parse and have
// the top-level types the rrc package decodes.
func TestRRCSchemasLoad(t *testing.T) {
	tests := []struct {
		file  string
		roots []string
	}{
		{"lte.json", []string{"DL-DCCH-Message", "UL-DCCH-Message", "UL-CCCH-Message"}},
		{"nr.json", []string{"DL-DCCH-Message", "UL-DCCH-Message", "UL-CCCH-Message", "RRCReconfiguration", "RRCReconfigurationComplete", "CellGroupConfig"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "schema", tt.file))
			require.NoError(t, err)
			s, err := LoadSchema(data)
			require.NoError(t, err)
			for _, name := range tt.roots {
				root, ok := s.Root(name)
				if assert.True(t, ok, name) {
					assert.Equal(t, KindSequence, root.Kind, name)
				}
			}
		})
	}
}
