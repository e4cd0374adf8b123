// Package statemachine is the M2HO controller (paper section 4.1): a
// three-state machine driven by modem diag events that decides which
// policy the datapath enforces around each handover.
//
//   - Stable: no handover pending. After a handover to a sub-6 cell whose
//     senders the handover's clamp held back, or whose kept window exceeds
//     what the target is expected to carry, a ramp takes the handover's
//     clamp over: it starts at that clamp (or, with none, at what the
//     target is expected to carry: the bandwidth-delay product plus the
//     queue the bandwidth hold leaves) and rises each round with what
//     the new cell delivered (Eq. 2), at most doubling, until the
//     senders' windows fit under it, so the window kept through the
//     handover enters the new cell at the cell's pace instead of
//     overflowing it. A Preparation clamp that no handover followed
//     reopens the same way, and so does the clamp held through a
//     connection failure on the cell it comes back on. Then the
//     bandwidth hold keeps the window: on a sub-6 cell at the bandwidth
//     estimate (Eq. 2), so a sender keeps a mmWave-sized cwnd for the
//     next mmWave cell (section 4.5); on a mmWave cell at what a
//     handover to sub-6 can drain.
//   - Preparation: a handover is predicted (Algorithm 1, section 4.2) or
//     commanded; the window is clamped to the target cell's buffer estimate
//     (section 4.3). The duplicate ACKs of holes are suppressed: the
//     source cell's context release reorders data as the UE applies the
//     command, before the command reaches the machine.
//   - Smoothing: the handover executed; duplicate ACKs are suppressed until
//     the flows release themselves, the target cell's first burst period
//     ends (it drained the forwarded data), or Config.SmoothingMax passes
//     (section 4.4). While the datapath reports flows still waiting, their
//     release or SmoothingMax rules, not a burst.
//
// The machine tells the estimator which cell is serving (SetServing) and
// when a handover is under way, from its command to the end of its ramp
// (HandoverUnderWay), and asks it for clamps; the daemon feeds the estimator everything else
// (bursts, rb_alloc events, byte counts, RTT samples).
//
// A Machine is not safe for concurrent use: the daemon calls all of its
// methods, Status included, from one goroutine (or under one lock). Event
// times and Tick times must come from the same clock. Every
// policy it writes carries a deadline no further than Config.PolicyLease
// ahead, renewed by Tick, so a stuck daemon cannot hold the datapath.
package statemachine

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
)

// State is a state of the machine.
type State int

// States of section 4.1.
const (
	Stable State = iota
	Preparation
	Smoothing
)

// String returns "stable", "preparation" or "smoothing".
func (s State) String() string {
	switch s {
	case Stable:
		return "stable"
	case Preparation:
		return "preparation"
	case Smoothing:
		return "smoothing"
	}
	return "invalid"
}

// MarshalText renders the state as its name in JSON.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Actuator writes policies to the datapath. Every call that installs a
// policy gives the deadline after which the datapath drops it by itself.
type Actuator interface {
	SetClamp(bytes uint32, deadline time.Time) error
	// SetFreeze advertises a zero window (the Freeze-TCP baseline).
	SetFreeze(deadline time.Time) error
	ClearClamp() error
	// PrepareSuppression suppresses the duplicate ACKs of holes, with no
	// epoch, from a prediction or a command until the execution.
	PrepareSuppression(deadline time.Time) error
	// StartSuppression starts duplicate-ACK suppression and bumps the
	// handover epoch.
	StartSuppression(deadline time.Time) error
	StopSuppression() error
}

// DiscardActuator accepts every policy and enforces none: the actuator of
// a machine that only decides, such as a replay of a capture.
type DiscardActuator struct{}

func (DiscardActuator) SetClamp(uint32, time.Time) error   { return nil }
func (DiscardActuator) SetFreeze(time.Time) error          { return nil }
func (DiscardActuator) ClearClamp() error                  { return nil }
func (DiscardActuator) PrepareSuppression(time.Time) error { return nil }
func (DiscardActuator) StartSuppression(time.Time) error   { return nil }
func (DiscardActuator) StopSuppression() error             { return nil }

// Observer is told what the machine does, for metrics.
type Observer interface {
	Transition(from, to State, reason string, at time.Time)
	// Handover reports an executed handover: kind is one of the Kind
	// constants (sub6_sub6, sub6_mmwave, mmwave_mmwave, mmwave_sub6).
	Handover(kind string, at time.Time)
	// Prediction reports the fate of a prediction: confirmed,
	// cancelled_a1 or timed_out.
	Prediction(outcome string, at time.Time)
}

// bandwidthWarmup bounds how long the clamp of a handover waits for the
// first bandwidth estimate of the new cell under a bandwidth hold: the
// estimate needs an RTT sample (the daemon reads them every 100 ms) and
// one round of one smoothed RTT, a few hundred milliseconds even on a
// bloated path.
const bandwidthWarmup = time.Second

// failureHoldMax bounds how long the clamp in force at a connection
// failure is held for the re-establishment (see onFailure): a radio link
// failure recovers in about 138 ms (median), a NAS recovery in about
// 689 ms (data/handover-timing.md).
const failureHoldMax = time.Second

// reconfigurationSpread is how far apart the commands one RRC
// reconfiguration carries can reach the machine (events stamped on
// receipt): an SCG release waits that long for an SCG addition that
// would make it a change.
const reconfigurationSpread = 5 * time.Millisecond

// Prediction outcomes.
const (
	OutcomeConfirmed   = "confirmed"
	OutcomeCancelledA1 = "cancelled_a1"
	OutcomeTimedOut    = "timed_out"
	// OutcomeCHORemoved: the conditional handover configurations it was
	// made from were removed (or the connection released) unexecuted.
	OutcomeCHORemoved = "cho_removed"
)

// Transition reasons.
const (
	ReasonPredicted          = "predicted"
	ReasonCommand            = "command"
	ReasonUnpredictedCommand = "command_unpredicted"
	ReasonExecuted           = "executed"
	ReasonCancelledA1        = "cancelled_a1"
	ReasonCHORemoved         = "cho_removed"
	ReasonPredictionTimeout  = "prediction_timeout"
	ReasonExecutionTimeout   = "execution_timeout"
	ReasonFailure            = "failure"
	ReasonFlowsReleased      = "flows_released"
	ReasonBurstEnd           = "burst_end"
	ReasonSmoothingMax       = "smoothing_max"
)

type noObserver struct{}

func (noObserver) Transition(State, State, string, time.Time) {}
func (noObserver) Handover(string, time.Time)                 {}
func (noObserver) Prediction(string, time.Time)               {}

// warmupClamp is a clamp held in Stable until a deadline.
type warmupClamp struct {
	bytes  uint32
	source string
	until  time.Time
}

// Ramp constants. A round is slack when the data in flight, as the
// estimator measured it over one smoothed RTT, stayed below
// rampSlackPercent of the clamp: the senders' windows, not the clamp,
// held them. rampSlackRounds such rounds in a row end the ramp. 75% leaves
// room for the estimate's error on a round the clamp did hold (one
// smoothed RTT of bytes, sampled every 10 ms); two rounds keep one round
// cut short by the senders (an idle application, a delayed ACK train)
// from releasing a clamp that still binds.
const (
	rampSlackPercent = 75
	rampSlackRounds  = 2
)

// fillsClamp says whether a flight filled a clamp (at least
// rampSlackPercent of it): the clamp, not the senders' windows, may have
// held them, and their windows may be far larger.
func fillsClamp(flight uint64, clamp uint32) bool {
	return flight*100 >= uint64(clamp)*rampSlackPercent
}

