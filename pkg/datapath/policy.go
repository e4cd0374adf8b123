package datapath

import (
	"fmt"
	"time"
)

var policyKey = uint32(0)

// updatePolicy applies change to the policy map under policyMu, reading
// the map first: the map is the one record of the part not being changed.
func (d *Datapath) updatePolicy(change func(*m2hoPolicy)) (m2hoPolicy, error) {
	d.policyMu.Lock()
	defer d.policyMu.Unlock()
	var pol m2hoPolicy
	if err := d.maps.enter(); err != nil {
		return pol, err
	}
	defer d.maps.leave()
	if err := d.objs.PolicyMap.Lookup(&policyKey, &pol); err != nil {
		return pol, fmt.Errorf("datapath: read policy: %w", err)
	}
	change(&pol)
	if err := d.objs.PolicyMap.Update(&policyKey, &pol, 0); err != nil {
		return pol, fmt.Errorf("datapath: write policy: %w", err)
	}
	return pol, nil
}

func (d *Datapath) policy() (m2hoPolicy, error) {
	var pol m2hoPolicy
	if err := d.maps.enter(); err != nil {
		return pol, err
	}
	defer d.maps.leave()
	if err := d.objs.PolicyMap.Lookup(&policyKey, &pol); err != nil {
		return pol, fmt.Errorf("datapath: read policy: %w", err)
	}
	return pol, nil
}

// futureDeadline converts a policy deadline, refusing one already past: a
// policy that would expire before it is written is a caller bug.
func futureDeadline(deadline time.Time) (uint64, error) {
	if !deadline.After(time.Now()) {
		return 0, fmt.Errorf("%w: %v", ErrDeadline, deadline)
	}
	return toMonotonic(deadline), nil
}

func (d *Datapath) setClampPolicy(mode m2hoClampMode, bytes uint32, deadline time.Time) error {
	deadlineNs, err := futureDeadline(deadline)
	if err != nil {
		return err
	}
	_, err = d.updatePolicy(func(p *m2hoPolicy) {
		p.ClampMode = uint32(mode)
		p.ClampBytes = bytes
		p.ClampDeadlineNs = deadlineNs
	})
	return err
}

// SetClamp makes egress ACKs advertise min(own window, bytes) until the
// deadline, never less than one MSS of the flow. Flows whose handshake was
// not seen, and not adopted either (see adoptOpenConnections), are left
// alone (Counters.NoWScale).
func (d *Datapath) SetClamp(bytes uint32, deadline time.Time) error {
	return d.setClampPolicy(m2hoClampModeCLAMP_BYTES, bytes, deadline)
}

// SetFreeze makes egress ACKs advertise a zero window until the deadline
// (the Freeze-TCP baseline).
func (d *Datapath) SetFreeze(deadline time.Time) error {
	return d.setClampPolicy(m2hoClampModeCLAMP_FREEZE, 0, deadline)
}

// ClearClamp stops rewriting windows.
func (d *Datapath) ClearClamp() error {
	_, err := d.updatePolicy(func(p *m2hoPolicy) {
		p.ClampMode = uint32(m2hoClampModeCLAMP_OFF)
		p.ClampBytes = 0
		p.ClampDeadlineNs = 0
	})
	return err
}

// coarseClockLag bounds how far behind CLOCK_MONOTONIC the egress program's
// coarse clock, which times a flow's acknowledgements and holes, may lag:
// two kernel ticks at HZ=100.
const coarseClockLag = 20 * time.Millisecond

