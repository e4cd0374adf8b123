package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunFailsWithOneLine(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notDir, nil, 0o600))
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantLine string
	}{
		{name: "no interface", wantCode: exitConfig, wantLine: "m2hod: config: iface: the modem interface is required (--iface)"},
		{name: "unknown flag", args: []string{"--bogus"}, wantCode: exitUsage,
			wantLine: "m2hod: command line: flag provided but not defined: -bogus (m2hod -h lists the flags)"},
		{name: "bad flag value", args: []string{"--iface", "wwan0", "--max-flows", "many"}, wantCode: exitUsage,
			wantLine: `m2hod: command line: invalid value "many" for flag -max-flows`},
		{name: "max flows above the datapath limit", args: []string{"--iface", "wwan0", "--max-flows", "20000000"}, wantCode: exitConfig,
			wantLine: "m2hod: --max-flows: must be 0 (default) or at most 16777216, got 20000000"},
		{name: "default buffer below the minimum clamp", args: []string{"--iface", "wwan0", "--default-buffer", "2000"}, wantCode: exitConfig,
			wantLine: "m2hod: config: default_buffer_bytes: must be 0 (default) or at least 65536, got 2000"},
		{name: "decode, unknown flag", args: []string{"decode", "--bogus", "jsonl:-"}, wantCode: exitUsage,
			wantLine: "m2hod decode: flag provided but not defined: -bogus (m2hod decode -h lists the flags)"},
		{name: "decode, no input", args: []string{"decode"}, wantCode: exitUsage, wantLine: "usage: m2hod decode [--raw] [--subscription auto|N] URI   (jsonl:PATH, qmdl:PATH, pcap:PATH, unix:PATH, udp://, gsmtap://, serial:DEV)"},
		{name: "extra argument", args: []string{"--iface", "wwan0", "start"}, wantCode: exitUsage,
			wantLine: `m2hod: command line: unexpected argument "start"`},
		{name: "bad log format", args: []string{"--iface", "wwan0", "--log-format", "xml"}, wantCode: exitConfig,
			wantLine: `m2hod: --log-format: must be text, json or journal, got "xml"`},
		{name: "bad mode", args: []string{"--iface", "wwan0", "--mode", "on"}, wantCode: exitConfig,
			wantLine: `m2hod: config: mode: must be enforce or observe, got "on"`},
		{name: "missing config file", args: []string{"--config", "/nonexistent.yaml"}, wantCode: exitConfig,
			wantLine: "m2hod: config file: open /nonexistent.yaml: no such file or directory"},
		// The daemon logs as it starts; at level error, only the reason is left.
		{name: "state directory not a directory", args: []string{"--iface", "wwan0", "--state-dir", notDir, "--listen", "127.0.0.1:0",
			"--diag", "udp://127.0.0.1:0", "--log-level", "error"},
			wantCode: exitFailure, wantLine: "m2hod: cell store: state directory: mkdir " + notDir},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run(context.Background(), tt.args, &stdout, &stderr)
			assert.Equal(t, tt.wantCode, code)
			line, ok := strings.CutSuffix(stderr.String(), "\n")
			require.True(t, ok, "stderr ends with a newline: %q", stderr.String())
			require.NotContains(t, line, "\n", "stderr is one line")
			assert.True(t, strings.HasPrefix(line, tt.wantLine), "got %q", line)
			assert.Empty(t, stdout.String())
		})
	}
}

// signalHelperEnv makes the test binary run stopContextChild instead of
// the tests.
const signalHelperEnv = "M2HOD_TEST_SIGNAL_CHILD"