// rampGrowth bounds the ramp's rise per round: the ACK clock of slow
// start, two segments out for each one delivered, which a cell's buffer
// absorbs. Eq. 2 (lambda = 2) grows as fast from a round the clamp filled
// but, on the peak round of the last second, would jump back at once to
// the rate before a clamp that held the senders in the same cell.
const rampGrowth = 2

// postHandoverRamp is the clamp that follows a handover (see
// applyStablePolicy).
type postHandoverRamp struct {
	// start is the target's buffer estimate, the floor of the ramp.
	start uint32
	// expected is what the cell is expected to carry (see newRamp):
	// while the clamp holds the senders the ramp doubles up to it.
	expected uint32
	// bytes is the clamp in force, from source (an estimator lookup
	// rule while it is the buffer estimate alone, else
	// ClampSourceRamp).
	bytes  uint32
	source string
	// executedAt is the handover's execution: rounds that ended before
	// it were the source cell's.
	executedAt time.Time
	// reopening: the ramp lifts a Preparation clamp no handover
	// followed, on the cell that carried expected just before it
	// (newReopening).
	reopening bool
	// lastRound is the end of the last round the ramp took, and
	// slackRounds how many rounds in a row left it slack.
	lastRound   time.Time
	slackRounds int
}

// prediction is a handover expected from a measurement report, or from
// a conditional handover configuration (conditional).
type prediction struct {
	event       diag.MeasEvent
	conditional bool
	// source is the serving cell of the report: an A1 of that cell
	// cancels the prediction, and T2 is learnt for its band.
	source   diag.Cell
	target   diag.Cell
	at       time.Time
	deadline time.Time
}

// command is a handover the network ordered and the UE is executing.
//
// One reconfiguration often carries several commands (an LTE handover
// with an SCG change that keeps the NR cell, an SCG release with an
// addition): they merge into one change of the serving cells.
type command struct {
	// kind, source and target are those of the latest command.
	kind           diag.HOKind
	source, target diag.Cell
	// pcell and scg are the serving cells once the commands executed.
	pcell, scg diag.Cell
	// scgDecided: a command of the set said what becomes of the SCG, so
	// a primary cell handover in the same set keeps that.
	scgDecided bool
	// pcellDecided: a primary cell handover of the set named the new
	// primary cell, so an SCG release in the same set keeps that.
	pcellDecided bool
	// randomAccess: the set completes with a random access (ho_complete).
	randomAccess bool
	// executeAt is when a set without random access (an SCG release)
	// takes effect: right after the reconfiguration that carries it,
	// once no further command of it (an SCG addition) came.
	executeAt time.Time
	// deadline is the execution timeout.
	deadline time.Time
	at       time.Time
	// standing is the prediction the set confirmed: once the set
	// executed, it predicts again if the set reached neither its target
	// nor another primary cell (see rearm).
	standing *prediction
}

// dataCell is the cell data will flow through once the set executed.
func (c *command) dataCell() diag.Cell {
	if !c.scg.IsZero() {
		return c.scg
	}
	return c.pcell
}

// Machine is the M2HO state machine. Create it with New.
type Machine struct {
	cfg    Config
	est    *estimator.Estimator
	act    Actuator
	logger *slog.Logger
	obs    Observer

	// now is the machine's clock: the latest time it was given. It never
	// goes back, so a late event cannot produce a deadline in the past.
	now   time.Time
	state State
	since time.Time

	// pcell is the primary cell; scg the primary cell of the secondary
	// cell group (EN-DC) when one is configured. A pcell with a band but
	// no RAT is a cell no log has named yet (see unannouncedCells).
	pcell, scg diag.Cell

	// pred is the pending prediction: in Preparation before a command,
	// or queued in Smoothing for when Smoothing ends.
	pred *prediction
	cmd  *command
	// expired is the last prediction that timed out: a command that
	// still follows it soon is a T2 sample longer than 2*T2, which T2
	// must learn or it could only ever shrink.
	expired *prediction
	// executedAt is when the last handover completed: in Smoothing, the
	// one that started it.
	executedAt time.Time
	// reestablishing is set by a connection failure until the next
	// execution, the re-establishment on a new cell (see execute).
	reestablishing bool
	// bandwidthHold is set while a known cell carries the data (see
	// bandwidthHoldOn).
	bandwidthHold bool
	// warmup is the clamp of the last executed handover, which the
	// bandwidth hold keeps until a new sub-6 cell has an estimate, when
	// the ramp is switched off.
	warmup warmupClamp
	// failureHold is the clamp in force when the connection failed, held
	// until the re-establishment executes (see onFailure).
	failureHold warmupClamp
	// ramp is the clamp following the last handover; nil when none.
	ramp *postHandoverRamp
	// prepClamped: in Preparation, the clamp in force is Preparation's
	// own (applyPreparationPolicy), not the Stable one kept through it;
	// prepClampedAt is when that clamp was first set.
	prepClamped   bool
	prepClampedAt time.Time
	// flowsPending: in this Smoothing the datapath reported flows still
	// waiting for the data of the source cell (OnFlowsPending).
	flowsPending bool
	// drain follows the new cell's slots in this Smoothing.
	drain estimator.SlotBursts
	// lastBurstEnd is the end of the latest datapath burst; gauge
	// measures the downlink's interruption across a handover from the
	// bursts, and interruptions keeps the last ones measured (see
	// interruptionHeadroom).
	lastBurstEnd  time.Time
	gauge         interruptionGauge
	interruptions []time.Duration

	t2    map[diag.Band]*t2Mean
	learn learner
	pol   datapathPolicy
	cnt   counters
}

// New returns a Machine in Stable. est and act are required.
func New(cfg Config, est *estimator.Estimator, act Actuator, logger *slog.Logger) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Policy == "" {
		cfg.Policy = PolicyM2HO
	}
	if est == nil || act == nil {
		return nil, errors.New("statemachine: estimator and actuator are required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Machine{
		cfg:    cfg,
		est:    est,
		act:    act,
		logger: logger,
		obs:    noObserver{},
		t2:     make(map[diag.Band]*t2Mean),
		learn:  newLearner(),
		cnt:    newCounters(),
	}, nil
}

// SetObserver installs o (nil: none).
func (m *Machine) SetObserver(o Observer) {
	if o == nil {
		o = noObserver{}
	}
	m.obs = o
}

// advance moves the machine's clock to t unless t is older, and runs the
// timers due by then: an input is judged on the state its time implies,
// whether or not a Tick came between.
func (m *Machine) advance(t time.Time) {
	if t.After(m.now) {
		m.now = t
	}
	if m.since.IsZero() {
		m.since = m.now
	}
	m.runTimers()
}

// HandleEvent runs one diag event, at ev.Time. rb_alloc events are
// mostly the estimator's (the daemon passes them to
// Estimator.AddRBAlloc); the machine looks in them for the end of the new
// cell's first burst period in Smoothing, with ev.Time the start of the
// first slot.
func (m *Machine) HandleEvent(ev diag.Event) {
	if ev.Time.IsZero() {
		m.cnt.ignored["no_time"]++
		return
	}
	m.advance(ev.Time)
	switch ev.Type {
	case diag.TypeMeasReport:
		m.onMeasReport(ev)
	case diag.TypeHOCommand:
		m.onCommand(ev)
	case diag.TypeHOComplete:
		m.onComplete(ev)
	case diag.TypeHOFailure:
		m.onFailure(ev.Cause)
	case diag.TypeCHOConfig:
		m.onConditional(ev)
	case diag.TypeRRCRelease:
		m.onRelease(ev)
	case diag.TypeRBAlloc:
		if m.state == Smoothing {
			m.onSmoothingSlots(ev)
		}
		if m.pcell.RAT == "" && m.scg.IsZero() {
			// Until a report or handover names the serving cell, the
			// scheduled one is: without it the datapath's bursts
			// belong to no cell. Once a cell is known, a late rb_alloc
			// of the previous one must not move it back.
			m.learnServing(ev.Cell.Normalized())
		}
	default:
		// Not counted by type: the map must not grow with garbage.
		m.cnt.ignored["unknown_type"]++
		return
	}
	m.cnt.events[string(ev.Type)]++
}

