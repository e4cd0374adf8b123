// Package jsonfile writes and reads the testbed's JSON files, gzipped
// when the name ends in ".gz": a run's measurement series and ground
// truth shrink tenfold, small enough for an evaluation's runs to be kept
// in the repository.
package jsonfile

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Write encodes v as indented JSON into path.
func Write(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(path), err)
	}
	if strings.HasSuffix(path, ".gz") {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(raw); err != nil {
			return fmt.Errorf("compressing %s: %w", filepath.Base(path), err)
		}
		if err := zw.Close(); err != nil {
			return fmt.Errorf("compressing %s: %w", filepath.Base(path), err)
		}
		raw = buf.Bytes()
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// Read decodes the JSON file at path into v. A missing file's error
// wraps os.ErrNotExist.
func Read(path string, v any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return fmt.Errorf("decompressing %s: %w", path, err)
		}
		if raw, err = io.ReadAll(zr); err != nil {
			return fmt.Errorf("decompressing %s: %w", path, err)
		}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}
