// Package metrics exposes the Prometheus metrics of m2hod (DESIGN.md,
// "Metrics") on a private registry.
//
// Two kinds of metrics live here. Events that happen in the daemon (state
// transitions, handovers, predictions, bursts, actuation latency) are
// ordinary counters and histograms updated as they happen. Values that
// already exist elsewhere (BPF counters, the flow table, the RTT histogram
// kept in BPF, diag input counts, the policy in force) are read only when
// Prometheus scrapes, by a custom collector, so that nothing is copied on
// the packet or event path.
package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/fleet"
	"github.com/m2ho/m2ho/pkg/statemachine"
	"github.com/m2ho/m2ho/pkg/version"
)

const namespace = "m2hod"

// Label values exported from the start, so that rates and alerts see a
// zero rather than no series: the handover kinds (source and target band)
// and prediction outcomes of DESIGN.md, the actuator's operations, and the
// diag event types of the JSON v1 contract. Without the zeros, a daemon
// whose diag input yields nothing (a wrong serial port, undecodable
// firmware logs) would have no m2hod_diag_events_total series, and the
// alerts built on its rate could not fire for the very failure they
// watch; nor could an increase() see the first actuation error.
var (
	handoverKinds      = diag.HandoverClasses
	predictionOutcomes = []string{"confirmed", "cancelled_a1", "timed_out", "cho_removed", "released"}
)

// DurationHistogram is a histogram kept elsewhere, in buckets of its own:
// Counts[i] samples lie below Upper[i] and at or above the bound before
// (0 for the first). An Upper of math.MaxInt64 is open-ended.
type DurationHistogram struct {
	Upper  []time.Duration
	Counts []uint64
}

// DatapathSnapshot is what the datapath reports at scrape time.
type DatapathSnapshot struct {
	// Attached says the programs are on the modem interface; false
	// while it is gone and m2hod waits for it to come back.
	Attached bool
	// Events are the programs' counters, each labelled with its name in
	// the counter enum (see datapath.Counters).
	Events []diag.Counter
	Flows  int
	RTT    DurationHistogram
}

// PolicySnapshot is the policy in force in the datapath.
type PolicySnapshot struct {
	// ClampBytes is the window clamp, 0 when no clamp holds.
	ClampBytes  uint64
	Freeze      bool
	Suppressing bool
}

// DiagInput is one diag input's counts, labelled with its URI.
type DiagInput struct {
	Name  string
	Stats *diag.Stats
	// Reasons are the errors the input can count: each has a series from
	// the start, 0 until its first error, so that a healthy input shows
	// as one without errors rather than as nothing.
	Reasons []string
}

// Sources are read at every scrape. Any may be nil.
type Sources struct {
	Datapath func() (DatapathSnapshot, error)
	Policy   func() PolicySnapshot
	// Diag are the inputs, each counted apart.
	Diag []DiagInput
	// EstimatorSkipped counts the inputs the estimator rejected, by
	// reason.
	EstimatorSkipped func() []diag.Counter
	// AttachMode is how the programs are attached now (tcx, clsact, or none
	// while the interface is gone); it labels m2hod_info.
	AttachMode func() string
	// Fleet is the fleet store's counters; nil without a fleet.
	Fleet func() fleet.Stats
}

// Info labels the constant m2hod_info metric with what is fixed for the
// life of the process; the attach mode, which changes when the interface
// goes and comes back, is read from Sources.AttachMode at each scrape.
type Info struct {
	Mode, Policy string
}

// Metrics holds the daemon's metrics and their registry.
type Metrics struct {
	registry *prometheus.Registry
	logger   *slog.Logger

	state       *prometheus.GaugeVec
	states      []string
	transitions *prometheus.CounterVec
	handovers   *prometheus.CounterVec
	predictions *prometheus.CounterVec
	bursts      prometheus.Histogram
	actuation   prometheus.Histogram
	actErrors   *prometheus.CounterVec
}