// PrepareSuppression drops pure duplicate ACKs of a hole (data received
// above their acknowledgement) until the deadline, with no epoch: from a
// prediction, or an unpredicted command, to the execution. The source
// cell's context release delivers data out of order as the UE applies the
// command, before user space reads the command from the modem; started
// at the command, suppression let the first duplicates of that
// reordering through. A hole whose first duplicate ACK left before the
// first of a run of calls (a loss the sender was already repairing; within
// coarseClockLag of it, counted after) is not held, however long its
// acknowledgement stood before. StartSuppression at the execution takes
// over.
func (d *Datapath) PrepareSuppression(deadline time.Time) error {
	deadlineNs, err := futureDeadline(deadline)
	if err != nil {
		return err
	}
	_, err = d.updatePolicy(func(p *m2hoPolicy) {
		// A renewal, or the command after the prediction, keeps the
		// holes that began since the prediction.
		if p.SuppressMode != uint32(m2hoSuppressModeSUPPRESS_PREPARATION) {
			p.SuppressSinceNs = monotonicNow() - uint64(coarseClockLag)
		}
		p.SuppressMode = uint32(m2hoSuppressModeSUPPRESS_PREPARATION)
		p.SuppressDeadlineNs = deadlineNs
	})
	return err
}

// StartSuppression opens a new handover epoch and drops pure duplicate
// ACKs of a hole until the deadline. Each flow snapshots its highest
// received sequence at its first packet in the epoch and is released by
// itself once an outgoing ACK passes that sequence. The returned epoch
// identifies the handover in Flows.
func (d *Datapath) StartSuppression(deadline time.Time) (uint32, error) {
	deadlineNs, err := futureDeadline(deadline)
	if err != nil {
		return 0, err
	}
	pol, err := d.updatePolicy(func(p *m2hoPolicy) {
		p.Epoch++
		p.SuppressMode = uint32(m2hoSuppressModeSUPPRESS_HANDOVER)
		p.SuppressDeadlineNs = deadlineNs
	})
	return pol.Epoch, err
}

// StopSuppression releases every flow at once.
func (d *Datapath) StopSuppression() error {
	_, err := d.updatePolicy(func(p *m2hoPolicy) {
		p.SuppressMode = uint32(m2hoSuppressModeSUPPRESS_OFF)
		p.SuppressDeadlineNs = 0
	})
	return err
}

// activeFlowWindow is how recently a flow must have carried a packet for
// SuppressionPending to count it before it has entered the current epoch.
// During a handover the cells hold the downlink, so a flow that was moving
// data before it sees no packet until the forwarded data arrives, and only
// its first packet in the epoch takes its snapshot. A second covers the
// interruption and the round trip after it; a flow quieter than that had
// nothing in flight.
const activeFlowWindow = time.Second

// SuppressionPending counts the flows still suppressing in the current
// epoch: those that have taken their snapshot and not yet been released,
// and those that have received data, were active within activeFlowWindow
// and have not yet seen a packet in the epoch. Closed connections never
// count. It is 0 unless a handover's suppression (StartSuppression) is on
// and within its deadline.
func (d *Datapath) SuppressionPending() (int, error) {
	pol, err := d.policy()
	if err != nil {
		return 0, err
	}
	now := monotonicNow()
	if pol.SuppressMode != uint32(m2hoSuppressModeSUPPRESS_HANDOVER) || now > pol.SuppressDeadlineNs {
		return 0, nil
	}
	activeSince := now - min(now, uint64(activeFlowWindow))
	pending := 0
	_, err = d.eachFlow(func(_ *m2hoFlowKey, st *m2hoFlowState) bool {
		if suppressionPending(st, pol.Epoch, activeSince) {
			pending++
		}
		return false
	})
	return pending, err
}

// suppressionPending says whether a flow may still need suppression in
// epoch: its connection is open, and it has not been released in the
// epoch, or it has not entered it yet while it had data and was seen since
// activeSince (CLOCK_MONOTONIC ns).
func suppressionPending(st *m2hoFlowState, epoch uint32, activeSince uint64) bool {
	if st.Flags&uint32(m2hoFlowFlagsFLOW_CLOSED) != 0 {
		return false
	}
	if st.Epoch == epoch {
		return st.Flags&uint32(m2hoFlowFlagsFLOW_RELEASED) == 0
	}
	return st.Flags&uint32(m2hoFlowFlagsFLOW_RX_SEQ_VALID) != 0 && st.LastSeenNs >= activeSince
}
