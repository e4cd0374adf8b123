package deploy_test

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/metrics"
)

// scrapeDaemon scrapes m's handler as Prometheus does; up is false when
// the scrape fails.
func scrapeDaemon(t *testing.T, m *metrics.Metrics) (up bool, s scrape) {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Code == http.StatusOK, parseScrape(t, time.Now(), rec.Body.String())
}

// sumRate evaluates sum(rate(name[w])) of a single instance over two
// scrapes a minute apart; ok is false when the vector is empty, which is
// what makes a comparison over it empty too.
func sumRate(before, after scrape, name string) (rate float64, ok bool) {
	previous := map[string]float64{}
	for _, s := range before.matching(name, nil) {
		previous[s.key()] = s.value
	}
	for _, s := range after.matching(name, nil) {
		if v0, seen := previous[s.key()]; seen {
			rate += (s.value - v0) / 60
			ok = true
		}
	}
	return rate, ok
}

// modelledAlerts evaluates, in Go, the alert expressions over counters
// whose point is to fire on a daemon that is up but gets nothing useful.
// The expressions are pinned here so that the model cannot drift from
// the rules file.
var modelledAlerts = map[string]struct {
	expr string
	eval func(up bool, before, after scrape) bool
}{
	"M2hodDatapathUnreadable": {
		expr: `up{job="m2hod"} == 1 unless on(job, instance) m2hod_flows`,
		eval: func(up bool, _, after scrape) bool { return up && len(after.matching("m2hod_flows", nil)) == 0 },
	},
	"M2hodDiagErrors": {
		expr: `sum without(reason) (rate(m2hod_diag_errors_total[10m])) > 0.1 * sum without(type) (rate(m2hod_diag_events_total[10m]))`,
		eval: func(_ bool, before, after scrape) bool {
			errs, okErrs := sumRate(before, after, "m2hod_diag_errors_total")
			events, okEvents := sumRate(before, after, "m2hod_diag_events_total")
			return okErrs && okEvents && errs > 0.1*events
		},
	},
}

// alertScenarios are daemons in steady states: perMinute is what their
// inputs count each minute, from the start.
var alertScenarios = []struct {
	name      string
	dpErr     error
	perMinute func(*diag.Stats)
	firing    []string
}{
	{
		name:      "no diag input",
		perMinute: func(*diag.Stats) {},
	},
	{
		name: "only rejected diag input",
		perMinute: func(s *diag.Stats) {
			for range 5 {
				s.CountError("serial_port_lost")
			}
		},
		firing: []string{"M2hodDiagErrors"},
	},
	{
		name: "healthy input",
		perMinute: func(s *diag.Stats) {
			for range 100 {
				s.CountEvent(diag.TypeRBAlloc)
			}
			s.CountEvent(diag.TypeMeasReport)
			s.CountError("json_syntax")
		},
	},
	{
		name:  "datapath unreadable",
		dpErr: errors.New("map lookup: bad file descriptor"),
		perMinute: func(s *diag.Stats) {
			for range 100 {
				s.CountEvent(diag.TypeRBAlloc)
			}
		},
		firing: []string{"M2hodDatapathUnreadable"},
	},
}

func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("m2hod-alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(data, &rules))
	exprs := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = r.Expr
		}
	}
	return exprs
}

// promtoolTest runs Prometheus' rule unit tests in body (the tests:
// list), against the rules file, when promtool is installed.
func promtoolTest(t *testing.T, body string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: expressions evaluated by the Go model only")
		return
	}
	rulesPath, err := filepath.Abs("m2hod-alerts.yml")
	require.NoError(t, err)
	test := fmt.Sprintf("rule_files: [%q]\nevaluation_interval: 1m\ntests:\n%s", rulesPath, body)
	testFile := filepath.Join(t.TempDir(), "alerts-test.yml")
	require.NoError(t, os.WriteFile(testFile, []byte(test), 0o644))
	out, err := exec.Command(promtool, "test", "rules", testFile).CombinedOutput()
	assert.NoError(t, err, "promtool test rules: %s\n%s", out, test)
}