// New creates the metrics on a fresh registry. states lists every state
// of the state machine, initial first: m2hod_state has one series per
// state, 1 for the current one.
func New(states []string, info Info, src Sources, logger *slog.Logger) *Metrics {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		logger:   logger,
		states:   states,
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "state",
			Help: "Current state of the handover state machine (1 for the current state).",
		}, []string{"state"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "state_transitions_total",
			Help: "State machine transitions, by source and destination state.",
		}, []string{"from", "to"}),
		handovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "handovers_total",
			Help: "Executed handovers, by source and target band.",
		}, []string{"kind"}),
		predictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "predictions_total",
			Help: "Handover predictions, by outcome.",
		}, []string{"outcome"}),
		bursts: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "burst_bytes",
			Help: "Bytes of each downlink burst seen by the datapath.",
			// 1.5 kB to 25 MB: one segment to a mmWave cell's buffer.
			Buckets: prometheus.ExponentialBuckets(1500, 2, 15),
		}),
		actuation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "actuation_latency_seconds",
			Help: "Time from the daemon taking a diag event to the end of the datapath updates it caused.",
			// 10 us to 160 ms.
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 15),
		}),
		actErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "actuation_errors_total",
			Help: "Datapath updates that failed, by operation.",
		}, []string{"op"}),
	}
	for _, kind := range handoverKinds {
		m.handovers.WithLabelValues(kind)
	}
	for _, outcome := range predictionOutcomes {
		m.predictions.WithLabelValues(outcome)
	}
	for _, op := range statemachine.Ops() {
		m.actErrors.WithLabelValues(op)
	}
	if len(states) > 0 {
		m.SetState(states[0])
	}
	m.registry.MustRegister(
		m.state, m.transitions, m.handovers, m.predictions, m.bursts, m.actuation, m.actErrors,
		&scrapeCollector{src: src, info: info},
		buildInfo(version.Get()),
		collectors.NewGoCollector(),
		// The standard process_* names, which dashboards and alerts
		// written for any exporter already know.
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// NewWaiting creates the metrics m2hod serves while it waits for its modem
// interface, before anything else runs: the build, the process, and
// m2hod_waiting_for_interface 1 with m2hod_datapath_attached 0.
// m2hod_flows is 0 too, as no flow is tracked, so that the alert on an
// unreadable datapath keeps to its own failure.
func NewWaiting(logger *slog.Logger) *Metrics {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{registry: prometheus.NewRegistry(), logger: logger}
	m.registry.MustRegister(
		constGauges{
			{descWaiting, 1}, {descAttached, 0}, {descFlows, 0},
		},
		buildInfo(version.Get()),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// constGauges are gauges of fixed values.
type constGauges []struct {
	d *prometheus.Desc
	v float64
}

func (g constGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range g {
		ch <- c.d
	}
}

func (g constGauges) Collect(ch chan<- prometheus.Metric) {
	for _, c := range g {
		ch <- prometheus.MustNewConstMetric(c.d, prometheus.GaugeValue, c.v)
	}
}

// buildInfo is m2hod_build_info: constant 1, labelled with the build, so
// that a fleet's versions can be counted and a rollout followed.
func buildInfo(b version.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Constant 1, labelled with the version, the commit and the Go version m2hod was built from.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
}

// Registry returns the private registry, for tests and embedding.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Handler serves the registry in the Prometheus exposition formats.
//
// A metric that cannot be collected (the BPF maps cannot be read) is left
// out and the rest is served: failing the whole scrape would turn it into
// up == 0, indistinguishable from a dead daemon, and hide the state,
// diag and process metrics that still hold. The failure is logged and
// counted in promhttp_metric_handler_errors_total{cause="gathering"}, and
// the missing m2hod_flows is what the M2hodDatapathUnreadable alert sees.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(m.logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      m.registry,
	})
}

// SetState makes state the current one in m2hod_state.
func (m *Metrics) SetState(state string) {
	for _, s := range m.states {
		v := 0.0
		if s == state {
			v = 1
		}
		m.state.WithLabelValues(s).Set(v)
	}
}

// Transition records a state change and makes to the current state.
func (m *Metrics) Transition(from, to string) {
	m.transitions.WithLabelValues(from, to).Inc()
	m.SetState(to)
}

// Handover records an executed handover of kind sub6_sub6, sub6_mmwave,
// mmwave_mmwave or mmwave_sub6.
func (m *Metrics) Handover(kind string) { m.handovers.WithLabelValues(kind).Inc() }

// Prediction records the outcome of a prediction.
func (m *Metrics) Prediction(outcome string) { m.predictions.WithLabelValues(outcome).Inc() }

// Burst records a downlink burst.
func (m *Metrics) Burst(bytes uint64) { m.bursts.Observe(float64(bytes)) }

// Actuation records how long a diag event took, once taken off the
// daemon's queue, to reach the datapath.
func (m *Metrics) Actuation(d time.Duration) { m.actuation.Observe(d.Seconds()) }

