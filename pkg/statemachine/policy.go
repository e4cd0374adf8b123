package statemachine

import (
	"context"
	"log/slog"
	"time"
)

// Clamp sources beside the estimator's buffer lookup rules.
const (
	ClampSourceBandwidth = "bandwidth"
	ClampSourceFreeze    = "freeze"
	// ClampSourceRamp: the post-handover ramp, raised from the target's
	// buffer estimate by what the new cell delivered.
	ClampSourceRamp = "ramp"
	// ClampSourceReestablishment: the clamp in force when the connection
	// failed, held until it is re-established (Machine.onFailure).
	ClampSourceReestablishment = "reestablishment"
)

// Actuator operation names, as counted in Counters.ActuatorErrors and in
// the daemon's actuation error metric.
const (
	OpSetClamp           = "set_clamp"
	OpSetFreeze          = "set_freeze"
	OpClearClamp         = "clear_clamp"
	OpPrepareSuppression = "prepare_suppression"
	OpStartSuppression   = "start_suppression"
	OpStopSuppression    = "stop_suppression"
)

// Ops returns every actuator operation name.
func Ops() []string {
	return []string{OpSetClamp, OpSetFreeze, OpClearClamp, OpPrepareSuppression, OpStartSuppression, OpStopSuppression}
}

// datapathPolicy is the policy the machine wants in force and what it
// managed to write. A failed write is retried by Tick; meanwhile the
// deadline of the last successful write bounds what the datapath holds.
type datapathPolicy struct {
	// clampBytes is the window clamp; 0 with freeze false: none.
	clampBytes  uint32
	freeze      bool
	clampSource string
	// clampLimit is the latest deadline the clamp may carry; zero: only
	// the lease bounds it.
	clampLimit time.Time
	// clampWritten is the deadline of the last successful write; zero
	// when the clamp still has to be written.
	clampWritten time.Time
	// clearPending: a ClearClamp failed and must be retried.
	clearPending bool

	suppressing bool
	// preparing: the suppression of a Preparation, of holes with no
	// epoch (Actuator.PrepareSuppression), renewed while it lasts; else
	// a handover's, written once.
	preparing     bool
	suppressUntil time.Time
	// suppressWritten is the deadline of the last successful write; zero
	// when the suppression still has to be written.
	suppressWritten  time.Time
	stopPending      bool
	failingOperation map[string]bool
}

func (p *datapathPolicy) clampActive() bool { return p.clampBytes > 0 || p.freeze }

// holdClamp keeps a clamp of bytes in force until limit (zero: for as
// long as it is renewed).
func (m *Machine) holdClamp(bytes uint32, source string, limit time.Time) {
	p := &m.pol
	changed := p.freeze || p.clampBytes != bytes || !p.clampLimit.Equal(limit)
	p.clampBytes, p.freeze, p.clampSource, p.clampLimit = bytes, false, source, limit
	if changed {
		m.logClamp()
	}
	if changed || m.clampWriteDue() {
		m.writeClamp()
	}
}

// logClamp logs, at debug level, a clamp that changed with what the
// estimator saw of the serving cell when it did: the holds and ramps are
// made of those figures, several times a second, and nothing else tells
// afterwards why a window was what it was.
func (m *Machine) logClamp() {
	if !m.logger.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	p := &m.pol
	c, fresh := m.est.Carried(m.now)
	m.logger.Debug("clamp", "bytes", p.clampBytes, "source", p.clampSource,
		"serving_fresh", fresh, "peak_bdp", c.BDP, "min_rtt", c.MinRTT, "srtt", c.SRTT)
}

// holdFreeze keeps a zero window in force until limit.
func (m *Machine) holdFreeze(limit time.Time) {
	p := &m.pol
	changed := !p.freeze || !p.clampLimit.Equal(limit)
	p.clampBytes, p.freeze, p.clampSource, p.clampLimit = 0, true, ClampSourceFreeze, limit
	if changed || m.clampWriteDue() {
		m.writeClamp()
	}
}

// clampWriteDue reports whether the written deadline needs renewing: it
// was never written, or less than half a lease is left and the limit
// allows a later one.
func (m *Machine) clampWriteDue() bool {
	p := &m.pol
	if p.clampWritten.IsZero() {
		return true
	}
	if !p.clampLimit.IsZero() && !p.clampWritten.Before(p.clampLimit) {
		return false
	}
	return p.clampWritten.Sub(m.now) < m.cfg.PolicyLease/2
}

// policyDeadline is the deadline to write now for a policy bounded by
// limit (zero: unbounded), and false when limit has already passed.
func (m *Machine) policyDeadline(limit time.Time) (time.Time, bool) {
	deadline := m.now.Add(m.cfg.PolicyLease)
	if !limit.IsZero() && limit.Before(deadline) {
		deadline = limit
	}
	return deadline, deadline.After(m.now)
}