// Tick runs the timers, refreshes the bandwidth clamp and renews the
// deadlines of the policies in force. The daemon calls it often (every
// 10 to 50 ms): timeouts are only as precise as its period.
func (m *Machine) Tick(now time.Time) {
	m.advance(now)
	if m.state == Stable {
		m.applyStablePolicy()
	}
	m.refreshPolicy()
}

// runTimers fires what is due at m.now: an SCG release taking effect, the
// execution timeout, the prediction timeout (2*T2), SmoothingMax, the
// end of the bandwidth warm-up and of a failure's hold.
func (m *Machine) runTimers() {
	switch m.state {
	case Stable:
		warmupOver := m.warmup.bytes > 0 && !m.now.Before(m.warmup.until)
		if warmupOver {
			m.warmup = warmupClamp{}
		}
		if warmupOver || m.failureHold.bytes > 0 && !m.now.Before(m.failureHold.until) {
			m.applyStablePolicy()
		}
	case Preparation:
		switch {
		case m.cmd != nil && !m.cmd.executeAt.IsZero() && !m.now.Before(m.cmd.executeAt):
			m.execute(m.cmd.pcell, m.cmd.scg)
		case m.cmd != nil && !m.now.Before(m.cmd.deadline):
			m.cmd = nil
			m.enterStable(ReasonExecutionTimeout)
		case m.cmd == nil && m.pred != nil && !m.now.Before(m.pred.deadline):
			m.expirePrediction()
			m.enterStable(ReasonPredictionTimeout)
		}
	case Smoothing:
		if m.pred != nil && !m.now.Before(m.pred.deadline) {
			m.expirePrediction()
		}
		if !m.now.Before(m.executedAt.Add(m.cfg.SmoothingMax)) {
			m.endSmoothing(ReasonSmoothingMax)
		}
	}
}

// expirePrediction drops a prediction no command followed within 2*T2.
func (m *Machine) expirePrediction() {
	m.expired, m.pred = m.pred, nil
	m.obs.Prediction(OutcomeTimedOut, m.now)
	m.cnt.predictions[OutcomeTimedOut]++
}

// OnBurstEnd ends Smoothing when b shows the target cell drained its
// buffer, forwarded data included (section 4.4: the end of the first
// burst period after execution). A datapath packet train qualifies if it
// ended after the execution (a train cut by the handover's interruption
// ended before it, with the source cell's data) and carries at least
// Config.DrainBurstBytes: the datapath reports every packet train, down
// to a lone ACK or DNS reply, and such a packet says nothing of the
// cell's buffer. rb_alloc events give the other kind of burst period
// (see HandleEvent).
//
// While the datapath reports flows still waiting (OnFlowsPending) no
// burst ends Smoothing: the flows' own release, an acknowledgement past
// what each had received before the handover, is direct evidence that
// the forwarded data arrived, a burst only indirect, and SmoothingMax
// bounds the wait below the sender's minimum RTO. The burst decides when
// nothing is known of the flows: in observe mode, or while suppression
// is not in force.
//
// Which bursts end Smoothing is decided here rather than filtered by the
// daemon: it is part of the state's exit rule, next to the flows' release
// and SmoothingMax, and the packet trains, the rb_alloc slots and the
// flows' pending state only meet here. The machine does not feed the
// estimator; the daemon also calls Estimator.AddBurst.
func (m *Machine) OnBurstEnd(b estimator.Burst) {
	m.advance(b.End)
	prev := m.lastBurstEnd
	if b.End.After(prev) {
		m.lastBurstEnd = b.End
	}
	if gap, ok := m.gauge.burst(b, prev); ok {
		m.recordInterruption(gap)
	}
	if m.state != Smoothing || !b.End.After(m.executedAt) {
		return
	}
	if b.Bytes < m.cfg.DrainBurstBytes {
		m.cnt.ignored["burst_too_small"]++
		return
	}
	m.drained()
}

// drained ends Smoothing on a burst that drained the target cell, unless
// flows are known to wait.
func (m *Machine) drained() {
	if m.flowsPending {
		m.cnt.ignored["burst_flows_pending"]++
		return
	}
	m.endSmoothing(ReasonBurstEnd)
}

// onSmoothingSlots follows the slots of the cell served since the
// handover and ends Smoothing when its first burst period ends after the
// execution. Slots of another cell (the source cell's last log, an LTE
// anchor beside the NR data cell) say nothing of the target's buffer.
func (m *Machine) onSmoothingSlots(ev diag.Event) {
	cell := ev.Cell.Normalized()
	if (cell.RAT != "" && cell.Key() != m.dataCell().Key()) || ev.SlotDuration <= 0 {
		return
	}
	drained := false
	m.drain.Feed(ev.Time, ev.SlotDuration, ev.Slots, func(_, end time.Time) {
		drained = drained || end.After(m.executedAt)
	})
	if drained {
		m.drained()
	}
}

// OnFlowsPending tells the machine that the datapath still counts flows
// waiting for the data of the source cell: until they release (see
// OnFlowsReleased) or SmoothingMax passes, no burst ends Smoothing.
func (m *Machine) OnFlowsPending(now time.Time) {
	m.advance(now)
	if m.state == Smoothing {
		m.flowsPending = true
	}
}

// OnFlowsReleased ends Smoothing: every suppressed flow acknowledged past
// the highest sequence it had received before the handover.
func (m *Machine) OnFlowsReleased(now time.Time) {
	m.advance(now)
	if m.state == Smoothing {
		m.endSmoothing(ReasonFlowsReleased)
	}
}

func (m *Machine) transition(to State, reason string) {
	if to == m.state {
		return
	}
	from := m.state
	m.state, m.since = to, m.now
	m.cnt.transitions++
	m.logger.Info("state", "from", from, "to", to, "reason", reason)
	m.obs.Transition(from, to, reason, m.now)
}

// dataCell is the best cell the UE has data through: the SCG cell when
// one is present.
func (m *Machine) dataCell() diag.Cell {
	if !m.scg.IsZero() {
		return m.scg
	}
	return m.pcell
}

// setCells updates the serving cells and tells the estimator where
// bursts now come from.
func (m *Machine) setCells(pcell, scg diag.Cell) {
	before := m.dataCell()
	m.pcell, m.scg = pcell, scg
	if after := m.dataCell(); after != before {
		m.est.SetServing(after, m.now)
	}
}