// ActuationError records a failed datapath update.
func (m *Metrics) ActuationError(op string) { m.actErrors.WithLabelValues(op).Inc() }

// scrapeCollector turns the Sources into constant metrics at scrape time.
type scrapeCollector struct {
	src  Sources
	info Info
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
}

var (
	descInfo             = desc("info", "Constant 1, labelled with how m2hod runs.", "mode", "policy", "attach_mode")
	descClamp            = desc("clamp_bytes", "Receive window clamp in force, 0 when off.")
	descFreeze           = desc("freeze_active", "1 while a zero-window freeze is in force.")
	descSuppressing      = desc("suppression_active", "1 while duplicate ACKs are suppressed.")
	descDatapathEvents   = desc("datapath_events_total", "Events the BPF programs counted, by the name of their counter (docs/metrics.md lists them); ingress_bytes counts bytes.", "event")
	descFlows            = desc("flows", "TCP flows tracked by the datapath.")
	descAttached         = desc("datapath_attached", "1 while the programs are attached to the modem interface, 0 while it is gone and m2hod waits for an interface of its name.")
	descWaiting          = desc("waiting_for_interface", "1 while m2hod waits for its modem interface: not there yet at the start, or gone since.")
	descRTT              = desc("rtt_seconds", "RTT samples measured by the datapath (TSval/TSecr matching); the sum is estimated from bucket midpoints.")
	descDiagEvents       = desc("diag_events_total", "Diag events received, by input and type.", "input", "type")
	descDiagErrors       = desc("diag_errors_total", "Diag input rejected and skipped, by input and reason.", "input", "reason")
	descDiagLastEvent    = desc("diag_last_event_timestamp_seconds", "When the input last gave an event, in seconds since the epoch; 0 before its first.", "input")
	descEstimatorSkipped = desc("estimator_skipped_total", "Bursts, byte counts and RTT samples the estimator rejected, by reason.", "reason")
	descFleetConnected   = desc("fleet_connected", "1 while the fleet store's bucket answers (the hub reachable, through a leaf node if one is used); a connection alone is not enough.")
	descFleetEntries     = desc("fleet_entries", "Other hosts' cell entries held from the fleet store.")
	descFleetLookups     = desc("fleet_lookups_total", "Target cells not measured here looked up in the fleet store, by result (hit, miss).", "result")
	descFleetQueue       = desc("fleet_publish_queue", "Cells whose estimate waits for publication to the fleet store.")
	descFleetPublished   = desc("fleet_published_total", "Cell entries written to the fleet store.")
	descFleetDropped     = desc("fleet_publish_dropped_total", "Cells pushed out of the full publication queue before they were published.")
	descFleetRejected    = desc("fleet_publish_rejected_total", "Cell entries the fleet store's server refused (a full bucket); the cell is published again at its next change.")
	descFleetMalformed   = desc("fleet_malformed_total", "Fleet store entries skipped, by reason (key, decode, schema, value, capacity).", "reason")
)

