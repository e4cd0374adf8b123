package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/shareddata"
)

func TestReplayCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	lines := []string{
		`{"v":1,"type":"meas_report","t":"2026-03-04T05:06:07Z","event":"A3","serving":{"rat":"lte","pci":1,"arfcn":1850},"neighbor":{"rat":"lte","pci":2,"arfcn":1850}}`,
		`{"v":1,"type":"ho_command","t":"2026-03-04T05:06:07.060Z","kind":"pcell","target":{"rat":"lte","pci":2,"arfcn":1850}}`,
		`{"v":1,"type":"ho_complete","t":"2026-03-04T05:06:07.080Z","cell":{"rat":"lte","pci":2,"arfcn":1850}}`,
	}
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout []string
		wantStderr string
	}{
		{name: "table", args: []string{"replay", "jsonl:" + path},
			wantStdout: []string{"jsonl:" + path + ": 3 events", "algorithm1  sub6-sub6", "algorithm1  Overall", "learning    Overall", "100.0 (1/1)", "policy:"}},
		{name: "two inputs", args: []string{"replay", "jsonl:" + path, "jsonl:" + path},
			wantStdout: []string{"jsonl:" + path + ": 3 events"}},
		{name: "learning carried over", args: []string{"replay", "--carry", "jsonl:" + path, "jsonl:" + path},
			wantStdout: []string{"learning    Overall"}},
		{name: "no input", args: []string{"replay"}, wantCode: exitUsage, wantStderr: "usage: m2hod replay [--json] [--carry] [--subscription auto|N] URI..."},
		{name: "unknown flag", args: []string{"replay", "--bogus", "jsonl:" + path}, wantCode: exitUsage,
			wantStderr: "m2hod replay: flag provided but not defined: -bogus (m2hod replay -h lists the flags)"},
		{name: "help", args: []string{"replay", "-h"}, wantStdout: []string{"usage: m2hod replay", "-carry", "-subscription"}},
		{name: "bad subscription", args: []string{"replay", "--subscription", "sim2", "jsonl:" + path}, wantCode: exitUsage, wantStderr: "want auto or an index"},
		{name: "live input", args: []string{"replay", "udp://127.0.0.1:0"}, wantCode: exitUsage, wantStderr: "a replay reads a recording"},
		{name: "unknown scheme", args: []string{"replay", "bogus:x"}, wantCode: exitUsage, wantStderr: "a replay reads a recording"},
		{name: "missing file", args: []string{"replay", "qmdl:/nonexistent.qmdl"}, wantCode: exitFailure, wantStderr: "m2hod replay:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			assert.Equal(t, tt.wantCode, run(context.Background(), tt.args, &stdout, &stderr))
			for _, want := range tt.wantStdout {
				assert.Contains(t, stdout.String(), want)
			}
			assert.Contains(t, stderr.String(), tt.wantStderr)
		})
	}
}

func TestReplayCommandJSON(t *testing.T) {
	path := filepath.Join(shareddata.DataDir(t, "diag"), "mobility_sample.mi2log")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"replay", "--json", "qmdl:" + path}, &stdout, &stderr), stderr.String())
	var results []struct {
		Input      string `json:"input"`
		Predictors []struct {
			Predictor string `json:"predictor"`
			Classes   []struct {
				Class     string `json:"class"`
				Handovers int    `json:"handovers"`
			} `json:"classes"`
		} `json:"predictors"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &results))
	require.Len(t, results, 1)
	require.Len(t, results[0].Predictors, 2)
	for _, p := range results[0].Predictors {
		overall := p.Classes[len(p.Classes)-1]
		assert.Equal(t, "overall", overall.Class, "the key of every class together, as in the evaluation's results")
		assert.Equal(t, 255, overall.Handovers, p.Predictor)
	}
}
