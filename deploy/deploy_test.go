// Package deploy_test checks the packaging files: the systemd unit, the
// example configuration, the Prometheus rules and the Grafana dashboard.
package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/config"
	"github.com/m2ho/m2ho/pkg/datapath"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/fleet"
	"github.com/m2ho/m2ho/pkg/metrics"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// unitDirectives parses a systemd unit into section.key -> values.
func unitDirectives(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := make(map[string][]string)
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			key, value, ok := strings.Cut(line, "=")
			require.True(t, ok, "unit line %q", line)
			out[section+"."+key] = append(out[section+"."+key], value)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func TestSystemdUnitHardening(t *testing.T) {
	unit := unitDirectives(t, "m2hod.service")
	tests := []struct {
		key  string
		want string
	}{
		{"Service.DynamicUser", "yes"},
		{"Service.CapabilityBoundingSet", "CAP_BPF CAP_NET_ADMIN CAP_PERFMON"},
		{"Service.AmbientCapabilities", "CAP_BPF CAP_NET_ADMIN CAP_PERFMON"},
		{"Service.NoNewPrivileges", "yes"},
		{"Service.ProtectSystem", "strict"},
		{"Service.ProtectHome", "yes"},
		{"Service.PrivateTmp", "yes"},
		{"Service.StateDirectory", "m2ho"},
		{"Service.Restart", "on-failure"},
		// failures a restart may mend are retried for as long as they last
		{"Unit.StartLimitIntervalSec", "0"},
		// the others are not (cmd/m2hod checks the list against its codes)
		{"Service.RestartPreventExitStatus", "3 4 6"},
		{"Service.Type", "notify"},
		{"Service.NotifyAccess", "main"},
		{"Service.WatchdogSec", "10s"},
		{"Service.ProtectKernelModules", "yes"},
		{"Service.RestrictNamespaces", "yes"},
		{"Service.MemoryDenyWriteExecute", "yes"},
		{"Install.WantedBy", "multi-user.target"},
	}
	for _, tt := range tests {
		assert.Equal(t, []string{tt.want}, unit[tt.key], tt.key)
	}
	execStart := unit["Service.ExecStart"]
	require.Len(t, execStart, 1)
	// The unit reads the example configuration once installed.
	installed := strings.ReplaceAll(execStart[0], "/etc/m2ho/m2hod.yaml", "m2hod.yaml")
	_, err := config.Parse(strings.Fields(installed)[1:], nil)
	assert.NoError(t, err, "ExecStart's flags and the example configuration are valid together")
	assert.NotContains(t, execStart[0], "--state-dir", "the state directory is named once, by StateDirectory=")
	assert.Contains(t, unit["Service.DeviceAllow"], "char-wwan_port rw", "DIAG ports of the WWAN subsystem (/dev/wwan0qcdm0)")
	assert.Equal(t, []string{"-" + config.DefaultPinDir}, unit["Service.ReadWritePaths"], "the pins may be written")
}

// systemdWords splits a command line of a unit as systemd does: words
// apart at blanks, quotes kept together and removed, $$ a $ left to the
// command. A lone $ is a variable systemd would expand itself, before the
// command runs: the test fails on it.
func systemdWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var word strings.Builder
	inWord := false
	var quote rune
	runes := []rune(line)
	for i := 0; i < len(runes); i++ {
		c := runes[i]
		switch {
		case c == '$' && i+1 < len(runes) && runes[i+1] == '$':
			word.WriteRune('$')
			inWord = true
			i++
		case c == '$':
			require.Failf(t, "a variable systemd expands", "in %q", line)
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			word.WriteRune(c)
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteRune(c)
			inWord = true
		}
	}
	require.Zero(t, quote, "unterminated quote in %q", line)
	if inWord {
		words = append(words, word.String())
	}
	return words
}