func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInfo, descClamp, descFreeze, descSuppressing, descDatapathEvents,
		descFlows, descAttached, descWaiting, descRTT, descDiagEvents, descDiagErrors, descDiagLastEvent, descEstimatorSkipped,
		descFleetConnected, descFleetEntries, descFleetLookups, descFleetQueue, descFleetPublished, descFleetDropped, descFleetRejected,
		descFleetMalformed} {
		ch <- d
	}
}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	attachMode := ""
	if c.src.AttachMode != nil {
		attachMode = c.src.AttachMode()
	}
	ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, c.info.Mode, c.info.Policy, attachMode)
	if c.src.Policy != nil {
		p := c.src.Policy()
		ch <- prometheus.MustNewConstMetric(descClamp, prometheus.GaugeValue, float64(p.ClampBytes))
		ch <- prometheus.MustNewConstMetric(descFreeze, prometheus.GaugeValue, boolValue(p.Freeze))
		ch <- prometheus.MustNewConstMetric(descSuppressing, prometheus.GaugeValue, boolValue(p.Suppressing))
	}
	if c.src.Datapath != nil {
		c.collectDatapath(ch)
	}
	for _, in := range c.src.Diag {
		events, errs := in.Stats.Snapshot()
		seen := make(map[string]bool, len(events))
		for _, e := range events {
			seen[e.Label] = true
			ch <- prometheus.MustNewConstMetric(descDiagEvents, prometheus.CounterValue, float64(e.Value), in.Name, e.Label)
		}
		for _, t := range diag.Types() {
			if !seen[string(t)] {
				ch <- prometheus.MustNewConstMetric(descDiagEvents, prometheus.CounterValue, 0, in.Name, string(t))
			}
		}
		seenErrs := make(map[string]bool, len(errs))
		for _, e := range errs {
			seenErrs[e.Label] = true
			ch <- prometheus.MustNewConstMetric(descDiagErrors, prometheus.CounterValue, float64(e.Value), in.Name, e.Label)
		}
		for _, reason := range in.Reasons {
			if !seenErrs[reason] {
				seenErrs[reason] = true
				ch <- prometheus.MustNewConstMetric(descDiagErrors, prometheus.CounterValue, 0, in.Name, reason)
			}
		}
		last := 0.0
		if t := in.Stats.LastEvent(); !t.IsZero() {
			last = float64(t.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(descDiagLastEvent, prometheus.GaugeValue, last, in.Name)
	}
	if c.src.EstimatorSkipped != nil {
		for _, e := range c.src.EstimatorSkipped() {
			ch <- prometheus.MustNewConstMetric(descEstimatorSkipped, prometheus.CounterValue, float64(e.Value), e.Label)
		}
	}
	if c.src.Fleet != nil {
		collectFleet(ch, c.src.Fleet())
	}
}

func collectFleet(ch chan<- prometheus.Metric, st fleet.Stats) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(descFleetConnected, boolValue(st.Connected))
	gauge(descFleetEntries, float64(st.Entries))
	counter(descFleetLookups, st.Hits, "hit")
	counter(descFleetLookups, st.Misses, "miss")
	gauge(descFleetQueue, float64(st.Queued))
	counter(descFleetPublished, st.Published)
	counter(descFleetDropped, st.Dropped)
	counter(descFleetRejected, st.Rejected)
	for _, reason := range fleet.MalformedReasons {
		counter(descFleetMalformed, st.Malformed[reason], reason)
	}
}

func (c *scrapeCollector) collectDatapath(ch chan<- prometheus.Metric) {
	dp, err := c.src.Datapath()
	if err != nil {
		// Every datapath metric is left out of this scrape, m2hod_flows
		// included, and the rest stays useful: the invalid metric makes
		// the handler (ContinueOnError) log and count the failure and
		// serve everything else.
		ch <- prometheus.NewInvalidMetric(descDatapathEvents, fmt.Errorf("reading the datapath: %w", err))
		return
	}
	for _, e := range dp.Events {
		ch <- prometheus.MustNewConstMetric(descDatapathEvents, prometheus.CounterValue, float64(e.Value), e.Label)
	}
	ch <- prometheus.MustNewConstMetric(descFlows, prometheus.GaugeValue, float64(dp.Flows))
	ch <- prometheus.MustNewConstMetric(descAttached, prometheus.GaugeValue, boolValue(dp.Attached))
	ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, boolValue(!dp.Attached))
	count, sum, buckets, err := dp.RTT.cumulative()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descRTT, err)
		return
	}
	ch <- prometheus.MustNewConstHistogram(descRTT, count, sum, buckets)
}

// cumulative converts the buckets to Prometheus' cumulative buckets in
// seconds; an open-ended last bucket is Prometheus' own +Inf. The
// histogram keeps no sum, so each sample counts as the midpoint of its
// bucket, or as the lower bound of an open-ended one.
func (h DurationHistogram) cumulative() (count uint64, sum float64, buckets map[float64]uint64, err error) {
	if len(h.Upper) != len(h.Counts) {
		return 0, 0, nil, fmt.Errorf("histogram of %d counts and %d bounds", len(h.Counts), len(h.Upper))
	}
	buckets = make(map[float64]uint64, len(h.Counts))
	var lower time.Duration
	for i, n := range h.Counts {
		upper := h.Upper[i]
		if upper <= lower {
			return 0, 0, nil, errors.New("histogram bounds not increasing")
		}
		count += n
		if upper == math.MaxInt64 {
			if i != len(h.Counts)-1 {
				return 0, 0, nil, errors.New("open-ended histogram bucket before the last")
			}
			sum += float64(n) * lower.Seconds()
			break
		}
		sum += float64(n) * (lower + upper).Seconds() / 2
		buckets[upper.Seconds()] = count
		lower = upper
	}
	return count, sum, buckets, nil
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
