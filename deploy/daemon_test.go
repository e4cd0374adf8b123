package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/logbuf"
	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/diag"
)

// series is one sample of a scrape: its metric name and labels, without
// the job and instance labels Prometheus adds.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape is what Prometheus records from one scrape of m2hod, and when.
type scrape struct {
	at     time.Time
	series []series
}

// parseScrape reads the text exposition format; histograms become their
// _bucket, _sum and _count series, as Prometheus stores them.
func parseScrape(t *testing.T, at time.Time, text string) scrape {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err)
	s := scrape{at: at}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			with := func(extra, value string) map[string]string {
				out := map[string]string{extra: value}
				for k, v := range labels {
					out[k] = v
				}
				return out
			}
			switch {
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					s.series = append(s.series, series{name + "_bucket", with("le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)), float64(b.GetCumulativeCount())})
				}
				s.series = append(s.series, series{name + "_bucket", with("le", "+Inf"), float64(h.GetSampleCount())},
					series{name + "_sum", labels, h.GetSampleSum()}, series{name + "_count", labels, float64(h.GetSampleCount())})
			case m.GetCounter() != nil:
				s.series = append(s.series, series{name, labels, m.GetCounter().GetValue()})
			case m.GetGauge() != nil:
				s.series = append(s.series, series{name, labels, m.GetGauge().GetValue()})
			case m.GetUntyped() != nil:
				s.series = append(s.series, series{name, labels, m.GetUntyped().GetValue()})
			}
		}
	}
	return s
}

// matching returns the series of name whose labels satisfy every matcher.
func (s scrape) matching(name string, matchers []labelMatcher) []series {
	var out []series
	for _, ser := range s.series {
		if ser.name != name {
			continue
		}
		ok := true
		for _, m := range matchers {
			ok = ok && m.matches(ser.labels[m.name])
		}
		if ok {
			out = append(out, ser)
		}
	}
	return out
}

// key is the series in PromQL's notation, labels sorted.
func (s series) key() string {
	names := slices.Sorted(maps.Keys(s.labels))
	if len(names) == 0 {
		return s.name
	}
	pairs := make([]string, 0, len(names))
	for _, name := range names {
		pairs = append(pairs, fmt.Sprintf("%s=%q", name, s.labels[name]))
	}
	return s.name + "{" + strings.Join(pairs, ",") + "}"
}

// value returns the value of the one series of name with exactly labels.
func (s scrape) value(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	want := series{name: name, labels: labels}.key()
	for _, ser := range s.series {
		if ser.key() == want {
			return ser.value
		}
	}
	require.Failf(t, "no such series", "%s", want)
	return 0
}

// labelMatcher is one label matcher of a PromQL selector.
type labelMatcher struct {
	name, op, value string
}

func (m labelMatcher) matches(v string) bool {
	switch m.op {
	case "=":
		return v == m.value
	case "!=":
		return v != m.value
	case "=~":
		return regexp.MustCompile("^(?:" + m.value + ")$").MatchString(v)
	default: // !~
		return !regexp.MustCompile("^(?:" + m.value + ")$").MatchString(v)
	}
}

// selector is a metric that an expression selects, with the matchers on
// its own labels (job and instance are Prometheus', and the dashboard's
// $instance variable is not a label value).
type selector struct {
	text     string
	name     string
	matchers []labelMatcher
}

var (
	selectorPattern = regexp.MustCompile(`\b((?:m2hod|process)_[a-z0-9_]+)(\{([^}]*)\})?`)
	matcherPattern  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")`)
)

func selectors(t *testing.T, expr string) []selector {
	t.Helper()
	var out []selector
	for _, m := range selectorPattern.FindAllStringSubmatch(expr, -1) {
		sel := selector{text: m[0], name: m[1]}
		for _, lm := range matcherPattern.FindAllStringSubmatch(m[3], -1) {
			if lm[1] == "job" || lm[1] == "instance" {
				continue
			}
			value, err := strconv.Unquote(lm[3])
			require.NoError(t, err, lm[0])
			sel.matchers = append(sel.matchers, labelMatcher{name: lm[1], op: lm[2], value: value})
		}
		out = append(out, sel)
	}
	return out
}

// dashboardExprs returns every panel's expressions, by panel title.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile("grafana-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(data, &dash))
	exprs := map[string][]string{}
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			exprs[p.Title] = append(exprs[p.Title], target.Expr)
		}
	}
	return exprs
}

// realDaemon is m2hod, built from this tree, running on the modem end of
// a veth pair in network namespaces of its own, with the unix socket
// input it has by default.
type realDaemon struct {
	t      *testing.T
	ns     *nstest.NS
	socket string
	http   *http.Client
	log    *logbuf.Buffer
	exited chan struct{}
	err    error
}

// Addresses inside the test's namespaces.
const (
	daemonListen = "127.0.0.1:9569"
	modemIface   = "wwan0"
)