// TestUnitPinDirFollowsStateDirectory runs the unit's ExecStartPre= as
// systemd does (as root, with $STATE_DIRECTORY naming the unit's state
// directory) on a pin directory of the test's, where a crashed run of
// another user id left a pin: the directory and the pin get the owner of
// the state directory, wherever StateDirectory= puts it, since the
// command reads it from systemd and names no directory of its own.
func TestUnitPinDirFollowsStateDirectory(t *testing.T) {
	nstest.RequireRoot(t) // changes owners
	pre := unitDirectives(t, "m2hod.service")["Service.ExecStartPre"]
	require.Len(t, pre, 1)
	// - ignores a failure, + runs with full privileges.
	line, ok := strings.CutPrefix(pre[0], "-+")
	require.True(t, ok, "ExecStartPre=%s", pre[0])
	assert.NotContains(t, line, "/var/lib", "the state directory is StateDirectory=, not a path of the command")
	argv := systemdWords(t, line)
	require.Len(t, argv, 3)
	require.Equal(t, []string{"/bin/sh", "-c"}, argv[:2])

	dir := t.TempDir()
	const user = 61234 // a transient user's id (DynamicUser=)
	state := filepath.Join(dir, "private", "m2ho")
	require.NoError(t, os.MkdirAll(state, 0o750))
	require.NoError(t, os.Chown(state, user, user))
	// systemd passes the path it shows the service: a link to the
	// private directory, under DynamicUser=.
	link := filepath.Join(dir, "m2ho")
	require.NoError(t, os.Symlink(state, link))
	pins := filepath.Join(dir, "bpf", "m2ho")
	require.NoError(t, os.MkdirAll(pins, 0o755))
	pin := filepath.Join(pins, "flow_table")
	require.NoError(t, os.WriteFile(pin, nil, 0o600))
	require.NoError(t, os.Chown(pin, user-1, user-1))

	script := strings.ReplaceAll(argv[2], config.DefaultPinDir, pins)
	require.NotEqual(t, argv[2], script, "the command prepares the pin directory, %s", config.DefaultPinDir)
	cmd := exec.Command(argv[0], argv[1], script)
	cmd.Env = append(os.Environ(), "STATE_DIRECTORY="+link)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, path := range []string{pins, pin} {
		st, err := os.Stat(path)
		require.NoError(t, err)
		sys := st.Sys().(*syscall.Stat_t)
		assert.Equal(t, [2]uint32{user, user}, [2]uint32{sys.Uid, sys.Gid}, "%s has the state directory's owner", path)
	}
	st, err := os.Stat(pins)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
}

func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	// verify insists that ExecStart names an executable. The binary is
	// installed at deploy time, so it is replaced by this test's own
	// executable; every other line is verified as shipped.
	self, err := os.Executable()
	require.NoError(t, err)
	data, err := os.ReadFile("m2hod.service")
	require.NoError(t, err)
	unit := strings.ReplaceAll(string(data), "/usr/local/bin/m2hod", self)
	path := filepath.Join(t.TempDir(), "m2hod.service")
	require.NoError(t, os.WriteFile(path, []byte(unit), 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, analyze, "verify", path).CombinedOutput()
	require.NoError(t, err, "systemd-analyze verify: %s", out)
	assert.Empty(t, strings.TrimSpace(string(out)), "no warnings")
}

func TestExampleConfig(t *testing.T) {
	cfg, err := config.LoadFile("m2hod.yaml", config.Default())
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())
	assert.Equal(t, "wwan0", cfg.Iface)
	assert.Equal(t, []string{"unix:/run/m2ho/diag.sock"}, cfg.Diag, "the socket in the unit's RuntimeDirectory")
	assert.Equal(t, config.ModeEnforce, cfg.Mode)
	assert.Equal(t, config.DefaultListen, cfg.Listen)
	assert.Equal(t, config.DefaultStateDir, cfg.StateDir)
	assert.Equal(t, config.PolicyM2HO, cfg.Policy)
	assert.Empty(t, cfg.Ablate)
	// The tunables the example spells out are the components' defaults,
	// so the comments saying so stay true.
	assert.Equal(t, statemachine.DefaultConfig().SmoothingMax, cfg.SmoothingMax)
	assert.Equal(t, estimator.DefaultConfig().Lambda, cfg.Lambda)
	assert.Equal(t, estimator.DefaultConfig().DefaultBufferBytes, cfg.DefaultBufferBytes)
	assert.Zero(t, cfg.BurstGap)
	assert.Zero(t, cfg.MaxFlows)
	assert.Equal(t, config.DefaultPinDir, cfg.PinDir)
}