// TestSecondSignalKills: the first SIGTERM asks m2hod to stop, and once it
// has, another SIGTERM kills a process whose shutdown is stuck.
func TestSecondSignalKills(t *testing.T) {
	if os.Getenv(signalHelperEnv) != "" {
		stopContextChild()
		return
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^TestSecondSignalKills$")
	cmd.Env = append(os.Environ(), signalHelperEnv+"=1")
	stdout, w, err := os.Pipe()
	require.NoError(t, err)
	defer stdout.Close()
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	require.NoError(t, err)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	lines := bufio.NewScanner(stdout)
	require.True(t, lines.Scan())
	require.Equal(t, "ready", lines.Text())

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.True(t, lines.Scan())
	require.Equal(t, "stopping", lines.Text(), "the first signal ends the context")
	// Signals are sent until one kills the child: the restoration of the
	// default action is not synchronous with the end of the context.
	deadline := time.After(5 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			var exitErr *exec.ExitError
			require.ErrorAs(t, err, &exitErr)
			status := exitErr.Sys().(syscall.WaitStatus)
			assert.True(t, status.Signaled() && status.Signal() == syscall.SIGTERM, "child ended by %v", status)
			return
		case <-tick.C:
			_ = cmd.Process.Signal(syscall.SIGTERM)
		case <-deadline:
			require.FailNow(t, "a second SIGTERM did not kill the process")
		}
	}
}

// stopContextChild stands for a daemon whose shutdown hangs after the
// first signal.
func stopContextChild() {
	ctx, stop := stopContext(context.Background())
	defer stop()
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Println("stopping")
	time.Sleep(time.Minute)
}

// TestHelpAndVersion: what was asked for goes to stdout, with status 0,
// and nothing to stderr.
func TestHelpAndVersion(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"-h"}, []string{"usage: m2hod --iface IFACE", "-iface", "-log-format", "-version"}},
		{[]string{"--help"}, []string{"usage: m2hod --iface IFACE"}},
		{[]string{"decode", "-h"}, []string{"usage: m2hod decode", "-raw"}},
		{[]string{"--version"}, []string{"m2hod ", "(revision ", runtime.Version()}},
		{[]string{"version"}, []string{"m2hod ", "(revision ", runtime.Version()}},
		// --version wins over a configuration that would not start
		{[]string{"--config", "/nonexistent.yaml", "--version"}, []string{"m2hod "}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			assert.Equal(t, 0, run(context.Background(), tt.args, &stdout, &stderr))
			for _, want := range tt.want {
				assert.Contains(t, stdout.String(), want)
			}
			assert.Empty(t, stderr.String())
		})
	}
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
		{name: "unknown scheme", args: []string{"decode", "bogus:x"}, wantCode: exitUsage, wantStderr: []string{"unknown scheme"}},
		{name: "no scheme", args: []string{"decode", "capture.qmdl"}, wantCode: exitUsage, wantStderr: []string{"want SCHEME"}},
		{name: "raw listing of JSON", args: []string{"decode", "--raw", "jsonl:" + path}, wantCode: exitUsage, wantStderr: []string{"needs a DIAG or GSMTAP input"}},
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

// TestUnitPreventsHopelessRestarts: the unit restarts m2hod after a
// failure that a restart may mend, and after no other. Status 2 is
// restarted: the Go runtime exits with it after a panic or the watchdog's
// SIGABRT, which a command-line mistake shares.
func TestUnitPreventsHopelessRestarts(t *testing.T) {
	data, err := os.ReadFile("../../deploy/m2hod.service")
	require.NoError(t, err)
	var prevented []string
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "RestartPreventExitStatus="); ok {
			prevented = append(prevented, strings.Fields(v)...)
		}
	}
	want := []string{fmt.Sprint(exitUnsupported), fmt.Sprint(exitPermission), fmt.Sprint(exitConfig)}
	assert.ElementsMatch(t, want, prevented)
}

// TestVersionFromLinker: the Makefile's -X flags reach the version m2hod
// prints.
func TestVersionFromLinker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds m2hod")
	}
	bin := filepath.Join(t.TempDir(), "m2hod")
	const pkg = "github.com/m2ho/m2ho/pkg/version"
	build := exec.Command("go", "build", "-o", bin,
		"-ldflags", "-X "+pkg+".version=v1.2.3-4-gabcdef0 -X "+pkg+".revision=abcdef0123", ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	assert.Equal(t, "m2hod v1.2.3-4-gabcdef0 (revision abcdef0123, "+runtime.Version()+")\n", string(out))
	makefile, err := os.ReadFile("../../Makefile")
	require.NoError(t, err)
	assert.Contains(t, string(makefile), "VERSION_PKG := "+pkg, "the Makefile sets the variables of this package")
	assert.Contains(t, string(makefile), "-X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).revision=$(REVISION)")
}