// learnServing follows the serving cells named by measurement reports, so
// the machine knows them without having seen the handover that led there.
// In EN-DC the LTE cell is always the anchor and an NR cell beside it is
// the SCG.
func (m *Machine) learnServing(s diag.Cell) {
	if s.RAT != "" && s.Key() != m.pcell.Key() && s.Key() != m.scg.Key() {
		// A cell serving since a failure is where the connection was
		// re-established: a completion after it is a handover's.
		m.reestablishing = false
	}
	before := m.dataCell().Key()
	switch {
	case s.RAT == "" || s.Key() == m.pcell.Key() || s.Key() == m.scg.Key():
	case m.pcell.RAT == "":
		// No cell yet, or one known only by its band.
		m.setCells(s, m.scg)
	case s.RAT == diag.RATNR && m.pcell.RAT == diag.RATLTE:
		m.setCells(m.pcell, s)
	case s.RAT == diag.RATLTE && m.pcell.RAT == diag.RATNR:
		m.setCells(s, m.pcell)
	default:
		m.setCells(s, m.scg)
	}
	if m.dataCell().Key() != before {
		m.bandwidthHold = m.bandwidthHoldOn()
		if m.state == Stable {
			m.applyStablePolicy()
		}
	}
}

func (m *Machine) onMeasReport(ev diag.Event) {
	serving, neighbor := ev.Serving.Normalized(), ev.Neighbor.Normalized()
	m.learnServing(serving)
	if serving.IsZero() {
		serving = m.dataCell()
	}
	if ev.Meas == diag.EventA1 {
		m.onA1(serving)
		return
	}
	predicts := m.observeReport(ev.Meas, serving, neighbor)
	if !m.cfg.Prediction || !predicts {
		return
	}
	m.predict(ev.Meas, serving, m.predictedTarget(ev.Meas, serving, neighbor), false)
}

// onConditional follows the conditional handover configurations in
// force. The network has decided: the UE hands over to a candidate by
// itself once that candidate's condition holds, with no further command.
// That predicts the handover to the first candidate (the candidates of
// one configuration are the neighbours the network prepared, and m2ho's
// policy needs one target) for as long as the configurations stand, up
// to ConditionalHold; a change that keeps its target keeps it, and their
// removal cancels it.
func (m *Machine) onConditional(ev diag.Event) {
	serving := ev.Serving.Normalized()
	m.learnServing(serving)
	if serving.IsZero() {
		serving = m.dataCell()
	}
	if m.pred != nil && m.pred.conditional && slices.ContainsFunc(ev.Candidates, func(c diag.Cell) bool {
		return c.Normalized().Key() == m.pred.target.Key()
	}) {
		return
	}
	if len(ev.Candidates) > 0 {
		if m.cfg.Prediction {
			m.predict("", serving, ev.Candidates[0].Normalized(), true)
		}
		return
	}
	if m.pred == nil || !m.pred.conditional {
		return
	}
	m.pred = nil
	m.obs.Prediction(OutcomeCHORemoved, m.now)
	m.cnt.predictions[OutcomeCHORemoved]++
	if m.state == Preparation && m.cmd == nil {
		m.enterStable(ReasonCHORemoved)
	}
}

// predictedTarget is the cell a predicted handover leads to: the measured
// neighbour, or for an A2 of the mmWave cell without one, the LTE anchor
// when that cell is the SCG (its release moves the data there) and an
// unknown sub-6 cell otherwise.
func (m *Machine) predictedTarget(ev diag.MeasEvent, serving, neighbor diag.Cell) diag.Cell {
	if !neighbor.IsZero() || ev != diag.EventA2 {
		return neighbor
	}
	if !m.scg.IsZero() && serving.Key() == m.scg.Key() && !m.pcell.IsZero() {
		return m.pcell
	}
	return diag.Cell{Band: diag.BandSub6}
}

func (m *Machine) predict(ev diag.MeasEvent, serving, target diag.Cell, conditional bool) {
	switch {
	case m.cmd != nil:
		// The network already decided.
		return
	case m.pred != nil && m.pred.conditional && !conditional:
		// So it did with a conditional handover: a report changes
		// nothing of it.
		return
	case m.pred != nil && m.pred.target == target && m.pred.conditional == conditional:
		// A periodic repeat of the same report: the interval to the
		// command counts from the first one, the window from the
		// latest.
		m.renewPrediction(serving)
		return
	}
	retarget := m.pred != nil
	m.expired = nil
	window := m.predictionWindow(serving.Band)
	if conditional {
		window = m.cfg.ConditionalHold
	}
	m.pred = &prediction{
		event:       ev,
		conditional: conditional,
		source:      serving,
		target:      target,
		at:          m.now,
		deadline:    m.now.Add(window),
	}
	m.cnt.predictionsMade++
	if m.state == Smoothing {
		// Applied when Smoothing ends.
		return
	}
	m.applyPreparationPolicy(target, m.pred.deadline)
	if m.logger.Enabled(context.Background(), slog.LevelDebug) {
		m.logger.Debug("handover predicted", "event", ev, "conditional", conditional, "serving", serving, "target", target, "retarget", retarget)
	}
	m.transition(Preparation, ReasonPredicted)
}

// renewPrediction holds the pending prediction, when the machine
// learns, for another prediction window from a report of its serving
// cell repeating it. A UE whose report configuration asks for more than
// one report repeats a triggered report every reportInterval for as
// long as the neighbour stays triggered (TS 36.331 and 38.331 5.5.4.1,
// reportAmount), and a network may act on any of them: on the shared
// LTE drive, series of A3 reports every 480 ms were answered 100 to
// 250 ms after their second to fifth report, and the prediction of the
// first had timed out before, a wrong prediction followed by another.
// The prediction stays the one made at the first report (its lead, and
// T2, count from there) and ends a window after the last repeat, when
// the neighbour is no longer reported. Algorithm 1 alone keeps the
// paper's window from the first report.
func (m *Machine) renewPrediction(serving diag.Cell) {
	p := m.pred
	if !m.cfg.Learning || p.conditional || p.source.Key() != serving.Key() {
		return
	}
	deadline := m.now.Add(m.predictionWindow(serving.Band))
	if !deadline.After(p.deadline) {
		return
	}
	p.deadline = deadline
	if m.state == Preparation {
		// In Smoothing, the prediction waits for Smoothing to end with
		// its new deadline.
		m.applyPreparationPolicy(p.target, p.deadline)
	}
}

// onA1 cancels a prediction made for the same serving cell: it is good
// again, so the network will not hand over (section 4.2). An A1 of
// another cell (the anchor while an SCG change is pending) says nothing
// about it. When either cell is unknown (a report without serving cell,
// or a prediction made before the serving cell was known) the A1 is taken
// as the predicting cell's: the prediction must stay cancellable.
func (m *Machine) onA1(serving diag.Cell) {
	if m.pred == nil || m.pred.conditional || (!serving.IsZero() && !m.pred.source.IsZero() && serving.Key() != m.pred.source.Key()) {
		return
	}
	m.pred = nil
	m.obs.Prediction(OutcomeCancelledA1, m.now)
	m.cnt.predictions[OutcomeCancelledA1]++
	if m.state == Preparation {
		m.enterStable(ReasonCancelledA1)
	}
}

func (m *Machine) onCommand(ev diag.Event) {
	// A handover command comes on a connection that is up again: the
	// re-establishment's completion was not logged.
	m.reestablishing = false
	m.reportsFollowed()
	reason := ReasonCommand
	standing := m.pred
	switch {
	case m.pred != nil:
		m.obs.Prediction(OutcomeConfirmed, m.now)
		m.cnt.predictions[OutcomeConfirmed]++
		if !m.pred.conditional {
			// T2 is the report's lead; a conditional handover's
			// configuration waits for the radio instead.
			m.learnT2(m.pred.source.Band, m.now.Sub(m.pred.at))
		}
	case m.cmd == nil:
		reason = ReasonUnpredictedCommand
		m.cnt.unpredictedCommands++
		if e := m.expired; e != nil && m.now.Sub(e.at) <= lateCommandT2Factor*m.t2For(e.source.Band) {
			m.learnT2(e.source.Band, m.now.Sub(e.at))
		}
	}
	m.pred, m.expired = nil, nil
	m.gauge.follow(m.now)
	m.est.HandoverUnderWay(m.now)
	// Back to back with Smoothing, the next handover matters more: its
	// Preparation policy replaces Smoothing's suppression.
	m.cmd = m.mergeCommand(ev)
	if standing != nil {
		m.cmd.standing = standing
	}
	m.applyPreparationPolicy(m.cmd.dataCell(), m.cmd.deadline)
	m.transition(Preparation, reason)
}

