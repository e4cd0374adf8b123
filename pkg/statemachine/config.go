package statemachine

import (
	"errors"
	"fmt"
	"time"
)

// Policy selects what the machine does to TCP around a handover.
type Policy string

// Policies.
const (
	// PolicyM2HO is the paper's: clamp the window to the target cell's
	// buffer before the handover, suppress duplicate ACKs after it, and
	// hold a bandwidth clamp on sub-6 cells.
	PolicyM2HO Policy = "m2ho"
	// PolicyFreeze is the Freeze-TCP baseline: a zero window from the
	// prediction until the handover completes, nothing else.
	PolicyFreeze Policy = "freeze"
)

// linuxMinRTO is the smallest retransmission timeout of a Linux sender
// (TCP_RTO_MIN). Suppressing duplicate ACKs that long could trigger the
// very timeout Smoothing exists to avoid.
const linuxMinRTO = 200 * time.Millisecond

// Config tunes a Machine. Start from DefaultConfig.
type Config struct {
	// Policy is PolicyM2HO or PolicyFreeze; empty means PolicyM2HO.
	Policy Policy
	// Ablation switches of PolicyM2HO. Prediction also applies to
	// PolicyFreeze (without it the freeze starts at the command).
	Prediction     bool
	Suppression    bool
	BandwidthClamp bool
	// Ramp hands the clamp of each handover over to a ramp on the new
	// cell instead of releasing it when Smoothing ends (see
	// Machine.applyStablePolicy).
	Ramp bool
	// SmoothingMax bounds duplicate-ACK suppression after a handover; it
	// must stay below the sender's minimum RTO (200 ms on Linux).
	SmoothingMax time.Duration
	// DrainBurstBytes is the smallest datapath packet train that counts
	// as the target cell draining its buffer, which ends Smoothing (see
	// Machine.OnBurstEnd). Slot bursts found in rb_alloc events need no
	// size: their first slot shows the cell had a backlog.
	DrainBurstBytes uint64
	// DefaultT2 is the measurement-to-command interval assumed for a band
	// until MinT2Samples intervals were measured; a prediction times out
	// after 2*T2 without a command.
	DefaultT2    time.Duration
	MinT2Samples int
	// PolicyLease is the longest deadline written with a policy; Tick
	// renews it while the policy holds, so a dead daemon releases
	// everything within one lease.
	PolicyLease time.Duration
	// Learning lets the machine learn which reports this network follows
	// with a handover and predict on those (see ReportStats); without it
	// Algorithm 1 alone predicts. A report Algorithm 1 ignores predicts
	// when the share of its kind expected to be followed reaches
	// LearnFollowedShare; one Algorithm 1 acts on stops predicting when
	// the share falls below LearnStopShare; an A4 or A5 towards another
	// carrier predicts while it is at least LearnFollowedShare. With
	// learning, the repeats of a report renew its prediction, and a
	// report that crossed a handover's command is left out.
	// LearnPriorWeight is how many reports Algorithm 1's verdict (and
	// each scope's share for the narrower one) weighs.
	Learning           bool
	LearnFollowedShare float64
	LearnStopShare     float64
	LearnPriorWeight   float64
	// ExecutionTimeout bounds Preparation after a handover command: a
	// completion that does not come means the log missed it or the
	// handover failed, and the window must not stay clamped.
	ExecutionTimeout time.Duration
	// ConditionalHold bounds a prediction made from a conditional
	// handover configuration (cho_config): the UE executes it whenever a
	// candidate's condition holds, which may be never.
	ConditionalHold time.Duration
}

