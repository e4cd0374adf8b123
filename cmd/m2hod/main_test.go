package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunFailsWithOneLine(t *testing.T) {
	stateDir := t.TempDir()
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantLine string
	}{
		{name: "no interface", wantCode: exitUsage, wantLine: "m2hod: config: iface: the modem interface is required (--iface)"},
		{name: "unknown flag", args: []string{"--bogus"}, wantCode: exitUsage, wantLine: "m2hod: command line: flag provided but not defined: -bogus"},
		{name: "bad mode", args: []string{"--iface", "wwan0", "--mode", "on"}, wantCode: exitUsage,
			wantLine: `m2hod: config: mode: must be enforce or observe, got "on"`},
		{name: "missing config file", args: []string{"--config", "/nonexistent.yaml"}, wantCode: exitUsage,
			wantLine: "m2hod: config file: open /nonexistent.yaml: no such file or directory"},
		{name: "missing interface", args: []string{"--iface", "m2honope0", "--state-dir", stateDir, "--listen", "127.0.0.1:0", "--diag", "udp://127.0.0.1:0"},
			wantCode: exitFailure, wantLine: "m2hod: interface m2honope0 not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run(context.Background(), tt.args, &stdout, &stderr)
			assert.Equal(t, tt.wantCode, code)
			lines := nonEmptyLines(stderr.String())
			require.NotEmpty(t, lines)
			last := lines[len(lines)-1]
			assert.True(t, strings.HasPrefix(last, tt.wantLine), "got %q", last)
			assert.Empty(t, stdout.String())
		})
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr strings.Builder
	assert.Equal(t, 0, run(context.Background(), []string{"-h"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "-iface")
	assert.Equal(t, 0, run(context.Background(), []string{"decode", "-h"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "usage: m2hod decode")
}

func TestDecode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	input := strings.Join([]string{
		`{"v":1,"type":"meas_report","event":"A3","t":"2026-11-22T07:00:00.000123Z","serving":{"rat":"nr","pci":1,"arfcn":632628},"neighbor":{"rat":"nr","pci":2,"arfcn":632628}}`,
		`not json`,
		`{"v":1,"type":"ho_failure","cause":"rlf","t":1795330000000000000}`,
	}, "\n") + "\n"
	require.NoError(t, os.WriteFile(path, []byte(input), 0o600))

	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantEvents []string // types, in order
		wantStderr []string
	}{
		{name: "jsonl", args: []string{"decode", "jsonl:" + path}, wantEvents: []string{"meas_report", "ho_failure"},
			wantStderr: []string{"events meas_report: 1", "events ho_failure: 1", "skipped json_syntax: 1"}},
		{name: "no uri", args: []string{"decode"}, wantCode: exitUsage, wantStderr: []string{"usage: m2hod decode"}},
		{name: "two uris", args: []string{"decode", "jsonl:a", "jsonl:b"}, wantCode: exitUsage, wantStderr: []string{"usage: m2hod decode"}},
		{name: "missing file", args: []string{"decode", "jsonl:/nonexistent.jsonl"}, wantCode: exitFailure,
			wantStderr: []string{"m2hod decode:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run(context.Background(), tt.args, &stdout, &stderr)
			assert.Equal(t, tt.wantCode, code, stderr.String())
			var types []string
			for _, line := range nonEmptyLines(stdout.String()) {
				var ev struct {
					V    int    `json:"v"`
					Type string `json:"type"`
					T    string `json:"t"`
				}
				require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
				assert.Equal(t, 1, ev.V)
				assert.NotEmpty(t, ev.T, "decode prints the modem's time")
				types = append(types, ev.Type)
			}
			assert.Equal(t, tt.wantEvents, types)
			for _, want := range tt.wantStderr {
				assert.Contains(t, stderr.String(), want)
			}
		})
	}
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