func (m *Machine) writeClamp() {
	p := &m.pol
	deadline, ok := m.policyDeadline(p.clampLimit)
	if !ok {
		return
	}
	var err error
	op := OpSetClamp
	if p.freeze {
		op = OpSetFreeze
		err = m.act.SetFreeze(deadline)
	} else {
		err = m.act.SetClamp(p.clampBytes, deadline)
	}
	if m.actuated(op, err) {
		p.clampWritten, p.clearPending = deadline, false
	} else {
		p.clampWritten = time.Time{}
	}
}

// releaseClamp removes any clamp or freeze.
func (m *Machine) releaseClamp() {
	p := &m.pol
	if !p.clampActive() && !p.clearPending {
		return
	}
	p.clampBytes, p.freeze, p.clampSource = 0, false, ""
	p.clampLimit, p.clampWritten = time.Time{}, time.Time{}
	p.clearPending = !m.actuated(OpClearClamp, m.act.ClearClamp())
}

// startSuppression opens a handover's epoch of duplicate-ACK suppression
// until until, written once: each write opens another epoch, and Config
// validation keeps SmoothingMax within one lease.
func (m *Machine) startSuppression(until time.Time) {
	p := &m.pol
	p.suppressing, p.preparing, p.suppressUntil, p.stopPending = true, false, until, false
	p.suppressWritten = time.Time{}
	m.writeSuppression()
}

// prepareSuppression suppresses the duplicate ACKs of holes until until,
// from a prediction or a command to the execution, whose startSuppression
// takes over. The source cell's context release delivers data out of order
// as the UE applies the command (paper section 3.3); the modem reports the
// command a moment later, and in the testbed, where it reports at once,
// the first 3 to 10 duplicates of that reordering had left before a
// suppression started at the command. Holding only holes, it keeps window
// updates; DUPACK_HOLD_MS and the sender's RTT bound each hole's hold
// below the sender's minimum RTO, whether reordering or loss made it.
func (m *Machine) prepareSuppression(until time.Time) {
	p := &m.pol
	if p.suppressing && p.preparing && p.suppressUntil.Equal(until) {
		return
	}
	p.suppressing, p.preparing, p.suppressUntil, p.stopPending = true, true, until, false
	p.suppressWritten = time.Time{}
	m.writeSuppression()
}

func (m *Machine) writeSuppression() {
	p := &m.pol
	deadline, ok := m.policyDeadline(p.suppressUntil)
	if !ok {
		return
	}
	var written bool
	if p.preparing {
		written = m.actuated(OpPrepareSuppression, m.act.PrepareSuppression(deadline))
	} else {
		written = m.actuated(OpStartSuppression, m.act.StartSuppression(deadline))
	}
	if written {
		p.suppressWritten = deadline
	}
}

// suppressWriteDue reports whether suppression needs writing: it never
// was, or it is a Preparation's whose written deadline has less than half
// a lease left before its own end.
func (m *Machine) suppressWriteDue() bool {
	p := &m.pol
	switch {
	case p.suppressWritten.IsZero():
		return true
	case !p.preparing || !p.suppressWritten.Before(p.suppressUntil):
		return false
	}
	return p.suppressWritten.Sub(m.now) < m.cfg.PolicyLease/2
}

func (m *Machine) stopSuppression() {
	p := &m.pol
	if !p.suppressing && !p.stopPending {
		return
	}
	p.suppressing, p.preparing, p.suppressWritten, p.suppressUntil = false, false, time.Time{}, time.Time{}
	p.stopPending = !m.actuated(OpStopSuppression, m.act.StopSuppression())
}

// refreshPolicy renews deadlines and retries failed writes.
func (m *Machine) refreshPolicy() {
	p := &m.pol
	switch {
	case p.clampActive() && m.clampWriteDue():
		m.writeClamp()
	case !p.clampActive() && p.clearPending:
		p.clearPending = !m.actuated(OpClearClamp, m.act.ClearClamp())
	}
	switch {
	case p.suppressing && m.suppressWriteDue():
		m.writeSuppression()
	case !p.suppressing && p.stopPending:
		p.stopPending = !m.actuated(OpStopSuppression, m.act.StopSuppression())
	}
}

// actuated counts and logs an actuator error, once per run of failures of
// the same operation, and reports whether the call succeeded.
func (m *Machine) actuated(op string, err error) bool {
	p := &m.pol
	if p.failingOperation == nil {
		p.failingOperation = make(map[string]bool)
	}
	if err == nil {
		if p.failingOperation[op] {
			m.logger.Info("datapath write recovered", "op", op)
			p.failingOperation[op] = false
		}
		return true
	}
	m.cnt.actuatorErrors[op]++
	if !p.failingOperation[op] {
		m.logger.Warn("datapath write failed, retrying on tick", "op", op, "err", err)
		p.failingOperation[op] = true
	}
	return false
}