// yamlQuote quotes s for a single-quoted YAML scalar.
func yamlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// TestAlertsFireOnUselessInput checks that the availability and diag
// error alerts fire on the metrics m2hod really serves when it runs but
// its inputs are rejected or unreadable, and stay quiet when they are
// fine. With promtool installed, the same scrapes are replayed through
// Prometheus' own evaluation of the rules file.
func TestAlertsFireOnUselessInput(t *testing.T) {
	exprs := alertExprs(t)
	for alert, model := range modelledAlerts {
		require.Equal(t, model.expr, exprs[alert], "%s: the expression evaluated here is the one in m2hod-alerts.yml", alert)
	}
	var b strings.Builder
	for _, sc := range alertScenarios {
		t.Run(sc.name, func(t *testing.T) {
			var stats diag.Stats
			m := daemonMetrics(&stats, sc.dpErr)
			sc.perMinute(&stats)
			_, before := scrapeDaemon(t, m)
			sc.perMinute(&stats)
			up, after := scrapeDaemon(t, m)
			require.True(t, up, "the scrape succeeds")
			for alert, model := range modelledAlerts {
				assert.Equal(t, slices.Contains(sc.firing, alert), model.eval(up, before, after), alert)
			}

			// Each scrape's values continue at the same per-minute rate
			// for half an hour; up is 1 throughout.
			fmt.Fprintf(&b, "  - interval: 1m\n    input_series:\n")
			fmt.Fprintf(&b, "      - series: 'up{instance=\"ue\",job=\"m2hod\"}'\n        values: '1x30'\n")
			previous := map[string]float64{}
			for _, s := range before.series {
				previous[s.key()] = s.value
			}
			keys := map[string]series{}
			for _, s := range after.series {
				keys[s.key()] = s
			}
			for _, key := range slices.Sorted(maps.Keys(keys)) {
				s := keys[key]
				v0, ok := previous[key]
				if !ok {
					v0 = s.value
				}
				s.labels = maps.Clone(s.labels)
				s.labels["instance"], s.labels["job"] = "ue", "m2hod"
				fmt.Fprintf(&b, "      - series: %s\n        values: '%s%+gx30'\n", yamlQuote(s.key()),
					strconv.FormatFloat(v0, 'f', -1, 64), s.value-v0)
			}
			fmt.Fprintf(&b, "    promql_expr_test:\n")
			for _, alert := range slices.Sorted(maps.Keys(modelledAlerts)) {
				// count() turns "fires" into a single sample of value 1.
				fmt.Fprintf(&b, "      - expr: %s\n        eval_time: 20m\n", yamlQuote("count("+exprs[alert]+")"))
				if slices.Contains(sc.firing, alert) {
					fmt.Fprintf(&b, "        exp_samples: [{labels: '{}', value: 1}]\n")
				} else {
					fmt.Fprintf(&b, "        exp_samples: []\n")
				}
			}
		})
	}
	promtoolTest(t, b.String())
}

// The time since an input's last event, or since m2hod started while the
// input has given none (its gauge is 0 until the first event): the
// dashboard shows it, and M2hodNoDiagEvents fires past 15 minutes.
const (
	sinceLastEventPanel = `time() - (m2hod_diag_last_event_timestamp_seconds{instance=~"$instance"} > 0 or on(job, instance, input) (m2hod_diag_last_event_timestamp_seconds{instance=~"$instance"} == 0) + on(job, instance) group_left process_start_time_seconds{job="m2hod",instance=~"$instance"})`
	noDiagEventsRule    = `time() - (m2hod_diag_last_event_timestamp_seconds > 0 or on(job, instance, input) (m2hod_diag_last_event_timestamp_seconds == 0) + on(job, instance) group_left process_start_time_seconds{job="m2hod"}) > 900`
	silenceLimit        = 900
)

// silence is what both expressions compute for one input, at now.
func silence(lastEvent, started, now float64) float64 {
	if lastEvent > 0 {
		return now - lastEvent
	}
	return now - started
}

// sinceLastEvent evaluates the dashboard's expression for one input of a
// scrape, at the time of the scrape.
func sinceLastEvent(t *testing.T, s scrape, input string) float64 {
	t.Helper()
	return silence(s.value(t, "m2hod_diag_last_event_timestamp_seconds", map[string]string{"input": input}),
		s.value(t, "process_start_time_seconds", map[string]string{}), float64(s.at.UnixNano())/1e9)
}

// silenceScenario is a timeline, minute by minute from 0 to 60, of when
// m2hod started and of its inputs' last event gauges (NaN while m2hod
// does not run yet).
type silenceScenario struct {
	name    string
	started func(minute int) float64
	last    map[string]func(minute int) float64
	checks  []silenceCheck
}

// silenceCheck is what the expressions give at a minute: the time since
// the last event of each input, and the inputs the alert fires for.
type silenceCheck struct {
	minute  int
	silence map[string]float64
	firing  []string
}

const (
	serialInput = "serial:/dev/ttyUSB0"
	socketInput = "unix:/run/m2ho/diag.sock"
)

// startedAt is a daemon that starts at minute from and runs on.
func startedAt(from int) func(int) float64 {
	return func(m int) float64 {
		if m < from {
			return math.NaN()
		}
		return float64(from * 60)
	}
}

