package uper

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecode feeds arbitrary bytes to every type of the test schema and
// to the largest 3GPP top-level types: any outcome but a panic, a hang or
// runaway allocation is acceptable.
func FuzzDecode(f *testing.F) {
	test, err := LoadSchema([]byte(testSchema))
	require.NoError(f, err)
	var roots []*Type
	for _, name := range []string{"S", "C", "E2x", "Wide", "List", "Octets", "Nulls", "Many", "Semi", "Unconstrained"} {
		t, ok := test.Root(name)
		require.True(f, ok, name)
		roots = append(roots, t)
	}
	for _, file := range []string{"lte.json", "nr.json"} {
		data, err := os.ReadFile(filepath.Join("..", "schema", file))
		require.NoError(f, err)
		s, err := LoadSchema(data)
		require.NoError(f, err)
		for _, name := range []string{"DL-DCCH-Message", "UL-DCCH-Message", "UL-CCCH-Message"} {
			t, ok := s.Root(name)
			require.True(f, ok, name)
			roots = append(roots, t)
		}
	}
	f.Add(uint8(0), []byte{0x2A})
	f.Add(uint8(0), []byte{0xEC, 0x03, 0x80, 0xB0, 0x00, 0x90, 0x00})
	f.Add(uint8(1), []byte{0x80, 0x02, 0x01, 0xAB})
	f.Add(uint8(6), []byte{0xBF, 0xFF})
	f.Add(uint8(10), []byte{0x22, 0x02, 0x00})
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		root := roots[int(which)%len(roots)]
		v, err := Decode(root, data)
		if err == nil && !v.Present() {
			t.Fatalf("%s: no error and no value", root.Name)
		}
	})
}
