package daemon

import (
	"sync"
	"time"

	"github.com/m2ho/m2ho/pkg/metrics"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// policyWriter is the part of the datapath that installs policies.
type policyWriter interface {
	SetClamp(bytes uint32, deadline time.Time) error
	SetFreeze(deadline time.Time) error
	ClearClamp() error
	PrepareSuppression(deadline time.Time) error
	StartSuppression(deadline time.Time) (epoch uint32, err error)
	StopSuppression() error
}

// recorder is the state machine's Actuator. It remembers the policy it
// was asked to install, for metrics (read from the HTTP goroutine, hence
// the lock), and forwards it to the datapath unless it observes only: in
// observe mode next is nil and no packet is ever changed.
type recorder struct {
	next    policyWriter
	metrics *metrics.Metrics

	mu     sync.Mutex
	policy recordedPolicy
	// writes counts the calls that reached the datapath, so that the
	// daemon can tell which events caused an update.
	writes uint64
}

// recordedPolicy is the last policy installed.
type recordedPolicy struct {
	ClampBytes    uint32
	Freeze        bool
	ClampDeadline time.Time
	Suppressing   bool
	// HandoverEpoch: the suppression in force is a handover's
	// (StartSuppression), whose flows release themselves; a
	// Preparation's has no epoch.
	HandoverEpoch    bool
	SuppressDeadline time.Time
	// Epoch is the handover epoch the datapath returned for the last
	// suppression start (a Preparation's opens none).
	Epoch uint32
}

var _ statemachine.Actuator = (*recorder)(nil)

// apply runs the datapath write (when enforcing) and, if it succeeded,
// records its effect.
func (r *recorder) apply(op string, write func() error, record func(*recordedPolicy)) error {
	if r.next != nil {
		if err := write(); err != nil {
			r.metrics.ActuationError(op)
			return err
		}
	}
	r.mu.Lock()
	record(&r.policy)
	r.writes++
	r.mu.Unlock()
	return nil
}

func (r *recorder) SetClamp(bytes uint32, deadline time.Time) error {
	return r.apply(statemachine.OpSetClamp, func() error { return r.next.SetClamp(bytes, deadline) }, func(p *recordedPolicy) {
		p.ClampBytes, p.Freeze, p.ClampDeadline = bytes, false, deadline
	})
}

func (r *recorder) SetFreeze(deadline time.Time) error {
	return r.apply(statemachine.OpSetFreeze, func() error { return r.next.SetFreeze(deadline) }, func(p *recordedPolicy) {
		p.ClampBytes, p.Freeze, p.ClampDeadline = 0, true, deadline
	})
}

func (r *recorder) ClearClamp() error {
	return r.apply(statemachine.OpClearClamp, func() error { return r.next.ClearClamp() }, func(p *recordedPolicy) {
		p.ClampBytes, p.Freeze, p.ClampDeadline = 0, false, time.Time{}
	})
}

func (r *recorder) PrepareSuppression(deadline time.Time) error {
	return r.apply(statemachine.OpPrepareSuppression, func() error { return r.next.PrepareSuppression(deadline) }, func(p *recordedPolicy) {
		p.Suppressing, p.HandoverEpoch, p.SuppressDeadline = true, false, deadline
	})
}

func (r *recorder) StartSuppression(deadline time.Time) error {
	var epoch uint32
	return r.apply(statemachine.OpStartSuppression, func() (err error) {
		epoch, err = r.next.StartSuppression(deadline)
		return err
	}, func(p *recordedPolicy) {
		p.Suppressing, p.HandoverEpoch, p.SuppressDeadline, p.Epoch = true, true, deadline, epoch
	})
}

func (r *recorder) StopSuppression() error {
	return r.apply(statemachine.OpStopSuppression, func() error { return r.next.StopSuppression() }, func(p *recordedPolicy) {
		p.Suppressing, p.HandoverEpoch, p.SuppressDeadline = false, false, time.Time{}
	})
}

// writeCount returns how many policy writes succeeded so far.
func (r *recorder) writeCount() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes
}

// snapshot returns the policy in force at now: one whose deadline passed
// is gone, as the datapath drops it by itself.
func (r *recorder) snapshot(now time.Time) recordedPolicy {
	r.mu.Lock()
	p := r.policy
	r.mu.Unlock()
	if !p.ClampDeadline.IsZero() && !now.Before(p.ClampDeadline) {
		p.ClampBytes, p.Freeze = 0, false
	}
	if !p.SuppressDeadline.IsZero() && !now.Before(p.SuppressDeadline) {
		p.Suppressing, p.HandoverEpoch = false, false
	}
	return p
}

// policyActive reports whether any policy holds at now.
func (r *recorder) policyActive(now time.Time) bool {
	p := r.snapshot(now)
	return p.ClampBytes > 0 || p.Freeze || p.Suppressing
}

// metricsSnapshot is snapshot in the form of the metrics package.
func (r *recorder) metricsSnapshot() metrics.PolicySnapshot {
	p := r.snapshot(time.Now())
	return metrics.PolicySnapshot{ClampBytes: uint64(p.ClampBytes), Freeze: p.Freeze, Suppressing: p.Suppressing}
}
