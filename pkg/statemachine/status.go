package statemachine

import (
	"maps"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
)

// ignoredLearntSave counts what the learning predictor could not save to
// its store.
const ignoredLearntSave = "learnt_save_failed"

// counters are the machine's running totals.
type counters struct {
	transitions            uint64
	predictionsMade        uint64
	unpredictedCommands    uint64
	unannouncedCompletions uint64
	failures               uint64
	handovers              map[string]uint64
	predictions            map[string]uint64
	events                 map[string]uint64
	ignored                map[string]uint64
	actuatorErrors         map[string]uint64
}

func newCounters() counters {
	return counters{
		handovers:      make(map[string]uint64),
		predictions:    make(map[string]uint64),
		events:         make(map[string]uint64),
		ignored:        make(map[string]uint64),
		actuatorErrors: make(map[string]uint64),
	}
}

// Status is a snapshot of the machine for /status.
type Status struct {
	State State     `json:"state"`
	Since time.Time `json:"since"`
	// Policy is the configured policy, m2ho or freeze.
	Policy Policy `json:"policy"`
	// Serving is the cell data flows through: the SCG cell when there is
	// one, else the primary cell.
	Serving    diag.Cell         `json:"serving"`
	PCell      diag.Cell         `json:"pcell"`
	SCG        *diag.Cell        `json:"scg,omitempty"`
	Prediction *PredictionStatus `json:"prediction,omitempty"`
	Command    *CommandStatus    `json:"command,omitempty"`
	InForce    PolicyStatus      `json:"in_force"`
	// BandwidthHold is on while a known cell carries the data.
	BandwidthHold bool `json:"bandwidth_hold"`
	// Ramp is on while the clamp of the last handover ramps up on the new
	// cell.
	Ramp bool `json:"ramp"`
	// LossPersists says the senders keep losing without shrinking
	// (Estimator.LossPersists): no ramp or bandwidth clamp holds them.
	LossPersists bool       `json:"loss_persists"`
	T2           []T2Status `json:"t2"`
	// InterruptionMillis is the median downlink interruption of the last
	// handovers the datapath saw, which sizes the Preparation clamp's
	// headroom above the target's buffer; 0 before the first.
	InterruptionMillis float64 `json:"interruption_ms"`
	// LearntReportKinds counts the kinds of measurement report the
	// learning predictor has counts of (see ReportStats).
	LearntReportKinds int      `json:"learnt_report_kinds"`
	Counters          Counters `json:"counters"`
}

// PredictionStatus is the pending prediction.
type PredictionStatus struct {
	Event diag.MeasEvent `json:"event"`
	// Conditional: made from a conditional handover configuration, not
	// from a report (Event is empty).
	Conditional bool      `json:"conditional,omitempty"`
	Source      diag.Cell `json:"source"`
	Target      diag.Cell `json:"target"`
	PredictedAt time.Time `json:"predicted_at"`
	Deadline    time.Time `json:"deadline"`
}

// CommandStatus is the handover being executed: the latest command of
// its reconfiguration, and the cell data will flow through afterwards.
type CommandStatus struct {
	Kind       diag.HOKind `json:"kind"`
	Source     diag.Cell   `json:"source"`
	Target     diag.Cell   `json:"target"`
	NewServing diag.Cell   `json:"new_serving"`
	ReceivedAt time.Time   `json:"received_at"`
	Deadline   time.Time   `json:"deadline"`
}

// PolicyStatus is the policy the machine keeps in force. Deadlines are
// those last written to the datapath; nil when none is written (a write
// failed and is being retried).
type PolicyStatus struct {
	// ClampBytes is the window clamp, 0 when none.
	ClampBytes uint32 `json:"clamp_bytes"`
	// ClampSource says where the clamp comes from: an estimator lookup
	// rule (cell, fleet, band_min, sub6_min, default), bandwidth, ramp or
	// freeze.
	ClampSource         string     `json:"clamp_source,omitempty"`
	ClampDeadline       *time.Time `json:"clamp_deadline,omitempty"`
	Freeze              bool       `json:"freeze"`
	Suppression         bool       `json:"suppression"`
	SuppressionDeadline *time.Time `json:"suppression_deadline,omitempty"`
}

