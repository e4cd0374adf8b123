package metrics

import (
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/fleet"
	"github.com/m2ho/m2ho/pkg/statemachine"
	"github.com/m2ho/m2ho/pkg/version"
)

var states = []string{"stable", "preparation", "smoothing"}

func TestStateAndEvents(t *testing.T) {
	m := New(states, Info{}, Sources{}, nil)
	assert.Equal(t, 1.0, testutil.ToFloat64(m.state.WithLabelValues("stable")), "starts in the first state")
	m.Transition("stable", "preparation")
	m.Transition("preparation", "smoothing")
	m.Transition("smoothing", "stable")
	m.Transition("stable", "preparation")
	m.Handover("mmwave_sub6")
	m.Prediction("confirmed")
	m.Prediction("confirmed")
	m.Burst(300000)
	m.Actuation(80 * time.Microsecond)
	m.ActuationError("set_clamp")

	for state, want := range map[string]float64{"stable": 0, "preparation": 1, "smoothing": 0} {
		assert.Equal(t, want, testutil.ToFloat64(m.state.WithLabelValues(state)), state)
	}
	assert.Equal(t, 2.0, testutil.ToFloat64(m.transitions.WithLabelValues("stable", "preparation")))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.handovers.WithLabelValues("mmwave_sub6")))
	assert.Equal(t, 0.0, testutil.ToFloat64(m.handovers.WithLabelValues("sub6_sub6")), "every kind is exported from the start")
	assert.Equal(t, 2.0, testutil.ToFloat64(m.predictions.WithLabelValues("confirmed")))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.actErrors.WithLabelValues("set_clamp")))
	assert.Equal(t, len(statemachine.Ops()), testutil.CollectAndCount(m.actErrors), "every operation is exported from the start")
	assert.Equal(t, 1, testutil.CollectAndCount(m.bursts))
}

func TestHistogramCumulative(t *testing.T) {
	us := time.Microsecond
	tests := []struct {
		name        string
		h           DurationHistogram
		wantCount   uint64
		wantSum     float64
		wantBuckets map[float64]uint64
		wantErr     string
	}{
		{name: "empty", wantBuckets: map[float64]uint64{}},
		{
			name: "closed buckets",
			// [0,2) us, [2,4) us, [4,8) us
			h:         DurationHistogram{Upper: []time.Duration{2 * us, 4 * us, 8 * us}, Counts: []uint64{1, 0, 2}},
			wantCount: 3,
			wantSum:   1e-6 + 2*6e-6,
			wantBuckets: map[float64]uint64{
				2e-6: 1, 4e-6: 1, 8e-6: 3,
			},
		},
		{
			name: "open-ended last bucket",
			// samples above the last bound count at it, in +Inf only
			h:           DurationHistogram{Upper: []time.Duration{2 * us, 4 * us, math.MaxInt64}, Counts: []uint64{0, 1, 3}},
			wantCount:   4,
			wantSum:     3e-6 + 3*4e-6,
			wantBuckets: map[float64]uint64{2e-6: 0, 4e-6: 1},
		},
		{name: "bounds and counts differ", h: DurationHistogram{Upper: []time.Duration{us}, Counts: []uint64{1, 2}}, wantErr: "2 counts and 1 bounds"},
		{name: "bounds not increasing", h: DurationHistogram{Upper: []time.Duration{2 * us, 2 * us}, Counts: []uint64{1, 2}}, wantErr: "not increasing"},
		{name: "open-ended bucket first", h: DurationHistogram{Upper: []time.Duration{math.MaxInt64, math.MaxInt64}, Counts: []uint64{1, 2}}, wantErr: "open-ended histogram bucket before the last"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			count, sum, buckets, err := tt.h.cumulative()
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantCount, count)
			assert.InDelta(t, tt.wantSum, sum, 1e-12)
			assert.Equal(t, tt.wantBuckets, buckets)
		})
	}
}

