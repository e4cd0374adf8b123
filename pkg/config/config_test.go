package config

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag/rrc"
)

func TestParse(t *testing.T) {
	const fullFile = `
iface: wwan0
diag: ["udp://127.0.0.1:6000", "jsonl:/tmp/events.jsonl"]
diag_subscription: 1
mode: observe
listen: 127.0.0.1:9999
state_dir: /srv/m2ho
log_level: debug
log_format: json
policy: freeze
ablate: [prediction, bandwidth_clamp]
smoothing_max: 120ms
lambda: 1.5
default_buffer_bytes: 300000
burst_gap: 3ms
drain_burst_bytes: 32768
max_flows: 4096
pin_dir: /sys/fs/bpf/cpe
fleet:
  url: tls://hub.example.net:4222,tls://hub2.example.net:4222
  network: 001-01
  host: bus-17
  bucket: cells
  creds: /etc/m2ho/fleet.creds
  tls_ca: /etc/m2ho/ca.pem
  tls_cert: /etc/m2ho/cpe.pem
  tls_key: /etc/m2ho/cpe.key
  max_age: 48h
  max_bytes: 536870912
`
	tests := []struct {
		name    string
		file    string // written to a temporary file passed with --config
		args    []string
		want    func(*Config)
		wantErr string
	}{
		{
			name: "flags only take defaults for the rest",
			args: []string{"--iface", "wwan0"},
			want: func(c *Config) { c.Iface = "wwan0" },
		},
		{
			name: "file sets every key",
			file: fullFile,
			want: func(c *Config) {
				*c = Config{
					Iface: "wwan0", Diag: []string{"udp://127.0.0.1:6000", "jsonl:/tmp/events.jsonl"},
					DiagSubscription: rrc.Follow{Subscription: 1}, Mode: ModeObserve, Listen: "127.0.0.1:9999", StateDir: "/srv/m2ho", LogLevel: slog.LevelDebug, LogFormat: LogJSON,
					Policy: PolicyFreeze, Ablate: []Component{ComponentPrediction, ComponentBandwidthClamp},
					SmoothingMax: 120 * time.Millisecond, Lambda: 1.5, DefaultBufferBytes: 300000,
					BurstGap: 3 * time.Millisecond, DrainBurstBytes: 32768, MaxFlows: 4096, PinDir: "/sys/fs/bpf/cpe",
					Fleet: Fleet{URL: "tls://hub.example.net:4222,tls://hub2.example.net:4222", Network: "001-01", Host: "bus-17", Bucket: "cells",
						CredsFile: "/etc/m2ho/fleet.creds", CAFile: "/etc/m2ho/ca.pem", CertFile: "/etc/m2ho/cpe.pem", KeyFile: "/etc/m2ho/cpe.key",
						MaxAge: 48 * time.Hour, MaxBytes: 512 << 20},
				}
			},
		},
		{
			name: "flags override the file",
			file: fullFile,
			args: []string{"--iface", "usb0", "--diag", "gsmtap://127.0.0.1:4729", "--diag", "qmdl:/x.qmdl", "--diag-subscription", "auto",
				"--mode", "enforce", "--listen", "[::1]:9000", "--state-dir", "/tmp/s", "--log-level", "warn", "--log-format", "journal",
				"--policy", "m2ho", "--ablate", "", "--smoothing-max", "90ms", "--lambda", "3",
				"--default-buffer", "70000", "--burst-gap", "1ms", "--drain-burst", "8192", "--max-flows", "10", "--pin-dir", "",
				"--fleet", "nats://127.0.0.1:4222", "--fleet-network", "002-02", "--fleet-host", "", "--fleet-bucket", "", "--fleet-creds", "",
				"--fleet-tls-ca", "", "--fleet-tls-cert", "", "--fleet-tls-key", "", "--fleet-max-age", "0", "--fleet-max-bytes", "0"},
			want: func(c *Config) {
				*c = Config{
					Iface: "usb0", Diag: []string{"gsmtap://127.0.0.1:4729", "qmdl:/x.qmdl"},
					DiagSubscription: rrc.FollowAuto, Mode: ModeEnforce, Listen: "[::1]:9000", StateDir: "/tmp/s", LogLevel: slog.LevelWarn, LogFormat: LogJournal,
					Policy: PolicyM2HO, SmoothingMax: 90 * time.Millisecond, Lambda: 3, DefaultBufferBytes: 70000,
					BurstGap: time.Millisecond, DrainBurstBytes: 8192, MaxFlows: 10,
					Fleet: Fleet{URL: "nats://127.0.0.1:4222", Network: "002-02"},
				}
			},
		},
		{
			name: "tunables at their bounds",
			args: []string{"--iface", "x", "--default-buffer", "65536", "--max-flows", "16777216", "--drain-burst", "67108864"},
			want: func(c *Config) {
				c.Iface, c.DefaultBufferBytes, c.MaxFlows, c.DrainBurstBytes = "x", 65536, 16777216, 67108864
			},
		},
		{
			name: "empty file keeps defaults",
			file: "# nothing\n",
			args: []string{"--iface", "rmnet_data0"},
			want: func(c *Config) { c.Iface = "rmnet_data0" },
		},
		{
			name: "second SIM by flag",
			args: []string{"--iface", "x", "--diag-subscription", "1"},
			want: func(c *Config) { c.Iface, c.DiagSubscription = "x", rrc.Follow{Subscription: 1} },
		},
		{name: "bad subscription flag", args: []string{"--iface", "x", "--diag-subscription", "sim2"}, wantErr: "--diag-subscription: subscription \"sim2\": want auto or an index"},
		{name: "bad subscription in file", file: "iface: x\ndiag_subscription: -1\n", wantErr: "diag_subscription: subscription \"-1\""},
		{name: "missing iface", wantErr: "config: iface: the modem interface is required"},
		{name: "bad iface", args: []string{"--iface", "a/b"}, wantErr: `iface: "a/b" is not a valid interface name`},
		{name: "long iface", args: []string{"--iface", "abcdefghijklmnop"}, wantErr: "not a valid interface name"},
		{name: "bad mode", args: []string{"--iface", "x", "--mode", "enforcing"}, wantErr: `mode: must be enforce or observe, got "enforcing"`},
		{name: "bad policy", args: []string{"--iface", "x", "--policy", "mtcp"}, wantErr: "policy: must be m2ho or freeze"},
		{name: "bad ablation", args: []string{"--iface", "x", "--ablate", "prediction,rtt"}, wantErr: `ablate: unknown component "rtt"`},
		{name: "bad listen", args: []string{"--iface", "x", "--listen", "9569"}, wantErr: `listen: "9569" is not host:port`},
		{name: "listen host name", args: []string{"--iface", "x", "--listen", "example.com:80"}, wantErr: "host must be an IP address"},
		{name: "bad port", args: []string{"--iface", "x", "--listen", "127.0.0.1:99999"}, wantErr: "bad port"},
		{name: "unknown diag scheme", args: []string{"--iface", "x", "--diag", "tcp://1.2.3.4:5"}, wantErr: `diag "tcp://1.2.3.4:5": unknown input`},
		{name: "jsonl without path", args: []string{"--iface", "x", "--diag", "jsonl:"}, wantErr: "missing address or path"},
		{name: "no scheme", args: []string{"--iface", "x", "--diag", "/tmp/events.jsonl"}, wantErr: "unknown input"},
		{name: "smoothing too long", args: []string{"--iface", "x", "--smoothing-max", "250ms"}, wantErr: "smoothing_max: must be 0 (default) or below 200ms"},
		{name: "smoothing at the minimum RTO", args: []string{"--iface", "x", "--smoothing-max", "200ms"}, wantErr: "smoothing_max"},
		{name: "negative lambda", args: []string{"--iface", "x", "--lambda", "-1"}, wantErr: "lambda: must be between"},
		{name: "lambda not a number", file: "iface: x\nlambda: .nan\n", wantErr: "lambda: must be between"},
		{name: "tiny default buffer", args: []string{"--iface", "x", "--default-buffer", "10"}, wantErr: "default_buffer_bytes: must be 0 (default) or at least 65536, got 10"},
		// The estimator refuses a default below its minimum clamp.
		{name: "default buffer below the minimum clamp", args: []string{"--iface", "x", "--default-buffer", "65535"}, wantErr: "default_buffer_bytes: must be 0 (default) or at least 65536"},
		{name: "default buffer below the minimum clamp in file", file: "iface: x\ndefault_buffer_bytes: 2000\n", wantErr: "default_buffer_bytes: must be 0 (default) or at least 65536, got 2000"},
		{name: "max flows above the datapath limit", args: []string{"--iface", "x", "--max-flows", "16777217"}, wantErr: "--max-flows: must be 0 (default) or at most 16777216, got 16777217"},
		{name: "max flows that would wrap", args: []string{"--iface", "x", "--max-flows", "4294967306"}, wantErr: "--max-flows: must be 0 (default) or at most 16777216"},
		{name: "max flows above the datapath limit in file", file: "iface: x\nmax_flows: 20000000\n", wantErr: "max_flows: must be 0 (default) or at most 16777216, got 20000000"},
		{name: "burst gap too long", args: []string{"--iface", "x", "--burst-gap", "1s"}, wantErr: "burst_gap: must be between"},
		{name: "drain burst above any buffer", args: []string{"--iface", "x", "--drain-burst", "67108865"}, wantErr: "drain_burst_bytes: must be 0 (default) or at most 67108864, got 67108865"},
		{name: "drain burst above any buffer in file", file: "iface: x\ndrain_burst_bytes: 100000000\n", wantErr: "drain_burst_bytes: must be 0 (default) or at most 67108864"},
		{name: "relative pin dir", args: []string{"--iface", "x", "--pin-dir", "bpf/m2ho"}, wantErr: `pin_dir: must be an absolute path or empty, got "bpf/m2ho"`},
		{name: "bad log level flag", args: []string{"--iface", "x", "--log-level", "loud"}, wantErr: "--log-level: must be debug, info, warn or error"},
		{name: "version", args: []string{"--iface", "x", "--version"}, wantErr: ErrVersion.Error()},
		{name: "unknown flag", args: []string{"--ifcae", "x"}, wantErr: "command line: flag provided but not defined: -ifcae (m2hod -h lists the flags)"},
		{name: "bad duration", args: []string{"--smoothing-max", "fast"}, wantErr: "command line: invalid value"},
		{name: "stray argument", args: []string{"--iface", "x", "extra"}, wantErr: `unexpected argument "extra"`},
		{name: "missing file", args: []string{"--config", "/nonexistent/m2hod.yaml"}, wantErr: "config file: open /nonexistent/m2hod.yaml"},
		{name: "unknown key", file: "iface: x\npolcy: m2ho\n", wantErr: "field polcy not found"},
		{name: "wrong type", file: "iface: x\nlambda: high\n", wantErr: "cannot unmarshal"},
		{name: "bad duration in file", file: "iface: x\nburst_gap: soon\n", wantErr: "config file"},
		{name: "bad log level in file", file: "iface: x\nlog_level: chatty\n", wantErr: "log_level: must be debug"},
		{name: "bad log format", args: []string{"--iface", "x", "--log-format", "logfmt"}, wantErr: `--log-format: must be text, json or journal, got "logfmt"`},
		{name: "empty log format in file", file: "iface: x\nlog_format: \"\"\n", wantErr: `log_format: must be text, json or journal, got ""`},
		{
			name: "fleet by flags",
			args: []string{"--iface", "x", "--fleet", "nats://10.0.0.1:4222", "--fleet-network", "001-01", "--fleet-creds", "/etc/m2ho/fleet.creds"},
			want: func(c *Config) {
				c.Iface, c.Fleet = "x", Fleet{URL: "nats://10.0.0.1:4222", Network: "001-01", CredsFile: "/etc/m2ho/fleet.creds"}
			},
		},
		{name: "fleet without network", args: []string{"--iface", "x", "--fleet", "nats://10.0.0.1:4222"}, wantErr: "fleet.network: required with a fleet"},
		{name: "fleet network with a dot", file: "iface: x\nfleet: {url: nats://h:4222, network: a.b}\n", wantErr: `fleet.network: required with a fleet, 1 to 64 letters, digits, _ or - (the PLMN, for example 001-01), got "a.b"`},
		{name: "fleet keys without url", file: "iface: x\nfleet: {network: 001-01}\n", wantErr: "fleet.url: required when other fleet keys are set"},
		{name: "fleet url of another scheme", args: []string{"--iface", "x", "--fleet", "http://h:4222", "--fleet-network", "n"}, wantErr: `fleet.url: "http://h:4222" is not a NATS server URL`},
		{name: "fleet url without host", args: []string{"--iface", "x", "--fleet", "nats://h:4222,nats://", "--fleet-network", "n"}, wantErr: `fleet.url: "nats://" is not a NATS server URL`},
		{name: "fleet host with a wildcard", args: []string{"--iface", "x", "--fleet", "nats://h:4222", "--fleet-network", "n", "--fleet-host", "bus*"}, wantErr: `fleet.host: must be 1 to 64 letters`},
		{name: "fleet bucket with a dot", file: "iface: x\nfleet: {url: nats://h:4222, network: n, bucket: a.b}\n", wantErr: `fleet.bucket: must be 1 to 64 letters`},
		{name: "fleet relative creds", args: []string{"--iface", "x", "--fleet", "nats://h:4222", "--fleet-network", "n", "--fleet-creds", "fleet.creds"}, wantErr: `fleet.creds: must be an absolute path, got "fleet.creds"`},
		{name: "fleet cert without key", args: []string{"--iface", "x", "--fleet", "tls://h:4222", "--fleet-network", "n", "--fleet-tls-cert", "/c.pem"}, wantErr: "fleet.tls_cert: a client certificate needs its key"},
		{name: "fleet max age too short", args: []string{"--iface", "x", "--fleet", "nats://h:4222", "--fleet-network", "n", "--fleet-max-age", "10s"}, wantErr: "fleet.max_age: must be 0 (default) or between 1m0s and 8784h0m0s, got 10s"},
		{
			name: "fleet bucket bound by default",
			args: []string{"--iface", "x", "--fleet", "nats://h:4222", "--fleet-network", "n"},
			want: func(c *Config) { c.Iface, c.Fleet = "x", Fleet{URL: "nats://h:4222", Network: "n"} },
		},
		{
			name: "fleet bucket bound at its minimum",
			args: []string{"--iface", "x", "--fleet", "nats://h:4222", "--fleet-network", "n", "--fleet-max-bytes", "1048576"},
			want: func(c *Config) { c.Iface, c.Fleet = "x", Fleet{URL: "nats://h:4222", Network: "n", MaxBytes: 1 << 20} },
		},
		{
			name: "fleet bucket bound in file",
			file: "iface: x\nfleet: {url: nats://h:4222, network: n, max_bytes: 1073741824}\n",
			want: func(c *Config) { c.Iface, c.Fleet = "x", Fleet{URL: "nats://h:4222", Network: "n", MaxBytes: 1 << 30} },
		},
		{name: "fleet bucket bound below a MiB", args: []string{"--iface", "x", "--fleet", "nats://h:4222", "--fleet-network", "n", "--fleet-max-bytes", "1048575"}, wantErr: "fleet.max_bytes: must be 0 (default, 256 MiB) or at least 1048576 bytes (1 MiB), got 1048575"},
		{name: "negative fleet bucket bound", file: "iface: x\nfleet: {url: nats://h:4222, network: n, max_bytes: -1}\n", wantErr: "fleet.max_bytes: must be 0 (default, 256 MiB) or at least 1048576 bytes (1 MiB), got -1"},
		{name: "fleet bucket bound with a unit", file: "iface: x\nfleet: {url: nats://h:4222, network: n, max_bytes: 256MiB}\n", wantErr: "cannot unmarshal"},
		{name: "fleet bucket bound not a number", args: []string{"--iface", "x", "--fleet-max-bytes", "lots"}, wantErr: "command line: invalid value"},
		{name: "fleet bucket bound without url", args: []string{"--iface", "x", "--fleet-max-bytes", "1048576"}, wantErr: "fleet.url: required when other fleet keys are set"},
		{name: "unknown fleet key", file: "iface: x\nfleet: {url: nats://h:4222, network: n, server: x}\n", wantErr: "field server not found"},
		{name: "not a mapping", file: "- a\n- b\n", wantErr: "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				path := filepath.Join(t.TempDir(), "m2hod.yaml")
				require.NoError(t, os.WriteFile(path, []byte(tt.file), 0o600))
				args = append([]string{"--config", path}, args...)
			}
			got, err := Parse(args, io.Discard)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.NotContains(t, err.Error(), "\n", "errors are one line")
				return
			}
			require.NoError(t, err)
			want := Default()
			tt.want(&want)
			assert.Equal(t, want, got)
		})
	}
}