func startRealDaemon(t *testing.T) *realDaemon {
	t.Helper()
	nstest.RequireRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "m2hod")
	build := exec.Command("go", "build", "-o", bin, "github.com/m2ho/m2ho/cmd/m2hod")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building m2hod: %s", out)

	server, ue := nstest.NewNS(t, "deploy-srv"), nstest.NewNS(t, "deploy-ue")
	nstest.Pair(t, server, ue, nstest.Link{AIfname: "srv0", BIfname: modemIface,
		AAddrs: []string{"10.79.0.1/24"}, BAddrs: []string{"10.79.0.2/24"}})
	d := &realDaemon{t: t, ns: ue, socket: filepath.Join(dir, "diag.sock"), log: &logbuf.Buffer{}, exited: make(chan struct{})}
	cmd := ue.Command(context.Background(), bin, "--iface", modemIface, "--diag", "unix:"+d.socket,
		"--listen", daemonListen, "--state-dir", filepath.Join(dir, "state"), "--pin-dir", "", "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = d.log, d.log
	require.NoError(t, cmd.Start())
	go func() {
		d.err = cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-d.exited
			}
		}
		if t.Failed() {
			t.Logf("m2hod log:\n%s", d.log.String())
		}
	})
	d.http = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			err := ue.Do(func() error {
				var err error
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
	}}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if resp, err := d.http.Get("http://" + daemonListen + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
		select {
		case <-d.exited:
			t.Fatalf("m2hod exited while starting (%v):\n%s", d.err, d.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "m2hod not healthy after 15 s:\n%s", d.log.String())
	}
}

func (d *realDaemon) scrape() scrape {
	d.t.Helper()
	resp, err := d.http.Get("http://" + daemonListen + "/metrics")
	require.NoError(d.t, err)
	defer resp.Body.Close()
	require.Equal(d.t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(d.t, err)
	return parseScrape(d.t, time.Now(), string(body))
}

// send writes JSON events to the daemon's socket, as root, one datagram
// each.
func (d *realDaemon) send(events ...string) {
	d.t.Helper()
	conn, err := net.Dial("unixgram", d.socket)
	require.NoError(d.t, err)
	defer conn.Close()
	for _, ev := range events {
		_, err := conn.Write([]byte(ev))
		require.NoError(d.t, err)
	}
}

// TestPanelsAndRulesOnARealDaemon scrapes m2hod as Prometheus does, once
// freshly started and once after a predicted handover on a sub-6 cell:
// every metric an alert rule uses has series from the start, so that
// none of them is empty for want of a first event, and every selector of
// every dashboard panel and alert rule matches a series of the healthy
// daemon, so that no panel stays empty on a healthy host. Some values
// are checked too: the diag input's counts and the time since its last
// event, which the dashboard shows.
func TestPanelsAndRulesOnARealDaemon(t *testing.T) {
	d := startRealDaemon(t)
	input := "unix:" + d.socket
	fresh := d.scrape()

	a, b := `{"rat":"nr","band":"sub6","pci":1,"arfcn":632628}`, `{"rat":"nr","band":"sub6","pci":2,"arfcn":632628}`
	sent := time.Now()
	d.send(`{"v":1,"type":"meas_report","event":"A3","serving":`+a+`,"neighbor":`+b+`}`,
		`{"v":1,"type":"ho_command","kind":"pcell","source":`+a+`,"target":`+b+`}`,
		`{"v":1,"type":"ho_complete","cell":`+b+`}`)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		handovers := d.scrape().matching("m2hod_handovers_total", []labelMatcher{{"kind", "=", "sub6_sub6"}})
		if len(handovers) == 1 && handovers[0].value == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the handover is not counted after 5 s")
	}
	// A scrape is no snapshot: the registry reads its collectors at
	// different instants, in no set order, while the loop goes on with
	// the events, so the scrape that first shows the handover may have
	// read the input's counts before the events were counted. The input
	// counts a datagram's events before the loop takes them, hence before
	// the handover is counted: a scrape begun after one that shows the
	// handover shows them.
	healthy := d.scrape()

	for alert, expr := range alertExprs(t) {
		for _, sel := range selectors(t, expr) {
			assert.NotEmpty(t, fresh.matching(sel.name, nil), "%s: %s has no series on a freshly started m2hod", alert, sel.name)
			assert.NotEmpty(t, healthy.matching(sel.name, sel.matchers), "%s: %s matches no series of a healthy m2hod", alert, sel.text)
		}
	}
	for panel, exprs := range dashboardExprs(t) {
		for _, expr := range exprs {
			for _, sel := range selectors(t, expr) {
				assert.NotEmpty(t, healthy.matching(sel.name, sel.matchers), "panel %q: %s matches no series of a healthy m2hod", panel, sel.text)
			}
		}
	}

	// The input's counts, an error reason of its own at 0 included.
	for _, typ := range []diag.Type{diag.TypeMeasReport, diag.TypeHOCommand, diag.TypeHOComplete} {
		assert.Equal(t, 1.0, healthy.value(t, "m2hod_diag_events_total", map[string]string{"input": input, "type": string(typ)}), typ)
	}
	assert.Equal(t, 0.0, healthy.value(t, "m2hod_diag_errors_total", map[string]string{"input": input, "reason": diag.ReasonPeerNotAllowed}))
	assert.Equal(t, 0.0, fresh.value(t, "m2hod_diag_errors_total", map[string]string{"input": input, "reason": diag.ReasonJSONSyntax}))

	// The time since the last event, as the dashboard computes it: from
	// the start while there is none, not since 1970.
	assert.Equal(t, 0.0, fresh.value(t, "m2hod_diag_last_event_timestamp_seconds", map[string]string{"input": input}))
	sinceStart := sinceLastEvent(t, fresh, input)
	assert.Positive(t, sinceStart)
	assert.Less(t, sinceStart, 60.0, "the time since m2hod started")
	last := healthy.value(t, "m2hod_diag_last_event_timestamp_seconds", map[string]string{"input": input})
	assert.InDelta(t, float64(sent.UnixNano())/1e9, last, 5, "the last event's time")
	assert.GreaterOrEqual(t, sinceLastEvent(t, healthy, input), 0.0)
	assert.Less(t, sinceLastEvent(t, healthy, input), 5.0)
}