// daemonMetrics builds m2hod's metrics with the sources the daemon wires:
// stats stands for the diag inputs, dpErr for a datapath that cannot be
// read.
func daemonMetrics(stats *diag.Stats, dpErr error) *metrics.Metrics {
	return metrics.New([]string{"stable"}, metrics.Info{Mode: "enforce", Policy: "m2ho"}, metrics.Sources{
		Datapath: func() (metrics.DatapathSnapshot, error) {
			return metrics.DatapathSnapshot{Attached: true, Events: []diag.Counter{{Label: "map_full", Value: 0}},
				RTT: metrics.DurationHistogram{Upper: []time.Duration{time.Millisecond}, Counts: []uint64{1}}}, dpErr
		},
		Policy:           func() metrics.PolicySnapshot { return metrics.PolicySnapshot{} },
		Diag:             []metrics.DiagInput{{Name: "serial:/dev/ttyUSB0", Stats: stats}},
		EstimatorSkipped: func() []diag.Counter { return []diag.Counter{{Label: "rtt_implausible", Value: 1}} },
		AttachMode:       func() string { return "tcx" },
		Fleet:            func() fleet.Stats { return fleet.Stats{} },
	}, nil)
}

// exportedMetrics returns the names m2hod's metrics have, with the
// suffixes Prometheus derives for histograms, once a diag event, a diag
// error and an actuation error were counted.
func exportedMetrics(t *testing.T) []string {
	t.Helper()
	var stats diag.Stats
	m := daemonMetrics(&stats, nil)
	stats.CountEvent(diag.TypeMeasReport)
	stats.CountError("json_syntax")
	m.ActuationError("set_clamp")
	families, err := m.Registry().Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
		if f.GetType().String() == "HISTOGRAM" {
			names = append(names, f.GetName()+"_bucket", f.GetName()+"_sum", f.GetName()+"_count")
		}
	}
	return names
}

func TestAlertRules(t *testing.T) {
	data, err := os.ReadFile("m2hod-alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&rules))

	// Which metrics the expressions use, and whether those have series,
	// TestPanelsAndRulesOnARealDaemon checks on a running m2hod.
	var groups []string
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		groups = append(groups, g.Name)
		require.NotEmpty(t, g.Rules, g.Name)
		for _, r := range g.Rules {
			assert.NotEmpty(t, r.Alert, "group %s", g.Name)
			assert.False(t, alerts[r.Alert], "duplicate alert %s", r.Alert)
			alerts[r.Alert] = true
			assert.NotEmpty(t, r.Expr, r.Alert)
			assert.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], r.Alert)
			assert.NotEmpty(t, r.Annotations["summary"], r.Alert)
			if r.For != "" {
				_, err := time.ParseDuration(r.For)
				assert.NoError(t, err, r.Alert)
			}
		}
	}
	assert.Equal(t, []string{"m2hod.availability", "m2hod.policy", "m2hod.diag"}, groups)

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: rule syntax not checked by Prometheus")
		return
	}
	out, err := exec.Command(promtool, "check", "rules", "m2hod-alerts.yml").CombinedOutput()
	assert.NoError(t, err, "promtool check rules: %s", out)
}