// mergeCommand folds a command into the pending set, or starts one.
func (m *Machine) mergeCommand(ev diag.Event) *command {
	c := m.cmd
	if c == nil {
		c = &command{pcell: m.pcell, scg: m.scg, at: m.now}
	}
	c.kind, c.source, c.target = ev.Kind, ev.Source.Normalized(), ev.Target.Normalized()
	c.deadline = m.now.Add(m.cfg.ExecutionTimeout)
	switch c.kind {
	case diag.HOSCGAdd, diag.HOSCGChange:
		if !c.target.IsZero() {
			c.scg = c.target
		}
		c.scgDecided, c.randomAccess = true, true
	case diag.HOSCGRelease:
		// Data moves to the anchor; a test bed that models the release
		// as a handover names the cell. When the same reconfiguration
		// also hands the anchor over, the handover's target wins: it is
		// what the network ordered for the primary cell, whereas an
		// emitter that only knows the anchor before the reconfiguration
		// names the old one as the release's target, and the UE is not
		// going back there.
		if !c.target.IsZero() && !c.pcellDecided {
			c.pcell = c.target
		}
		c.scg, c.scgDecided = diag.Cell{}, true
	default:
		if !c.target.IsZero() {
			c.pcell, c.pcellDecided = c.target, true
		}
		if !c.scgDecided {
			// An EN-DC handover of the anchor that says nothing of the
			// SCG releases it; the network adds one again afterwards.
			c.scg = diag.Cell{}
		}
		c.randomAccess = true
	}
	c.executeAt = time.Time{}
	if !c.randomAccess {
		c.executeAt = m.now.Add(reconfigurationSpread)
	}
	return c
}

func (m *Machine) onComplete(ev diag.Event) {
	if m.state == Smoothing {
		m.cnt.ignored["complete_in_smoothing"]++
		return
	}
	if m.cmd != nil {
		m.execute(m.cmd.pcell, m.cmd.scg)
		return
	}
	cell := ev.Cell.Normalized()
	switch {
	case !cell.IsZero() && (cell.Key() == m.pcell.Key() || cell.Key() == m.scg.Key()):
		// A late or repeated completion of a handover already applied.
		m.cnt.ignored["complete_on_serving_cell"]++
		return
	case cell.IsZero() && m.pred == nil:
		// Nothing says a handover is under way, or where it went.
		m.cnt.ignored["complete_unexplained"]++
		return
	}
	if m.pred != nil {
		// The command was not logged, but the predicted handover
		// happened.
		m.obs.Prediction(OutcomeConfirmed, m.now)
		m.cnt.predictions[OutcomeConfirmed]++
		if cell.IsZero() {
			cell = m.pred.target
		}
	} else {
		m.cnt.unannouncedCompletions++
	}
	m.execute(m.unannouncedCells(cell))
}

// unannouncedCells are the serving cells after a completion no command
// announced, on cell: an NR cell beside an LTE anchor is the new SCG,
// anything else the new primary cell.
func (m *Machine) unannouncedCells(cell diag.Cell) (pcell, scg diag.Cell) {
	switch {
	case cell.RAT == "" && cell.Band == "":
		// Neither the log nor a prediction says where the UE went.
		return m.pcell, m.scg
	case cell.RAT == "":
		// Only the band is known: a prediction without a neighbour (an
		// A2 of a standalone mmWave cell) is confirmed by a completion
		// that names no cell. The UE has left its cells, so keeping them
		// would keep it under a mmWave cell's hold and file the new
		// cell's bursts under the old one. It is on an unknown cell of
		// that band (the estimator files no burst under it) until a
		// report or an rb_alloc names it.
		return cell, diag.Cell{}
	case cell.RAT == diag.RATNR && m.pcell.RAT == diag.RATLTE:
		return m.pcell, cell
	default:
		return cell, diag.Cell{}
	}
}

// execute applies an executed handover: the new serving cells, its kind,
// the bandwidth hold, and Smoothing (or Stable when there is nothing to
// smooth).
func (m *Machine) execute(pcell, scg diag.Cell) {
	from := m.dataCell()
	// What the source cell carried, read before the estimator restarts
	// on the new cell.
	kept, keptKnown := m.est.Carried(m.now)
	// The clamp of the handover, which held the senders up to now, and
	// whether it had a round trip to do so.
	held := m.pol.clampBytes
	clampLate := m.state == Preparation && m.prepClamped && keptKnown && m.now.Sub(m.prepClampedAt) < kept.SRTT
	m.gauge.executed(m.now)
	m.executedAt = m.now
	m.setCells(pcell, scg)
	var standing *prediction
	if m.cmd != nil && !m.cmd.pcellDecided {
		standing = m.cmd.standing
	}
	m.cmd, m.pred = nil, nil
	to := m.dataCell()
	kind := diag.HandoverClass(from.Band, to.Band)
	m.cnt.handovers[kind]++
	m.obs.Handover(kind, m.now)
	m.bandwidthHold = m.bandwidthHoldOn()
	if m.logger.Enabled(context.Background(), slog.LevelDebug) {
		m.logger.Debug("handover executed", "kind", kind, "from", from, "to", to)
	}
	m.warmup, m.failureHold, m.ramp = warmupClamp{}, warmupClamp{}, nil
	switch {
	case m.cfg.Policy != PolicyM2HO:
	case m.cfg.Ramp:
		m.ramp = m.newRamp(from, to, kept, keptKnown, held, clampLate)
	case m.bandwidthHold && bandKey(to.Band) == diag.BandSub6 && m.pol.clampBytes > 0:
		m.warmup = warmupClamp{bytes: m.pol.clampBytes, source: m.pol.clampSource, until: m.now.Add(bandwidthWarmup)}
	}
	m.rearm(standing)
	// A connection re-established after a failure lost what the failed
	// cell held (no command prepared the target, no data is forwarded):
	// a duplicate ACK then asks for a segment that will not come, a loss
	// the sender must hear of at once. In the testbed 5 of the 7 loss
	// episodes m2ho suppressed in an evaluation followed radio link
	// failures.
	reestablished := m.reestablishing
	m.reestablishing = false
	if m.cfg.Policy == PolicyFreeze || !m.cfg.Suppression || reestablished {
		m.enterStable(ReasonExecuted)
		if m.pred != nil {
			m.applyPreparationPolicy(m.pred.target, m.pred.deadline)
			m.transition(Preparation, ReasonPredicted)
		}
		return
	}
	m.flowsPending, m.drain = false, estimator.SlotBursts{}
	end := m.now.Add(m.cfg.SmoothingMax)
	// The clamp stays through Smoothing (the target cell's buffer is
	// still filling with forwarded data): the ramp's start, or without
	// a ramp the handover's clamp, no longer than Smoothing.
	switch {
	case m.ramp != nil:
		m.holdClamp(m.ramp.bytes, m.ramp.source, time.Time{})
	case m.pol.clampBytes > 0:
		m.holdClamp(m.pol.clampBytes, m.pol.clampSource, end)
	}
	m.startSuppression(end)
	m.transition(Smoothing, ReasonExecuted)
}