func TestParseBadFlagPrintsNoUsage(t *testing.T) {
	var usage strings.Builder
	_, err := Parse([]string{"--bogus"}, &usage)
	require.Error(t, err)
	assert.Empty(t, usage.String())
}

func TestParseHelp(t *testing.T) {
	var usage strings.Builder
	_, err := Parse([]string{"-h"}, &usage)
	assert.True(t, errors.Is(err, flag.ErrHelp))
	for _, name := range []string{"-iface", "-diag", "-mode", "-listen", "-state-dir", "-log-level", "-config"} {
		assert.Contains(t, usage.String(), name)
	}
}

func TestEnabled(t *testing.T) {
	tests := []struct {
		ablate    []Component
		component Component
		want      bool
	}{
		{nil, ComponentPrediction, true},
		{[]Component{ComponentSuppression}, ComponentPrediction, true},
		{[]Component{ComponentSuppression}, ComponentSuppression, false},
		{[]Component{ComponentPrediction, ComponentBandwidthClamp}, ComponentBandwidthClamp, false},
		{[]Component{ComponentRamp}, ComponentRamp, false},
		{[]Component{ComponentRamp}, ComponentBandwidthClamp, true},
	}
	for _, tt := range tests {
		cfg := Config{Ablate: tt.ablate}
		assert.Equal(t, tt.want, cfg.Enabled(tt.component), "ablate %v, component %s", tt.ablate, tt.component)
	}
}

