package statemachine

import "time"

// Clamp sources beside the estimator's buffer lookup rules.
const (
	ClampSourceBandwidth = "bandwidth"
	ClampSourceFreeze    = "freeze"
	// ClampSourceRamp: the post-handover ramp, raised from the target's
	// buffer estimate by what the new cell delivered.
	ClampSourceRamp = "ramp"
)

// Actuator operation names, as counted in Counters.ActuatorErrors and in
// the daemon's actuation error metric.
const (
	OpSetClamp         = "set_clamp"
	OpSetFreeze        = "set_freeze"
	OpClearClamp       = "clear_clamp"
	OpStartSuppression = "start_suppression"
	OpStopSuppression  = "stop_suppression"
)

// Ops returns every actuator operation name.
func Ops() []string {
	return []string{OpSetClamp, OpSetFreeze, OpClearClamp, OpStartSuppression, OpStopSuppression}
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

	suppressing      bool
	suppressUntil    time.Time
	suppressWritten  bool
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
	if changed || m.clampWriteDue() {
		m.writeClamp()
	}
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

// startSuppression starts duplicate-ACK suppression until until, written
// once: Config validation keeps SmoothingMax within one lease.
func (m *Machine) startSuppression(until time.Time) {
	p := &m.pol
	p.suppressing, p.suppressUntil, p.stopPending = true, until, false
	m.writeSuppression()
}

func (m *Machine) writeSuppression() {
	p := &m.pol
	deadline, ok := m.policyDeadline(p.suppressUntil)
	if !ok {
		return
	}
	p.suppressWritten = m.actuated(OpStartSuppression, m.act.StartSuppression(deadline))
}

func (m *Machine) stopSuppression() {
	p := &m.pol
	if !p.suppressing && !p.stopPending {
		return
	}
	p.suppressing, p.suppressWritten, p.suppressUntil = false, false, time.Time{}
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
	case p.suppressing && !p.suppressWritten:
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