var silenceScenarios = []silenceScenario{
	{
		name:    "silent from the start",
		started: startedAt(2),
		last:    map[string]func(int) float64{serialInput: func(m int) float64 { return gaugeFrom(m, 2, 0) }},
		checks: []silenceCheck{
			{minute: 10, silence: map[string]float64{serialInput: 480}},
			{minute: 17, silence: map[string]float64{serialInput: 900}},
			{minute: 18, silence: map[string]float64{serialInput: 960}, firing: []string{serialInput}},
		},
	},
	{
		name:    "an event, then silence",
		started: startedAt(2),
		last: map[string]func(int) float64{serialInput: func(m int) float64 {
			if m >= 5 {
				return 300
			}
			return gaugeFrom(m, 2, 0)
		}},
		checks: []silenceCheck{
			{minute: 4, silence: map[string]float64{serialInput: 120}},
			{minute: 20, silence: map[string]float64{serialInput: 900}},
			{minute: 21, silence: map[string]float64{serialInput: 960}, firing: []string{serialInput}},
		},
	},
	{
		name:    "an event every minute on one input, none on the other",
		started: startedAt(2),
		last: map[string]func(int) float64{
			serialInput: func(m int) float64 { return gaugeFrom(m, 2, float64(m*60)) },
			socketInput: func(m int) float64 { return gaugeFrom(m, 2, 0) },
		},
		checks: []silenceCheck{
			{minute: 10, silence: map[string]float64{serialInput: 0, socketInput: 480}},
			{minute: 60, silence: map[string]float64{serialInput: 0, socketInput: 3480}, firing: []string{socketInput}},
		},
	},
	{
		name: "restarted",
		started: func(m int) float64 {
			if m >= 30 {
				return 1800
			}
			return startedAt(2)(m)
		},
		last: map[string]func(int) float64{serialInput: func(m int) float64 {
			switch {
			case m >= 30:
				return 0
			case m >= 5:
				return 300
			}
			return gaugeFrom(m, 2, 0)
		}},
		checks: []silenceCheck{
			{minute: 25, silence: map[string]float64{serialInput: 1200}, firing: []string{serialInput}},
			{minute: 35, silence: map[string]float64{serialInput: 300}},
			{minute: 46, silence: map[string]float64{serialInput: 960}, firing: []string{serialInput}},
		},
	},
}

// gaugeFrom is v from minute from on, NaN before.
func gaugeFrom(m, from int, v float64) float64 {
	if m < from {
		return math.NaN()
	}
	return v
}

// promValues renders a timeline in promtool's notation, _ for no sample.
func promValues(f func(int) float64) string {
	values := make([]string, 0, 61)
	for m := 0; m <= 60; m++ {
		if v := f(m); math.IsNaN(v) {
			values = append(values, "_")
		} else {
			values = append(values, strconv.FormatFloat(v, 'f', -1, 64))
		}
	}
	return strings.Join(values, " ")
}

// TestNoDiagEventsAlert: the dashboard's time since the last diag event
// counts from m2hod's start while an input has given nothing, never from
// 1970, and M2hodNoDiagEvents fires for an input silent for more than 15
// minutes, since its last event or since the start, each input apart,
// and starts counting again at a restart. With promtool installed, the
// expressions of the dashboard and the rules file are evaluated by
// Prometheus over the same timelines.
func TestNoDiagEventsAlert(t *testing.T) {
	require.Equal(t, noDiagEventsRule, alertExprs(t)["M2hodNoDiagEvents"], "the expression evaluated here is the one in m2hod-alerts.yml")
	require.Equal(t, []string{sinceLastEventPanel}, dashboardExprs(t)["Since the last diag event"], "the expression evaluated here is the dashboard's")

	var b strings.Builder
	panel := strings.ReplaceAll(sinceLastEventPanel, "$instance", ".*")
	for _, sc := range silenceScenarios {
		fmt.Fprintf(&b, "  - name: %s\n    interval: 1m\n    input_series:\n", yamlQuote(sc.name))
		fmt.Fprintf(&b, "      - series: 'process_start_time_seconds{instance=\"ue\",job=\"m2hod\"}'\n        values: '%s'\n", promValues(sc.started))
		for _, input := range slices.Sorted(maps.Keys(sc.last)) {
			fmt.Fprintf(&b, "      - series: 'm2hod_diag_last_event_timestamp_seconds{input=\"%s\",instance=\"ue\",job=\"m2hod\"}'\n        values: '%s'\n",
				input, promValues(sc.last[input]))
		}
		fmt.Fprintf(&b, "    promql_expr_test:\n")
		for _, c := range sc.checks {
			var firing []string
			for input, want := range c.silence {
				got := silence(sc.last[input](c.minute), sc.started(c.minute), float64(c.minute*60))
				assert.Equal(t, want, got, "%s, minute %d, %s", sc.name, c.minute, input)
				if got > silenceLimit {
					firing = append(firing, input)
				}
			}
			slices.Sort(firing)
			assert.Equal(t, c.firing, firing, "%s, minute %d: the inputs the alert fires for", sc.name, c.minute)

			samples := func(inputs []string) string {
				var out []string
				for _, input := range inputs {
					out = append(out, fmt.Sprintf("{labels: '{input=\"%s\",instance=\"ue\",job=\"m2hod\"}', value: %g}", input, c.silence[input]))
				}
				return "[" + strings.Join(out, ", ") + "]"
			}
			fmt.Fprintf(&b, "      - expr: %s\n        eval_time: %dm\n        exp_samples: %s\n", yamlQuote(panel), c.minute,
				samples(slices.Sorted(maps.Keys(c.silence))))
			fmt.Fprintf(&b, "      - expr: %s\n        eval_time: %dm\n        exp_samples: %s\n", yamlQuote(noDiagEventsRule), c.minute,
				samples(c.firing))
		}
	}
	promtoolTest(t, b.String())
}