// T2Status is the report-to-command interval of one serving band.
type T2Status struct {
	Band diag.Band `json:"band"`
	// MeanMillis is the learnt mean, over Samples intervals.
	MeanMillis float64 `json:"mean_ms"`
	Samples    int     `json:"samples"`
	// InUseMillis is the T2 predictions use: the mean once there are
	// enough samples, else the default.
	InUseMillis float64 `json:"in_use_ms"`
	// WindowMillis is how long a prediction waits for its command: 2*T2,
	// or longer when the learning predictor saw commands come later.
	WindowMillis float64 `json:"window_ms"`
}

// Counters are totals since start.
type Counters struct {
	Transitions            uint64            `json:"transitions"`
	PredictionsMade        uint64            `json:"predictions_made"`
	UnpredictedCommands    uint64            `json:"unpredicted_commands"`
	UnannouncedCompletions uint64            `json:"unannounced_completions"`
	Failures               uint64            `json:"failures"`
	Handovers              map[string]uint64 `json:"handovers"`
	Predictions            map[string]uint64 `json:"predictions"`
	Events                 map[string]uint64 `json:"events"`
	Ignored                map[string]uint64 `json:"ignored"`
	ActuatorErrors         map[string]uint64 `json:"actuator_errors"`
}

// State returns the current state.
func (m *Machine) State() State { return m.state }

// Status returns a snapshot that shares nothing with the machine.
func (m *Machine) Status() Status {
	st := Status{
		State:         m.state,
		Since:         m.since,
		Policy:        m.cfg.Policy,
		Serving:       m.dataCell(),
		PCell:         m.pcell,
		BandwidthHold: m.bandwidthHold,
		Ramp:          m.ramp != nil,
		LossPersists:  m.est.LossPersists(m.now),
		InForce:       m.policyStatus(),
		T2:            m.t2Status(),

		InterruptionMillis: float64(m.interruption()) / float64(time.Millisecond),

		LearntReportKinds: len(m.learn.counts),
		Counters: Counters{
			Transitions:            m.cnt.transitions,
			PredictionsMade:        m.cnt.predictionsMade,
			UnpredictedCommands:    m.cnt.unpredictedCommands,
			UnannouncedCompletions: m.cnt.unannouncedCompletions,
			Failures:               m.cnt.failures,
			Handovers:              maps.Clone(m.cnt.handovers),
			Predictions:            maps.Clone(m.cnt.predictions),
			Events:                 maps.Clone(m.cnt.events),
			Ignored:                maps.Clone(m.cnt.ignored),
			ActuatorErrors:         maps.Clone(m.cnt.actuatorErrors),
		},
	}
	if m.learn.saveErrors > 0 {
		st.Counters.Ignored[ignoredLearntSave] = m.learn.saveErrors
	}
	if !m.scg.IsZero() {
		scg := m.scg
		st.SCG = &scg
	}
	if p := m.pred; p != nil {
		st.Prediction = &PredictionStatus{Event: p.event, Conditional: p.conditional, Source: p.source, Target: p.target, PredictedAt: p.at, Deadline: p.deadline}
	}
	if c := m.cmd; c != nil {
		st.Command = &CommandStatus{Kind: c.kind, Source: c.source, Target: c.target, NewServing: c.dataCell(), ReceivedAt: c.at, Deadline: c.deadline}
	}
	return st
}

func (m *Machine) policyStatus() PolicyStatus {
	p := &m.pol
	ps := PolicyStatus{
		ClampBytes:  p.clampBytes,
		ClampSource: p.clampSource,
		Freeze:      p.freeze,
		Suppression: p.suppressing,
	}
	if p.clampActive() && !p.clampWritten.IsZero() {
		d := p.clampWritten
		ps.ClampDeadline = &d
	}
	if p.suppressing && !p.suppressWritten.IsZero() {
		d := p.suppressWritten
		ps.SuppressionDeadline = &d
	}
	return ps
}

func (m *Machine) t2Status() []T2Status {
	out := make([]T2Status, 0, 2)
	for _, band := range []diag.Band{diag.BandSub6, diag.BandMmWave} {
		st := T2Status{Band: band, InUseMillis: millis(m.t2For(band)), WindowMillis: millis(m.predictionWindow(band))}
		if t, ok := m.t2[band]; ok {
			st.MeanMillis, st.Samples = millis(t.mean), t.samples
		}
		out = append(out, st)
	}
	return out
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