// FuzzLoadFile: no configuration file, however malformed, panics or
// yields a configuration that passes Validate while breaking its bounds.
func FuzzLoadFile(f *testing.F) {
	seeds := []string{
		"iface: wwan0\n",
		"iface: wwan0\ndiag: [udp://127.0.0.1:5599]\nsmoothing_max: 150ms\nlambda: 2\n",
		"ablate: [prediction, suppression]\npolicy: freeze\n",
		"max_flows: -1\n",
		"burst_gap: 1h\n",
		"- [\n",
		"iface: &a [*a]\n",
		"",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "fuzz.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadFile(path, Default())
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if cfg.Validate() == nil {
			if cfg.SmoothingMax < 0 || cfg.SmoothingMax >= maxSmoothing || !(cfg.Lambda >= 0 && cfg.Lambda <= maxLambda) ||
				cfg.DefaultBufferBytes != 0 && cfg.DefaultBufferBytes < minDefaultBuffer || cfg.MaxFlows > maxFlows ||
				cfg.Fleet.MaxBytes != 0 && cfg.Fleet.MaxBytes < minFleetMaxBytes {
				t.Fatalf("out-of-bounds configuration validated: %+v", cfg)
			}
		}
	})
}

// TestStateDirFromSystemd: under a unit with StateDirectory=, which
// systemd passes as $STATE_DIRECTORY, that directory is the state
// directory, and a flag or key naming another is a configuration error;
// elsewhere the flag or key chooses.
func TestStateDirFromSystemd(t *testing.T) {
	t.Setenv("STATE_DIRECTORY", "/var/lib/m2ho-unit")
	cfg, err := Parse([]string{"--iface", "x"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "/var/lib/m2ho-unit", cfg.StateDir)
	cfg, err = Parse([]string{"--iface", "x", "--state-dir", "/var/lib/m2ho-unit/"}, io.Discard)
	require.NoError(t, err, "the same directory, spelt otherwise")
	assert.Equal(t, "/var/lib/m2ho-unit/", cfg.StateDir)

	_, err = Parse([]string{"--iface", "x", "--state-dir", "/srv/m2ho"}, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `state_dir: the unit's StateDirectory= (/var/lib/m2ho-unit, $STATE_DIRECTORY)`)
	assert.Contains(t, err.Error(), `got "/srv/m2ho"`)
	assert.False(t, errors.Is(err, ErrCommandLine), "a configuration error (exit 6, not restarted)")
	path := filepath.Join(t.TempDir(), "m2hod.yaml")
	require.NoError(t, os.WriteFile(path, []byte("iface: x\nstate_dir: /srv/m2ho\n"), 0o644))
	_, err = Parse([]string{"--config", path}, io.Discard)
	assert.ErrorContains(t, err, "state_dir: the unit's StateDirectory=", "in the file too")

	t.Setenv("STATE_DIRECTORY", "/var/lib/m2ho-unit:/var/lib/other")
	assert.Equal(t, "/var/lib/m2ho-unit", Default().StateDir, "the unit's first StateDirectory=")
	t.Setenv("STATE_DIRECTORY", "relative")
	assert.Equal(t, DefaultStateDir, Default().StateDir, "only an absolute path is systemd's")
	t.Setenv("STATE_DIRECTORY", "")
	cfg, err = Parse([]string{"--config", path}, io.Discard)
	require.NoError(t, err, "without systemd's directory, the file chooses")
	assert.Equal(t, "/srv/m2ho", cfg.StateDir)
}

// TestParseErrorKinds: command-line mistakes are ErrCommandLine, a wrong
// configuration is not.
func TestParseErrorKinds(t *testing.T) {
	for args, commandLine := range map[string]bool{
		"--ifcae x":               true,
		"--iface x --lambda high": true,
		"--iface x stray":         true,
		"--iface x --lambda 99":   false,
		"--mode on":               false,
	} {
		_, err := Parse(strings.Fields(args), io.Discard)
		require.Error(t, err, args)
		assert.Equal(t, commandLine, errors.Is(err, ErrCommandLine), args)
	}
}