// DefaultConfig returns the defaults.
//
// DefaultT2 is 146 ms: the paper measured 178.9 ms on average from the
// measurement report to execution and 32.7 ms from command to execution
// (section 4.2), leaving 146.2 ms from report to command; twice that, 292
// ms, also covers the longest report-to-command interval the paper saw
// (310.2 - 32.7 = 277.5 ms). ExecutionTimeout is 1 s, the common T304
// timer after which the UE itself declares the handover failed.
// ConditionalHold is 2 s, twice the longest report-to-command lead the
// machine learns from (maxCommandLead): a network configures a
// conditional handover on a report that would otherwise have been
// followed by a command, with an execution condition a few dB short of
// it, so the UE meets it within the time a report leads its command,
// or the radio turned away; beyond that the clamp would only cost
// throughput.
// PolicyLease of 500 ms bounds what a crashed daemon leaves behind while
// needing a renewal only every 250 ms.
//
// DrainBurstBytes is 16 KiB, eleven full-size segments with no 1 ms gap
// between them: more than a lone reply, a run of pure ACKs for uplink data
// or a trickle of forwarded segments, each of which the datapath also
// reports as a train, and far less than the drain of a buffer that holds
// the data forwarded from the source cell (the paper's sub-6 cells hold
// about 1.5 MB, section 3.2). A drain smaller than that is left to the
// flows' own release or SmoothingMax, which are safe either way.
//
// Learning is on. LearnFollowedShare of one half predicts on a kind of
// report Algorithm 1 ignores as soon as the network is expected to
// follow it more often than not; LearnStopShare of 0.4 keeps predicting
// on a kind Algorithm 1 acts on until the network is expected to leave
// clearly more than half of it unanswered: a missed handover loses all of
// m2ho's protection, a prediction too many only a clamp the target's
// buffer bounds and, until it ends, the holding of holes' duplicate ACKs
// within twice the RTT. LearnPriorWeight of 4 makes Algorithm 1's verdict weigh
// as much as four reports. With a lighter prior or a stop share of one
// half, a few unanswered reports of a new cell overruled Algorithm 1 and
// cost recall on the generated corpus; a heavier prior kept predicting on
// what the shared captures' networks ignore (docs/replay.md).
func DefaultConfig() Config {
	return Config{
		Policy:           PolicyM2HO,
		Prediction:       true,
		Suppression:      true,
		BandwidthClamp:   true,
		Ramp:             true,
		SmoothingMax:     150 * time.Millisecond,
		DrainBurstBytes:  16 << 10,
		DefaultT2:        146 * time.Millisecond,
		MinT2Samples:     5,
		PolicyLease:      500 * time.Millisecond,
		ExecutionTimeout: time.Second,
		ConditionalHold:  2 * time.Second,

		Learning:           true,
		LearnFollowedShare: 0.5,
		LearnStopShare:     0.4,
		LearnPriorWeight:   4,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Policy != "" && c.Policy != PolicyM2HO && c.Policy != PolicyFreeze:
		return fmt.Errorf("statemachine: policy %q: want %q or %q", c.Policy, PolicyM2HO, PolicyFreeze)
	case c.SmoothingMax <= 0 || c.SmoothingMax >= linuxMinRTO:
		return fmt.Errorf("statemachine: smoothing max %v: must be positive and below the 200ms minimum RTO", c.SmoothingMax)
	case c.DrainBurstBytes == 0:
		return errors.New("statemachine: drain burst bytes must be positive: a lone packet would end Smoothing")
	case c.DefaultT2 <= 0:
		return fmt.Errorf("statemachine: default T2 %v: must be positive", c.DefaultT2)
	case c.MinT2Samples < 1:
		return fmt.Errorf("statemachine: minimum T2 samples %d: must be at least 1", c.MinT2Samples)
	case c.PolicyLease < c.SmoothingMax:
		// Suppression is written once with its final deadline: renewing
		// it would restart the handover epoch in the datapath.
		return fmt.Errorf("statemachine: policy lease %v: must be at least the smoothing max %v", c.PolicyLease, c.SmoothingMax)
	case c.ExecutionTimeout <= 0:
		return errors.New("statemachine: execution timeout must be positive")
	case c.ConditionalHold <= 0:
		return errors.New("statemachine: conditional handover hold must be positive")
	case c.Learning && !(c.LearnPriorWeight > 0):
		return fmt.Errorf("statemachine: learning prior weight %v: must be positive", c.LearnPriorWeight)
	case c.Learning && (c.LearnFollowedShare <= 0 || c.LearnFollowedShare > 1):
		return fmt.Errorf("statemachine: learnt share of followed reports %v: must be in (0, 1]", c.LearnFollowedShare)
	case c.Learning && (c.LearnStopShare <= 0 || c.LearnStopShare > c.LearnFollowedShare):
		return fmt.Errorf("statemachine: learnt share to stop predicting %v: must be in (0, %v]", c.LearnStopShare, c.LearnFollowedShare)
	}
	return nil
}