func TestScrapeTimeMetrics(t *testing.T) {
	var stats diag.Stats
	stats.CountEvent(diag.TypeMeasReport)
	stats.CountEvent(diag.TypeMeasReport)
	stats.CountEvent(diag.TypeHOCommand)
	stats.CountError("json_syntax")
	reads := 0
	src := Sources{
		Datapath: func() (DatapathSnapshot, error) {
			reads++
			return DatapathSnapshot{
				Events: []diag.Counter{{Label: "clamp_applied", Value: 10}, {Label: "map_full", Value: 2}, {Label: "ingress_bytes", Value: 1e6}},
				Flows:  5, Attached: true,
				RTT: DurationHistogram{Upper: []time.Duration{65536 * time.Microsecond, 131072 * time.Microsecond, math.MaxInt64}, Counts: []uint64{0, 6, 0}},
			}, nil
		},
		Policy:           func() PolicySnapshot { return PolicySnapshot{ClampBytes: 250000, Suppressing: true} },
		Diag:             []DiagInput{{Name: "udp://127.0.0.1:5599", Stats: &stats}},
		EstimatorSkipped: func() []diag.Counter { return []diag.Counter{{Label: "rtt_implausible", Value: 4}} },
		AttachMode:       func() string { return "tcx" },
	}
	m := New(states, Info{Mode: "enforce", Policy: "m2ho"}, src, nil)
	body := scrape(t, m)

	for _, line := range []string{
		`m2hod_info{attach_mode="tcx",mode="enforce",policy="m2ho"} 1`,
		"m2hod_clamp_bytes 250000",
		"m2hod_freeze_active 0",
		"m2hod_suppression_active 1",
		`m2hod_datapath_events_total{event="clamp_applied"} 10`,
		`m2hod_datapath_events_total{event="map_full"} 2`,
		`m2hod_datapath_events_total{event="ingress_bytes"} 1e+06`,
		"m2hod_flows 5",
		"m2hod_datapath_attached 1",
		"m2hod_rtt_seconds_count 6",
		`m2hod_rtt_seconds_bucket{le="0.131072"} 6`,
		`m2hod_rtt_seconds_bucket{le="0.065536"} 0`,
		`m2hod_diag_events_total{input="udp://127.0.0.1:5599",type="meas_report"} 2`,
		`m2hod_diag_events_total{input="udp://127.0.0.1:5599",type="ho_command"} 1`,
		`m2hod_diag_events_total{input="udp://127.0.0.1:5599",type="rb_alloc"} 0`,
		`m2hod_diag_errors_total{input="udp://127.0.0.1:5599",reason="json_syntax"} 1`,
		`m2hod_estimator_skipped_total{reason="rtt_implausible"} 4`,
		`m2hod_state{state="stable"} 1`,
		`m2hod_handovers_total{kind="mmwave_sub6"} 0`,
		`m2hod_predictions_total{outcome="timed_out"} 0`,
		"m2hod_burst_bytes_count 0",
		"m2hod_waiting_for_interface 0",
		// the standard names, which dashboards for any exporter know
		"# TYPE process_resident_memory_bytes gauge",
		"# TYPE m2hod_build_info gauge",
	} {
		assert.Contains(t, body, line+"\n")
	}
	assert.Equal(t, 1, reads, "the datapath is read once per scrape")
}

func TestDatapathReadFailure(t *testing.T) {
	var stats diag.Stats
	stats.CountEvent(diag.TypeMeasReport)
	src := Sources{
		Datapath:   func() (DatapathSnapshot, error) { return DatapathSnapshot{}, errors.New("map lookup: bad fd") },
		Policy:     func() PolicySnapshot { return PolicySnapshot{ClampBytes: 1000} },
		Diag:       []DiagInput{{Name: "udp://127.0.0.1:5599", Stats: &stats}},
		AttachMode: func() string { return "tcx" },
	}
	var logged strings.Builder
	m := New(states, Info{Mode: "enforce", Policy: "m2ho"}, src, slog.New(slog.NewTextHandler(&logged, nil)))
	_, err := m.Registry().Gather()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bad fd")

	// The scrape succeeds without the datapath's metrics, so that
	// absent(m2hod_flows) and on() up == 1 (M2hodDatapathUnreadable)
	// can hold, and the failure is counted for the next scrape.
	first := scrape(t, m)
	body := scrape(t, m)
	for _, name := range []string{"m2hod_flows", "m2hod_acks_rewritten_total", "m2hod_rtt_seconds", "m2hod_datapath_attached"} {
		assert.NotContains(t, first, "\n"+name+" ", name)
		assert.NotContains(t, first, "\n"+name+"{", name)
		assert.NotContains(t, first, "\n"+name+"_", name)
	}
	for _, line := range []string{
		`m2hod_state{state="stable"} 1`,
		"m2hod_clamp_bytes 1000",
		`m2hod_info{attach_mode="tcx",mode="enforce",policy="m2ho"} 1`,
		`m2hod_diag_events_total{input="udp://127.0.0.1:5599",type="meas_report"} 1`,
		`m2hod_handovers_total{kind="sub6_sub6"} 0`,
		`promhttp_metric_handler_errors_total{cause="gathering"} 1`,
	} {
		assert.Contains(t, body, "\n"+line+"\n")
	}
	assert.Contains(t, logged.String(), "bad fd", "the failure is logged")
}

