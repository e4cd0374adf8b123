package replay

import (
	"slices"
	"time"
)

// PolicySummary is what m2ho would have done to TCP over a replay: the
// window clamps (Preparation, the Smoothing hold, the ramp, the bandwidth
// hold on sub-6 cells) and the duplicate-ACK suppression windows (from the
// prediction, or the command of an unpredicted handover, to the end of
// Smoothing).
type PolicySummary struct {
	// Clamps counts clamp episodes, from the first write to the release
	// (or to the deadline it was last renewed to); ClampedFor is their
	// total length and ClampBytesMedian the median of their first
	// window.
	Clamps           int           `json:"clamps"`
	ClampedFor       time.Duration `json:"clamped_ns"`
	ClampBytesMedian uint32        `json:"clamp_bytes_median"`
	// Freezes counts zero-window episodes (the Freeze-TCP policy).
	Freezes int `json:"freezes"`
	// Suppressions counts suppression windows, SuppressedFor their total
	// length and SuppressionMean their mean.
	Suppressions    int           `json:"suppressions"`
	SuppressedFor   time.Duration `json:"suppressed_ns"`
	SuppressionMean time.Duration `json:"suppression_mean_ns"`
}

// policyRecorder is the actuator of a replay: it records the policies
// the machine writes on the replay's clock.
type policyRecorder struct {
	now func() time.Time

	clamping               bool
	clampStart, clampUntil time.Time
	// clampBytes is the first window of each clamp episode.
	clampBytes               []uint32
	clampedFor               time.Duration
	freezes                  int
	suppressing              bool
	suppressFrom, suppressTo time.Time
	windows                  int
	suppressed               time.Duration
}

func (r *policyRecorder) SetClamp(bytes uint32, deadline time.Time) error {
	r.hold(bytes, deadline, false)
	return nil
}

func (r *policyRecorder) SetFreeze(deadline time.Time) error {
	r.hold(0, deadline, true)
	return nil
}

// hold starts a clamp episode, or renews the one in force.
func (r *policyRecorder) hold(bytes uint32, deadline time.Time, freeze bool) {
	now := r.now()
	r.expireClamp(now)
	if !r.clamping {
		r.clamping, r.clampStart = true, now
		if freeze {
			r.freezes++
		} else {
			r.clampBytes = append(r.clampBytes, bytes)
		}
	}
	r.clampUntil = deadline
}

// expireClamp ends a clamp the datapath dropped at its deadline.
func (r *policyRecorder) expireClamp(now time.Time) {
	if r.clamping && now.After(r.clampUntil) {
		r.clampedFor += r.clampUntil.Sub(r.clampStart)
		r.clamping = false
	}
}

func (r *policyRecorder) ClearClamp() error {
	if r.clamping {
		r.clampedFor += earliest(r.now(), r.clampUntil).Sub(r.clampStart)
		r.clamping = false
	}
	return nil
}

// PrepareSuppression opens a suppression window, or extends the one in
// force: suppression runs from a handover's prediction (or command)
// through its execution's epoch to the end of Smoothing.
func (r *policyRecorder) PrepareSuppression(deadline time.Time) error {
	return r.StartSuppression(deadline)
}

// StartSuppression opens a suppression window, or extends the one in
// force, as PrepareSuppression.
func (r *policyRecorder) StartSuppression(deadline time.Time) error {
	now := r.now()
	if r.suppressing && !now.After(r.suppressTo) {
		r.suppressTo = deadline
		return nil
	}
	r.endSuppression(now)
	r.suppressing, r.suppressFrom, r.suppressTo = true, now, deadline
	r.windows++
	return nil
}

func (r *policyRecorder) StopSuppression() error {
	r.endSuppression(r.now())
	return nil
}

func (r *policyRecorder) endSuppression(now time.Time) {
	if r.suppressing {
		r.suppressed += earliest(now, r.suppressTo).Sub(r.suppressFrom)
		r.suppressing = false
	}
}

// summary ends what is in force at the end of the replay and sums up.
func (r *policyRecorder) summary(end time.Time) PolicySummary {
	r.expireClamp(end)
	if r.clamping {
		r.clampedFor += earliest(end, r.clampUntil).Sub(r.clampStart)
		r.clamping = false
	}
	r.endSuppression(end)
	s := PolicySummary{
		Clamps: len(r.clampBytes), ClampedFor: r.clampedFor, Freezes: r.freezes,
		Suppressions: r.windows, SuppressedFor: r.suppressed,
	}
	if len(r.clampBytes) > 0 {
		sorted := slices.Clone(r.clampBytes)
		slices.Sort(sorted)
		s.ClampBytesMedian = sorted[len(sorted)/2]
	}
	if r.windows > 0 {
		s.SuppressionMean = r.suppressed / time.Duration(r.windows)
	}
	return s
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// restart closes what is in force when a new recording starts: the
// previous one ended, and its policies with it, at their deadlines.
func (r *policyRecorder) restart() {
	if r.clamping {
		r.clampedFor += r.clampUntil.Sub(r.clampStart)
		r.clamping = false
	}
	r.endSuppression(r.suppressTo)
}