// rearm predicts again from the report of a prediction that an executed
// command set of secondary cell group procedures alone confirmed without
// reaching its target, while the report's serving cell is still the
// primary cell: an EN-DC network that releases
// or changes the secondary cell group on an LTE neighbour's report, then
// hands the anchor over to that neighbour in a second reconfiguration
// once the first completed. The report still stands: without a handover
// the UE keeps its measurement configuration and does not report the
// same neighbour again (TS 36.331 5.5.4.1, the cells already triggered),
// and the network sends one reconfiguration at a time. The new prediction
// counts from the execution, with a window of its own. A set with a
// primary cell handover (an intra-cell one included) ends it: the
// network decided on the primary cell otherwise.
func (m *Machine) rearm(p *prediction) {
	if p == nil || p.conditional || !m.cfg.Prediction || p.target.RAT == "" || p.source.IsZero() {
		return
	}
	if p.source.Key() != m.pcell.Key() || p.target.Key() == m.pcell.Key() || p.target.Key() == m.scg.Key() {
		return
	}
	m.pred = &prediction{event: p.event, source: p.source, target: p.target, at: m.now,
		deadline: m.now.Add(m.predictionWindow(p.source.Band))}
	m.cnt.predictionsMade++
}

// onFailure releases every policy: after a radio link failure or
// re-establishment no buffer or flow state of the old cells holds. The
// clamp in force is the exception: it holds the senders' windows, not
// the cells' state, and a window kept from a mmWave cell is still there
// when the connection comes back. Released at the failure, nothing held
// the senders once the new cell's first ACKs left, and the whole window
// reached it at once: in the full run on 44bda4b two re-establishments
// with kept windows of 521 and 1,162 segments lost 381 and 779 packets
// in the new cell after it (plain CUBIC: none), and the windows fell to
// 31 and 120. So a clamp stays until the re-establishment executes, for
// at most failureHoldMax, and the new cell's ramp starts from it
// (newRamp) as after any handover whose clamp held the senders back. It
// is the clamp in force, at most the smallest sub-6 buffer estimate: the
// connection comes back on a cell no report named, whose first ACKs may
// leave before the machine learns of it, and a mmWave cell's hold would
// overflow a sub-6 one.
func (m *Machine) onFailure(cause diag.FailureCause) {
	m.logger.Info("connection failure, releasing every policy but the clamp", "cause", cause)
	m.cnt.failures++
	var hold warmupClamp
	if held := m.pol.clampBytes; held > 0 && m.cfg.Policy == PolicyM2HO && m.cfg.Ramp && !m.est.LossPersists(m.now) {
		buffer, _ := m.est.TargetBuffer(diag.Cell{})
		hold = warmupClamp{bytes: min(held, windowBytes(buffer)), source: ClampSourceReestablishment, until: m.now.Add(failureHoldMax)}
	}
	m.endConnection(ReasonFailure, hold)
	m.reestablishing = true
}

// endConnection drops the prediction and command under way and releases
// every policy but hold (a failure's, see onFailure), on the connection's
// failure or release: both drop the secondary cell group
// (re-establishment, TS 36.331 5.3.7.2, as leaving RRC_CONNECTED does),
// and neither leaves buffer or flow state of the old cells to protect.
func (m *Machine) endConnection(reason string, hold warmupClamp) {
	m.pred, m.cmd = nil, nil
	m.bandwidthHold, m.warmup, m.failureHold, m.ramp = false, warmupClamp{}, hold, nil
	m.reestablishing = false
	m.gauge = interruptionGauge{}
	m.setCells(m.pcell, diag.Cell{})
	m.stopSuppression()
	m.transition(Stable, reason)
	// The failure's hold, or no clamp at all.
	m.applyStablePolicy()
}

// endSmoothing stops suppression and moves on: to Preparation when a
// prediction came in meanwhile, else to Stable.
func (m *Machine) endSmoothing(reason string) {
	m.stopSuppression()
	if m.pred != nil && !m.now.Before(m.pred.deadline) {
		m.expirePrediction()
	}
	if m.pred != nil {
		m.applyPreparationPolicy(m.pred.target, m.pred.deadline)
		m.transition(Preparation, reason)
		return
	}
	m.enterStable(reason)
}

// enterStable releases the handover policies and installs the Stable one.
// Leaving Preparation without a handover, a clamp that held the senders
// back reopens through a ramp (newReopening).
func (m *Machine) enterStable(reason string) {
	if m.state == Preparation && reason != ReasonExecuted && m.prepClamped {
		m.ramp = m.newReopening()
	}
	m.stopSuppression()
	m.transition(Stable, reason)
	m.applyStablePolicy()
}

// applyStablePolicy holds the post-handover ramp while it lasts, then the
// bandwidth hold (bandwidthHoldOn, holdWindow), and clears the clamp
// otherwise. Neither holds senders whose loss persists
// (Estimator.LossPersists): the clamps keep a window that loss would
// cut, which such senders never cut.
//
// The ramp replaces the release of the handover's clamp at the end of
// Smoothing. Released there, the window the clamp kept through the
// handover reached the target cell at once and overflowed its buffer:
// drops in the 2 s after completion were the first cause of lossy
// handovers with m2ho (docs/results.md). See stepRamp.
//
// The estimator restarts its bandwidth estimate with each new cell, and
// the first one takes a round trip or more after the handover. Until then
// the clamp of the handover (the target's buffer estimate) stays, for at
// most bandwidthWarmup: releasing it would let the sender's mmWave-sized
// window into the sub-6 cell at once, the very overflow Eq. 2 is there to
// prevent. Without a fresh estimate after that the clamp is released
// rather than guessed.
func (m *Machine) applyStablePolicy() {
	if h := m.failureHold; h.bytes > 0 {
		if m.now.Before(h.until) {
			m.holdClamp(h.bytes, h.source, h.until)
			return
		}
		m.failureHold = warmupClamp{}
	}
	if m.ramp != nil && m.stepRamp() {
		return
	}
	if m.bandwidthHold && !m.est.LossPersists(m.now) {
		if bytes, ok := m.holdWindow(); ok {
			m.holdClamp(windowBytes(bytes), ClampSourceBandwidth, time.Time{})
			return
		}
		if w := m.warmup; w.bytes > 0 && m.now.Before(w.until) {
			m.holdClamp(w.bytes, w.source, w.until)
			return
		}
	}
	m.releaseClamp()
}