func TestDiagEventTypesStartAtZero(t *testing.T) {
	tests := []struct {
		name   string
		events []diag.Type
		errors []string
	}{
		{name: "no input at all"},
		{name: "only rejected input", errors: []string{"serial_port_lost", "serial_port_lost", "json_syntax"}},
		{name: "some types seen", events: []diag.Type{diag.TypeRBAlloc, diag.TypeRBAlloc}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stats diag.Stats
			want := map[string]float64{}
			for _, typ := range diag.Types() {
				want[string(typ)] = 0
			}
			for _, typ := range tt.events {
				stats.CountEvent(typ)
				want[string(typ)]++
			}
			wantErrors := map[string]float64{}
			for _, reason := range tt.errors {
				stats.CountError(reason)
				wantErrors[reason]++
			}
			m := New(states, Info{}, Sources{Diag: []DiagInput{{Name: "serial:/dev/ttyUSB0", Stats: &stats}}}, nil)
			got := map[string]map[string]float64{"m2hod_diag_events_total": {}, "m2hod_diag_errors_total": {}}
			families, err := m.Registry().Gather()
			require.NoError(t, err)
			for _, f := range families {
				byLabel, ok := got[f.GetName()]
				if !ok {
					continue
				}
				for _, metric := range f.GetMetric() {
					// input, then type or reason
					require.Len(t, metric.GetLabel(), 2)
					assert.Equal(t, "serial:/dev/ttyUSB0", metric.GetLabel()[0].GetValue())
					byLabel[metric.GetLabel()[1].GetValue()] = metric.GetCounter().GetValue()
				}
			}
			assert.Equal(t, want, got["m2hod_diag_events_total"], "every event type has a series")
			assert.Equal(t, wantErrors, got["m2hod_diag_errors_total"])
		})
	}
}

func TestAttachModeFollowsTheDatapath(t *testing.T) {
	var mode atomic.Value
	mode.Store("tcx")
	m := New(states, Info{Mode: "observe", Policy: "freeze"}, Sources{AttachMode: func() string { return mode.Load().(string) }}, nil)
	assert.Contains(t, scrape(t, m), `m2hod_info{attach_mode="tcx",mode="observe",policy="freeze"} 1`+"\n")
	mode.Store("none")
	body := scrape(t, m)
	assert.Contains(t, body, `m2hod_info{attach_mode="none",mode="observe",policy="freeze"} 1`+"\n", "the interface is gone")
	assert.NotContains(t, body, `attach_mode="tcx"`)
	mode.Store("tc")
	assert.Contains(t, scrape(t, m), `m2hod_info{attach_mode="tc",mode="observe",policy="freeze"} 1`+"\n", "attached again")
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.True(t, strings.Contains(string(body), "# TYPE m2hod_state gauge"))
	return string(body)
}

func TestBuildInfo(t *testing.T) {
	m := New(nil, Info{}, Sources{}, nil)
	families, err := m.Registry().Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "m2hod_build_info" {
			continue
		}
		require.Len(t, f.GetMetric(), 1)
		labels := map[string]string{}
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		b := version.Get()
		assert.Equal(t, map[string]string{"version": b.Version, "revision": b.Revision, "goversion": runtime.Version()}, labels)
		assert.Equal(t, 1.0, f.GetMetric()[0].GetGauge().GetValue())
		return
	}
	t.Fatal("no m2hod_build_info")
}

// TestDiagInputsApart: each input has its own series and the time of its
// last event, 0 before the first, so that a silent port shows.
func TestDiagInputsApart(t *testing.T) {
	var serial, gsmtap diag.Stats
	before := time.Now()
	gsmtap.CountEvent(diag.TypeRBAlloc)
	m := New(states, Info{}, Sources{Diag: []DiagInput{{Name: "serial:/dev/wwan0qcdm0", Stats: &serial}, {Name: "gsmtap://127.0.0.1:4729", Stats: &gsmtap}}}, nil)
	body := scrape(t, m)
	assert.Contains(t, body, `m2hod_diag_events_total{input="serial:/dev/wwan0qcdm0",type="rb_alloc"} 0`+"\n")
	assert.Contains(t, body, `m2hod_diag_events_total{input="gsmtap://127.0.0.1:4729",type="rb_alloc"} 1`+"\n")
	assert.Contains(t, body, `m2hod_diag_last_event_timestamp_seconds{input="serial:/dev/wwan0qcdm0"} 0`+"\n")
	families, err := m.Registry().Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "m2hod_diag_last_event_timestamp_seconds" {
			continue
		}
		for _, metric := range f.GetMetric() {
			if metric.GetLabel()[0].GetValue() == "gsmtap://127.0.0.1:4729" {
				at := metric.GetGauge().GetValue()
				assert.InDelta(t, float64(before.UnixNano())/1e9, at, 1, "the time of the event")
				assert.GreaterOrEqual(t, at, float64(before.Unix()))
			}
		}
	}
}

