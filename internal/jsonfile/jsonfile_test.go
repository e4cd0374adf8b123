package jsonfile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoundTripPlainAndGzipped(t *testing.T) {
	type record struct {
		Name   string  `json:"name"`
		Values []int64 `json:"values"`
	}
	want := record{Name: "run", Values: make([]int64, 5000)}
	for i := range want.Values {
		want.Values[i] = int64(i) * 1000
	}
	dir := t.TempDir()
	for _, name := range []string{"plain.json", "packed.json.gz"} {
		path := filepath.Join(dir, name)
		require.NoError(t, Write(path, want))
		var got record
		require.NoError(t, Read(path, &got))
		assert.Equal(t, want, got, name)
	}
	plain, err := os.Stat(filepath.Join(dir, "plain.json"))
	require.NoError(t, err)
	packed, err := os.Stat(filepath.Join(dir, "packed.json.gz"))
	require.NoError(t, err)
	assert.Less(t, packed.Size()*5, plain.Size(), "gzipped at least five times smaller")
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	var v map[string]any
	assert.ErrorIs(t, Read(filepath.Join(dir, "missing.json"), &v), os.ErrNotExist)
	bad := filepath.Join(dir, "bad.json.gz")
	require.NoError(t, os.WriteFile(bad, []byte("not gzip"), 0o644))
	assert.ErrorContains(t, Read(bad, &v), "decompressing")
	broken := filepath.Join(dir, "broken.json")
	require.NoError(t, os.WriteFile(broken, []byte("{"), 0o644))
	assert.ErrorContains(t, Read(broken, &v), "decoding")
}
