package deploy_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/metrics"
)

// scrapeResult is what Prometheus records from one scrape of m2hod.
type scrapeResult struct {
	up bool
	// samples maps name{label="value",...} to the value of every counter
	// and gauge sample.
	samples map[string]float64
}

func scrapeDaemon(t *testing.T, m *metrics.Metrics) scrapeResult {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	res := scrapeResult{up: rec.Code == http.StatusOK, samples: map[string]float64{}}
	// The handler serves what Gather returns, less the metrics that failed.
	families, _ := m.Registry().Gather()
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			var labels []string
			for _, l := range metric.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := f.GetName()
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch f.GetType().String() {
			case "COUNTER":
				res.samples[key] = metric.GetCounter().GetValue()
			case "GAUGE":
				res.samples[key] = metric.GetGauge().GetValue()
			}
		}
	}
	return res
}

func metricOf(key string) string { name, _, _ := strings.Cut(key, "{"); return name }

// sumRate evaluates sum(rate(name[w])) of a single instance over two
// scrapes a minute apart; ok is false when the vector is empty, which is
// what makes a comparison over it empty too.
func sumRate(before, after scrapeResult, name string) (rate float64, ok bool) {
	for key, v1 := range after.samples {
		if metricOf(key) != name {
			continue
		}
		if v0, seen := before.samples[key]; seen {
			rate += (v1 - v0) / 60
			ok = true
		}
	}
	return rate, ok
}

func hasMetric(s scrapeResult, name string) bool {
	for key := range s.samples {
		if metricOf(key) == name {
			return true
		}
	}
	return false
}

// modelledAlerts evaluates, in Go, the alert expressions whose point is to
// fire on a daemon that is up but gets nothing useful. The expressions are
// pinned here so that the model cannot drift from the rules file.
var modelledAlerts = map[string]struct {
	expr string
	eval func(before, after scrapeResult) bool
}{
	"M2hodDatapathUnreadable": {
		expr: `up{job="m2hod"} == 1 unless on(job, instance) m2hod_flows`,
		eval: func(_, after scrapeResult) bool { return after.up && !hasMetric(after, "m2hod_flows") },
	},
	"M2hodNoDiagEvents": {
		expr: `sum without(type) (rate(m2hod_diag_events_total[15m])) == 0 and on() up{job="m2hod"} == 1`,
		eval: func(before, after scrapeResult) bool {
			events, ok := sumRate(before, after, "m2hod_diag_events_total")
			return ok && events == 0 && after.up
		},
	},
	"M2hodDiagErrors": {
		expr: `sum without(reason) (rate(m2hod_diag_errors_total[10m])) > 0.1 * sum without(type) (rate(m2hod_diag_events_total[10m]))`,
		eval: func(before, after scrapeResult) bool {
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
		firing:    []string{"M2hodNoDiagEvents"},
	},
	{
		name: "only rejected diag input",
		perMinute: func(s *diag.Stats) {
			for range 5 {
				s.CountError("serial_port_lost")
			}
		},
		firing: []string{"M2hodNoDiagEvents", "M2hodDiagErrors"},
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

// TestAlertsFireOnUselessInput checks that the availability and diag
// alerts fire on the metrics m2hod really serves when it runs but its
// inputs are missing, rejected or unreadable, and stay quiet when they are
// fine. With promtool installed, the same scrapes are replayed through
// Prometheus' own evaluation of the rules file.
func TestAlertsFireOnUselessInput(t *testing.T) {
	exprs := alertExprs(t)
	for alert, model := range modelledAlerts {
		require.Equal(t, model.expr, exprs[alert], "%s: the expression evaluated here is the one in m2hod-alerts.yml", alert)
	}
	type replay struct {
		name          string
		before, after scrapeResult
		firing        []string
	}
	var replays []replay
	for _, sc := range alertScenarios {
		t.Run(sc.name, func(t *testing.T) {
			var stats diag.Stats
			m := daemonMetrics(&stats, sc.dpErr)
			sc.perMinute(&stats)
			before := scrapeDaemon(t, m)
			sc.perMinute(&stats)
			after := scrapeDaemon(t, m)
			require.True(t, after.up, "the scrape succeeds")
			for alert, model := range modelledAlerts {
				assert.Equal(t, slices.Contains(sc.firing, alert), model.eval(before, after), alert)
			}
			replays = append(replays, replay{sc.name, before, after, sc.firing})
		})
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: alert expressions evaluated by the Go model only")
		return
	}
	rulesPath, err := filepath.Abs("m2hod-alerts.yml")
	require.NoError(t, err)
	var b strings.Builder
	fmt.Fprintf(&b, "rule_files: [%q]\nevaluation_interval: 1m\ntests:\n", rulesPath)
	for _, r := range replays {
		// Each scrape's values continue at the same per-minute rate for
		// half an hour; up is 1 throughout.
		fmt.Fprintf(&b, "  - interval: 1m\n    input_series:\n")
		fmt.Fprintf(&b, "      - series: 'up{instance=\"ue\",job=\"m2hod\"}'\n        values: '1x30'\n")
		keys := make([]string, 0, len(r.after.samples))
		for key := range r.after.samples {
			keys = append(keys, key)
		}
		slices.Sort(keys)
		for _, key := range keys {
			v0, ok := r.before.samples[key]
			if !ok {
				v0 = r.after.samples[key]
			}
			name, labels, _ := strings.Cut(strings.TrimSuffix(key, "}"), "{")
			if labels != "" {
				labels += ","
			}
			series := fmt.Sprintf(`%s{%sinstance="ue",job="m2hod"}`, name, labels)
			fmt.Fprintf(&b, "      - series: '%s'\n        values: '%s%+gx30'\n", series, strconv.FormatFloat(v0, 'f', -1, 64), r.after.samples[key]-v0)
		}
		fmt.Fprintf(&b, "    promql_expr_test:\n")
		for _, alert := range slices.Sorted(func(yield func(string) bool) {
			for alert := range modelledAlerts {
				if !yield(alert) {
					return
				}
			}
		}) {
			// count() turns "fires" into a single sample of value 1.
			fmt.Fprintf(&b, "      - expr: 'count(%s)'\n        eval_time: 20m\n", strings.ReplaceAll(exprs[alert], "'", "''"))
			if slices.Contains(r.firing, alert) {
				fmt.Fprintf(&b, "        exp_samples: [{labels: '{}', value: 1}]\n")
			} else {
				fmt.Fprintf(&b, "        exp_samples: []\n")
			}
		}
	}
	testFile := filepath.Join(t.TempDir(), "alerts-test.yml")
	require.NoError(t, os.WriteFile(testFile, []byte(b.String()), 0o644))
	out, err := exec.Command(promtool, "test", "rules", testFile).CombinedOutput()
	assert.NoError(t, err, "promtool test rules: %s", out)
}