func TestFleetMetrics(t *testing.T) {
	stats := fleet.Stats{Connected: true, Entries: 7, Hits: 3, Misses: 5, Queued: 2, Published: 11, Dropped: 1, Rejected: 6,
		Malformed: map[string]uint64{fleet.MalformedDecode: 4}}
	m := New(states, Info{}, Sources{Fleet: func() fleet.Stats { return stats }}, nil)
	const want = `
# HELP m2hod_fleet_connected 1 while the fleet store's bucket answers (the hub reachable, through a leaf node if one is used); a connection alone is not enough.
# TYPE m2hod_fleet_connected gauge
m2hod_fleet_connected 1
# HELP m2hod_fleet_entries Other hosts' cell entries held from the fleet store.
# TYPE m2hod_fleet_entries gauge
m2hod_fleet_entries 7
# HELP m2hod_fleet_lookups_total Target cells not measured here looked up in the fleet store, by result (hit, miss).
# TYPE m2hod_fleet_lookups_total counter
m2hod_fleet_lookups_total{result="hit"} 3
m2hod_fleet_lookups_total{result="miss"} 5
# HELP m2hod_fleet_malformed_total Fleet store entries skipped, by reason (key, decode, schema, value, capacity).
# TYPE m2hod_fleet_malformed_total counter
m2hod_fleet_malformed_total{reason="capacity"} 0
m2hod_fleet_malformed_total{reason="decode"} 4
m2hod_fleet_malformed_total{reason="key"} 0
m2hod_fleet_malformed_total{reason="schema"} 0
m2hod_fleet_malformed_total{reason="value"} 0
# HELP m2hod_fleet_publish_dropped_total Cells pushed out of the full publication queue before they were published.
# TYPE m2hod_fleet_publish_dropped_total counter
m2hod_fleet_publish_dropped_total 1
# HELP m2hod_fleet_publish_queue Cells whose estimate waits for publication to the fleet store.
# TYPE m2hod_fleet_publish_queue gauge
m2hod_fleet_publish_queue 2
# HELP m2hod_fleet_publish_rejected_total Cell entries the fleet store's server refused (a full bucket); the cell is published again at its next change.
# TYPE m2hod_fleet_publish_rejected_total counter
m2hod_fleet_publish_rejected_total 6
# HELP m2hod_fleet_published_total Cell entries written to the fleet store.
# TYPE m2hod_fleet_published_total counter
m2hod_fleet_published_total 11
`
	names := []string{"m2hod_fleet_connected", "m2hod_fleet_entries", "m2hod_fleet_lookups_total", "m2hod_fleet_malformed_total",
		"m2hod_fleet_publish_dropped_total", "m2hod_fleet_publish_queue", "m2hod_fleet_publish_rejected_total", "m2hod_fleet_published_total"}
	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...))

	// Read at each scrape: the next one sees what the client counted since.
	stats.Rejected = 9
	const rejected = `
# HELP m2hod_fleet_publish_rejected_total Cell entries the fleet store's server refused (a full bucket); the cell is published again at its next change.
# TYPE m2hod_fleet_publish_rejected_total counter
m2hod_fleet_publish_rejected_total 9
`
	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(rejected), "m2hod_fleet_publish_rejected_total"))

	without := New(states, Info{}, Sources{}, nil)
	n, err := testutil.GatherAndCount(without.Registry(), names...)
	require.NoError(t, err)
	assert.Zero(t, n, "no fleet metrics without a fleet")
}

// TestDiagErrorReasonsStartAtZero: each input's reasons have a series from
// the start, at 0 until counted, and a counted one is not repeated.
func TestDiagErrorReasonsStartAtZero(t *testing.T) {
	var stats diag.Stats
	m := New(nil, Info{}, Sources{Diag: []DiagInput{{Name: "unix:/run/m2ho/diag.sock", Stats: &stats,
		Reasons: []string{diag.ReasonJSONSyntax, diag.ReasonPeerNotAllowed}}}}, nil)
	errorsOf := func() map[string]float64 {
		out := map[string]float64{}
		families, err := m.Registry().Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() != "m2hod_diag_errors_total" {
				continue
			}
			for _, metric := range f.GetMetric() {
				for _, l := range metric.GetLabel() {
					if l.GetName() == "reason" {
						out[l.GetValue()] = metric.GetCounter().GetValue()
					}
				}
			}
		}
		return out
	}
	assert.Equal(t, map[string]float64{"json_syntax": 0, "peer_not_allowed": 0}, errorsOf())
	stats.CountError(diag.ReasonPeerNotAllowed)
	stats.CountError(diag.ReasonUDPTruncated)
	assert.Equal(t, map[string]float64{"json_syntax": 0, "peer_not_allowed": 1, "udp_truncated": 1}, errorsOf())
}