// newRamp returns the ramp of a handover from one data cell to another,
// given what the source cell carried and the clamp in force when the
// handover executed (held, 0 when none), or nil when no ramp is needed.
//
// A clamp that held the senders back is never lifted at once. Their
// windows stayed as they were while the clamp shrank their flight, so
// lifting it lets the difference out in one burst at the server's line
// rate, on top of the data the source cell forwards: in the testbed such
// bursts overflowed the target in sub-6 handovers that plain CUBIC went
// through without a loss, and cost a window cut CUBIC never took. The
// receiver cannot see a sender's window, only its flight, and a sender
// the clamp limits carries the clamp, however large its window: a clamp
// held the senders back when they carried more than it lets through, or
// filled it (fillsClamp, the test a ramp's rounds pass). Under the
// bandwidth hold a window kept from a mmWave cell is several times the
// flight, and a flight measured just below the clamp took such a sender
// for one the clamp did not hold. In an evaluation (7fa648a, driving seed
// 3, handover 4) a sub-6 to sub-6 handover 1.5 s after mmWave to sub-6
// found the sender at a clamp of 196 kB with a window of 600 segments;
// the clamp was gone within 100 ms of the execution, the whole window
// left in one burst, the target dropped 428 packets and the window fell
// to 152, losing what the hold had kept for the next mmWave cell. The
// ramp starts at that clamp (never below the target's buffer estimate,
// never above what the target is expected to carry, see below) and at
// most doubles per round (stepRamp), the ACK-clocked growth of slow
// start, which a cell absorbs.
//
// A clamp set less than a smoothed RTT before the execution (clampLate)
// did not hold the senders back yet: what they sent before it reached
// them is still on its way, about the flight the source carried, and the
// handover piles it up in the target whatever the clamp. Clamped below
// that flight, a sender may send nothing new behind it, so when the
// target's overflow takes the tail of the flight no duplicate ACK tells
// it: it waits for its retransmission timer, at least 200 ms beyond the
// smoothed RTT, and restarts from one segment. In the testbed a mmWave to
// sub-6 handover whose clamp came 180 ms before it, at a 350 ms RTT, lost
// the 123 segments in flight and stalled for 600 ms where plain CUBIC
// repaired the same overflow by fast retransmit. Such a ramp starts at
// the source's flight, which keeps the ACK clock running, up to what the
// target is expected to carry: above that the flight the ACK clock keeps
// overflows the target for as long as the first round on it lasts (a
// mmWave flight of 1 MB into a sub-6 cell lost 1,118 packets). From
// mmWave down to sub-6, where the target is expected to carry its buffer
// only, the late clamp therefore stays, and so does the risk of a stall.
//
// Otherwise, the senders' window needs no ramp when it fits in what the
// target is expected to carry: its buffer estimate, or, unless the
// handover goes from mmWave down to sub-6, the source's bandwidth-delay
// product (a cell of the same band or a faster one carries at least that
// much in flight) plus the queue the bandwidth hold leaves a cell
// (estimator.HoldQueue), whichever is larger. Released, such a window
// fills the target without overflowing it, and a clamp would only slow
// it. A window beyond that starts at the target's expected carriage.
// When nothing is known of the source (no traffic, no RTT sample), the
// ramp starts at the buffer estimate.
//
// The product plus the whole buffer is no carriage to aim at: the data
// the source forwarded waits in the target's queue when the senders'
// first round reaches it. In the full run on 44bda4b, where the ramp
// doubled up to that, 23 of 69 sub-6 to sub-6 handovers lost 2 to 146
// packets in the target after the completion (8 of them handovers plain
// CUBIC went through without a loss): the ramp's flight of 180 to 237
// segments plus up to 50 forwarded filled targets that held 175 to 215.
//
// A mmWave target gets no ramp. The paper saw no overflow in handovers
// to mmWave cells (section 4.3), whose buffers and rates dwarf a window
// grown on sub-6; and a clamp there held CUBIC below the cell's
// bandwidth-delay product, where a sender limited by the advertised
// window does not grow its own: in the testbed, mmWave to mmWave
// handovers lost 2.6 to 4.8 Mbit/s (of 22 to 41) to the ramp.
//
// Senders whose loss persists (Estimator.LossPersists) get no ramp: they
// do not shrink on loss, so the window they keep through a handover is no
// gain a clamp protects, and a clamp below their operating point only
// slows them.
func (m *Machine) newRamp(from, to diag.Cell, kept estimator.Carried, keptKnown bool, held uint32, clampLate bool) *postHandoverRamp {
	if bandKey(to.Band) == diag.BandMmWave || m.est.LossPersists(m.now) {
		return nil
	}
	buffer, source := m.est.TargetBuffer(to)
	expected := buffer
	if keptKnown && !(bandKey(from.Band) == diag.BandMmWave && bandKey(to.Band) == diag.BandSub6) {
		expected = max(buffer, kept.BDP+estimator.HoldQueue(buffer))
	}
	heldBack := held > 0 && keptKnown && fillsClamp(kept.Flight, held)
	if !heldBack && keptKnown && kept.Flight <= expected {
		return nil
	}
	start := expected
	switch {
	case heldBack && clampLate:
		start = max(min(kept.Flight, expected), buffer)
	case heldBack:
		start = max(min(uint64(held), expected), buffer)
	}
	if start > buffer {
		source = ClampSourceRamp
	}
	return &postHandoverRamp{start: windowBytes(buffer), expected: windowBytes(expected), bytes: windowBytes(start), source: source, executedAt: m.now}
}

// newReopening returns the ramp that lifts a Preparation clamp which no
// handover followed (a prediction that timed out or was cancelled, a
// command that never executed), or nil when the clamp did not hold the
// senders back. Lifted at once, the windows the clamp held back would
// leave in one burst into the serving cell, whose queue drained while
// they waited (see newRamp); the ramp reopens from the clamp instead.
func (m *Machine) newReopening() *postHandoverRamp {
	held := m.pol.clampBytes
	if m.cfg.Policy != PolicyM2HO || !m.cfg.Ramp || held == 0 || m.est.LossPersists(m.now) {
		return nil
	}
	kept, ok := m.est.Carried(m.now)
	if !ok || kept.Flight <= uint64(held) {
		return nil
	}
	return &postHandoverRamp{start: held, expected: windowBytes(kept.Flight), bytes: held, source: ClampSourceRamp, executedAt: m.now, reopening: true}
}

// stepRamp holds the ramp and reports whether it still does. At each
// round of the new cell the estimator completes, the ramp becomes the
// Eq. 2 window (what the cell delivered in the peak round of the last
// second, times lambda, capped at its bandwidth-delay product plus its
// buffer), at most rampGrowth times the ramp and never below its start
// (a window of one buffer cannot overflow the buffer). A round that
// delivered the clamp (at least rampSlackPercent of it) and queued
// little in the cell (not Round.CellBound) doubles the ramp up to what
// the cell is expected to carry, whatever Eq. 2 says: the clamp set that
// round's rate, and the cap on it grows the ramp by one buffer estimate
// a round, in the testbed from 46 to 158 segments over 500 ms after
// sub-6 to sub-6 handovers that plain CUBIC went through at 168 without
// a loss. A cell-bound round ran at the cell's rate, whatever the clamp,
// and Eq. 2 rules it: doubled anyway, the ramp alternated round by round
// under a queued cell between Eq. 2 and twice it (185 and 252 kB every
// 100 ms in a testbed run), each doubled round overfilling the cell.
// Beyond what the cell is expected to carry Eq. 2 rules as well. A
// reopening (newReopening) doubles whether its rounds queued or not, and
// ends once it reached the flight the Preparation clamp held back: the
// cell carried that flight just before, and a clamp the senders always
// fill never leaves them slack. On a mmWave cell, whose queue is taken
// against the smallest sub-6 buffer (Estimator.LastRound), a reopening
// held to Eq. 2 stayed in force until the next handover, 25 s in a
// testbed run, where the senders' windows, limited by the clamp, could
// not grow with the cell. Any ramp ends when rampSlackRounds rounds in a
// row carried less than rampSlackPercent of it, which says the senders' windows no longer exceed what the clamp,
// and so the cell, carries; or, without any round on the new cell (no
// RTT sample, no traffic), after bandwidthWarmup.
func (m *Machine) stepRamp() bool {
	r := m.ramp
	m.est.HandoverUnderWay(m.now)
	if m.est.LossPersists(m.now) {
		m.ramp = nil
		return false
	}
	round, ok := m.est.LastRound(m.now)
	if !ok || !round.End.After(r.executedAt) {
		if m.now.Sub(r.executedAt) >= bandwidthWarmup {
			m.ramp = nil
			return false
		}
		m.holdClamp(r.bytes, r.source, time.Time{})
		return true
	}
	if round.End.After(r.lastRound) {
		r.lastRound = round.End
		held := fillsClamp(round.Flight, r.bytes)
		if held {
			r.slackRounds = 0
		} else {
			r.slackRounds++
		}
		if bw, ok := m.est.BandwidthClamp(m.now); ok {
			next := min(uint64(windowBytes(bw)), rampGrowth*uint64(r.bytes))
			if held && (r.reopening || !round.CellBound) {
				// The round delivered what the clamp let through, so its
				// rate is the clamp's, not the cell's, and Eq. 2's cap on
				// it (that rate's product plus the buffer) would add one
				// buffer per round: the ramp doubles up to what the cell
				// is expected to carry instead.
				next = max(next, min(rampGrowth*uint64(r.bytes), uint64(r.expected)))
			}
			r.bytes, r.source = max(windowBytes(next), r.start), ClampSourceRamp
		}
	}
	if r.slackRounds >= rampSlackRounds || (r.reopening && r.bytes >= r.expected) {
		m.ramp = nil
		return false
	}
	m.holdClamp(r.bytes, r.source, time.Time{})
	return true
}