func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("grafana-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Type    string `json:"type"`
			GridPos struct {
				X, Y, W, H int
			} `json:"gridPos"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(data, &dash))
	assert.Equal(t, "m2hod", dash.UID)
	require.NotEmpty(t, dash.Panels)

	ids := map[int]bool{}
	covered := map[string]bool{}
	for _, p := range dash.Panels {
		assert.False(t, ids[p.ID], "duplicate panel id %d", p.ID)
		ids[p.ID] = true
		assert.NotEmpty(t, p.Title)
		assert.LessOrEqual(t, p.GridPos.X+p.GridPos.W, 24, "panel %q fits the grid", p.Title)
		require.NotEmpty(t, p.Targets, p.Title)
		for _, target := range p.Targets {
			for _, sel := range selectors(t, target.Expr) {
				covered[strings.TrimSuffix(sel.name, "_bucket")] = true
			}
		}
	}
	for _, name := range []string{"m2hod_state", "m2hod_clamp_bytes", "m2hod_handovers_total", "m2hod_predictions_total",
		"m2hod_datapath_events_total", "m2hod_flows", "m2hod_rtt_seconds", "m2hod_burst_bytes", "m2hod_diag_events_total",
		"m2hod_diag_errors_total", "m2hod_diag_last_event_timestamp_seconds", "m2hod_datapath_attached"} {
		assert.True(t, covered[name], "the dashboard shows %s", name)
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: panel expressions not checked by Prometheus")
		return
	}
	// Every expression, with Grafana's variables substituted as Grafana
	// does, as a recording rule that promtool parses.
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for _, p := range dash.Panels {
		for i, target := range p.Targets {
			fmt.Fprintf(&b, "      - record: dashboard:panel%d_%d\n        expr: %s\n", p.ID, i, yamlQuote(grafana.Replace(target.Expr)))
		}
	}
	rules := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	require.NoError(t, os.WriteFile(rules, []byte(b.String()), 0o644))
	out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput()
	assert.NoError(t, err, "promtool check rules: %s", out)
}

// TestMetricsDocumented: docs/metrics.md names every metric m2hod
// exports and every datapath counter.
func TestMetricsDocumented(t *testing.T) {
	data, err := os.ReadFile("../docs/metrics.md")
	require.NoError(t, err)
	doc := string(data)
	for _, name := range exportedMetrics(t) {
		if strings.HasPrefix(name, "m2hod_") && !strings.HasSuffix(name, "_bucket") && !strings.HasSuffix(name, "_sum") &&
			!strings.HasSuffix(name, "_count") {
			assert.Contains(t, doc, "`"+name+"`", "docs/metrics.md lists %s", name)
		}
	}
	var c datapath.Counters
	for id := range c {
		assert.Contains(t, doc, "| `"+datapath.CounterName(id)+"` |", "docs/metrics.md explains the datapath event")
	}
}

// TestDashboardAxesAndInstances: on/off flags never share an axis with
// bytes or rates, and every panel keeps instances apart (its series carry
// the instance label, in the legend too), so that a fleet's hosts are not
// summed into one line.
func TestDashboardAxesAndInstances(t *testing.T) {
	data, err := os.ReadFile("grafana-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title       string `json:"title"`
			FieldConfig struct {
				Defaults struct {
					Unit string `json:"unit"`
				} `json:"defaults"`
				Overrides []struct {
					Matcher struct {
						ID      string `json:"id"`
						Options string `json:"options"`
					} `json:"matcher"`
					Properties []struct {
						ID    string `json:"id"`
						Value any    `json:"value"`
					} `json:"properties"`
				} `json:"overrides"`
			} `json:"fieldConfig"`
			Targets []struct {
				RefID        string `json:"refId"`
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(data, &dash))
	flag := regexp.MustCompile(`^m2hod_[a-z_]+_active\b`)
	aggregation := regexp.MustCompile(`\b(sum|min|max|avg|count)\b( by \(([^)]*)\))?`)
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			if flag.MatchString(target.Expr) && p.FieldConfig.Defaults.Unit != "none" && p.FieldConfig.Defaults.Unit != "" {
				ownAxis := false
				for _, o := range p.FieldConfig.Overrides {
					if o.Matcher.ID != "byFrameRefID" || o.Matcher.Options != target.RefID {
						continue
					}
					for _, prop := range o.Properties {
						if prop.ID == "custom.axisPlacement" && prop.Value == "right" {
							ownAxis = true
						}
					}
				}
				assert.True(t, ownAxis, "%s: the flag %s has an axis of its own, not the %s one", p.Title, target.RefID, p.FieldConfig.Defaults.Unit)
			}
			for _, m := range aggregation.FindAllStringSubmatch(target.Expr, -1) {
				assert.Contains(t, m[3], "instance", "%s: %q keeps instances apart", p.Title, target.Expr)
			}
			assert.Contains(t, target.LegendFormat, "{{instance}}", "%s: the legend names the instance", p.Title)
		}
	}
}