// applyPreparationPolicy clamps the window for a handover to target until
// limit: to the target's buffer estimate plus what the interruption does
// not pile up in it (interruptionHeadroom), or the bandwidth estimate when
// a bandwidth hold is on and it is smaller; a zero window under
// PolicyFreeze. Under PolicyM2HO it also suppresses the duplicate ACKs
// of holes (prepareSuppression).
//
// A mmWave target gets no clamp of its own: the Stable policy (a ramp, the
// bandwidth hold) stays as it is until the handover executes. The clamp
// is there to keep the flight within the target's buffer, and the paper
// saw no overflow in handovers to mmWave cells (section 4.3), whose
// buffers dwarf a sub-6 one; its conservative estimate for them, the
// smallest sub-6 buffer, only cost. In the testbed it cut the throughput
// of the Preparation before mmWave to mmWave handovers by a third to
// nine tenths against plain CUBIC, and its release let the window it held
// back into the target as one burst, which overflowed it where plain
// CUBIC lost nothing.
func (m *Machine) applyPreparationPolicy(target diag.Cell, limit time.Time) {
	if m.cfg.Policy == PolicyFreeze {
		m.holdFreeze(limit)
		return
	}
	if m.cfg.Policy == PolicyM2HO && m.cfg.Suppression {
		// With the prediction; from the first command on, no longer than
		// Config.SmoothingMax after it: the execution follows within tens
		// of milliseconds.
		until := limit
		if m.cmd != nil {
			until = m.cmd.at.Add(m.cfg.SmoothingMax)
		}
		m.prepareSuppression(until)
	}
	if bandKey(target.Band) == diag.BandMmWave {
		m.prepClamped = false
		m.applyStablePolicy()
		return
	}
	if m.state != Preparation || !m.prepClamped {
		m.prepClampedAt = m.now
	}
	m.prepClamped = true
	bytes, source := m.est.TargetBuffer(target)
	headroom := m.interruptionHeadroom(target)
	bytes += headroom
	if m.bandwidthHold {
		if bw, ok := m.holdWindow(); ok && bw < bytes {
			bytes, source = bw, ClampSourceBandwidth
		}
	}
	before := m.pol
	m.holdClamp(windowBytes(bytes), source, clampGrace(limit, m.cfg.PolicyLease))
	// One line per clamp a Preparation sets, not per renewal: where each
	// target's clamp came from (measured here, the fleet, the band's
	// minimum) is what an operator checks a fleet store by.
	if before.clampBytes != m.pol.clampBytes || before.clampSource != m.pol.clampSource {
		m.logger.Info("preparation clamp", "target", target, "bytes", m.pol.clampBytes, "source", source,
			"headroom", headroom, "interruption", m.interruption())
	}
}

// clampGrace is the limit to write with a Preparation clamp that must end
// at limit: a lease beyond it. The machine itself ends the clamp at limit,
// at its first tick after it, with the policy that follows (a reopening
// ramp, a release); a datapath deadline at limit itself would release the
// clamp for the moments until that tick, and one ACK with the real window
// in that gap lets a sender's whole window out at once. In the testbed a
// prediction that timed out released 103 segments in one burst that way
// and overflowed the cell. A zero limit stays zero.
func clampGrace(limit time.Time, lease time.Duration) time.Time {
	if limit.IsZero() {
		return limit
	}
	return limit.Add(lease)
}

// windowBytes fits an estimate into a window; the estimator never returns
// 0 or more than estimator.MaxWindowBytes.
func windowBytes(b uint64) uint32 {
	return uint32(min(max(b, 1), estimator.MaxWindowBytes))
}

// bandwidthHoldOn says whether the bandwidth hold applies once a report or
// a handover named the cell that carries the data: on every cell, under
// PolicyM2HO with the bandwidth clamp.
//
// The paper holds Eq. 2 on sub-6 cells after a handover from mmWave
// (section 4.5), so that the window the mmWave cell let the senders grow
// survives until the next mmWave cell. Held on every sub-6 cell it does
// two more things. A loss-based sender fills a sub-6 cell's buffer before
// every loss; the hold keeps the queue to half the buffer estimate
// (Estimator.BandwidthClamp), so the window is not cut between
// handovers: in the held-out evaluation of 9179fbe, plain scaled CUBIC's
// window was cut 46 times on sub-6 cells between handovers, in 7
// scenarios of 2 minutes. And a sender the advertised window holds does
// not grow its window, but CUBIC's clock runs on: its window is a
// function of the time since its last loss (RFC 9438 section 4.2), and
// Linux grows it only while it limits the sender (tcp_is_cwnd_limited).
// On the next mmWave cell, whose hold lies far above a sub-6 one, such a
// sender finds its target far above its window and grows by half a
// window per round, the most Linux lets CUBIC add, where an unheld one
// creeps along its plateau near the window of its last loss. In that evaluation a sender held for 8 s, 26 s
// after its last loss, went from 193 to 1,015 segments within 1.5 s
// of a sub-6 to mmWave handover, while plain CUBIC, on the same
// scenario, stayed at 156 to 164 (driving seed 102, handover 7).
//
// On a mmWave cell the hold is the window a handover to sub-6 can drain
// (Estimator.DrainableWindow) over the lead a prediction leaves, the
// learnt T2 of the cell's band: the source must not hold more than the
// target's buffer takes when the handover executes.
func (m *Machine) bandwidthHoldOn() bool {
	return m.cfg.Policy == PolicyM2HO && m.cfg.BandwidthClamp
}

// holdWindow is the bandwidth hold's window on the cell that carries the
// data (see bandwidthHoldOn).
func (m *Machine) holdWindow() (uint64, bool) {
	if band := bandKey(m.dataCell().Band); band == diag.BandMmWave {
		return m.est.DrainableWindow(m.now, m.t2For(band))
	}
	return m.est.BandwidthClamp(m.now)
}

// bandKey files a cell of unknown band (LTE without band, a cell no log
// described) with sub-6, as the estimator does.
func bandKey(b diag.Band) diag.Band {
	if b == diag.BandMmWave {
		return b
	}
	return diag.BandSub6
}
