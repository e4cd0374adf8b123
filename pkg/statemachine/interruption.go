package statemachine

import (
	"slices"
	"time"

	"github.com/m2ho/m2ho/internal/stats"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
)

// The Preparation clamp keeps what a handover piles up in the target
// cell within the target's buffer. What piles up is not the whole flight.
// Until the execution the source cell delivers, so the flight is its
// bandwidth-delay product plus its queue, and the ACK clock runs. From the
// execution nothing is delivered for the interruption T; the source's
// queue and everything still on the way (one RTT_min of the flight at the
// delivery rate C, ACK-clocked before the execution) arrive at the target,
// which starts draining them at its own rate once T is over. A target
// that drains at least C (a cell of the same band or a faster one, as
// newRamp also takes) therefore holds at most
//
//	flight - C * (RTT_min - T)
//
// when T is shorter than RTT_min, and the whole flight otherwise. The
// clamp that keeps this within the buffer B is B + C * (RTT_min - T),
// which is the paper's B when the interruption lasts a round trip or
// more. Where the interruption is shorter, the clamp B alone holds the
// flight below the bandwidth-delay product for the whole Preparation
// whenever B is, and costs the goodput of the source cell for nothing:
// in the testbed, sub-6 to sub-6 handovers delivered 150 to 290 kB less
// than plain CUBIC between report and execution, and as much again in
// the second after, where plain CUBIC overflowed the target only with a
// flight above about B + C * (RTT_min - T) (docs/results.md).
//
// T is measured, not assumed: it is the gap in the downlink across
// each executed handover, from the last burst before it to the first
// after, counted from the command at the earliest. The gap overstates
// the interruption when a clamp below the bandwidth-delay product left
// the link idle for part of each round before it (in the testbed, gaps
// of 60 to 75 ms for interruptions of 27 ms on average); the median of
// the last interruptionSamples keeps such gaps from setting T alone. A
// T shorter than a handover's own lets its flight exceed the buffer by
// C times the difference, which the buffer estimate, a lower bound,
// leaves room for. Before any handover has been measured the clamp is
// the paper's.

// interruptionSamples is how many measured interruptions are kept.
const interruptionSamples = 8

// interruptionMaxGap bounds a gap taken as a handover's interruption: a
// longer one is an application that paused, not the radio.
const interruptionMaxGap = 500 * time.Millisecond

// interruptionGauge follows the downlink across one handover, from its
// command (or, unannounced, its execution) to the first burst that ends
// after the execution.
type interruptionGauge struct {
	// from is the command's time; zero when no handover is followed.
	from time.Time
	// executedAt is the execution, zero until then.
	executedAt time.Time
	// longest is the longest gap seen since from.
	longest time.Duration
}

// follow starts following a handover commanded at t, unless one is.
func (g *interruptionGauge) follow(t time.Time) {
	if g.from.IsZero() {
		*g = interruptionGauge{from: t}
	}
}

// executed marks the execution at t of the handover followed, which is
// followed from t when no command announced it.
func (g *interruptionGauge) executed(t time.Time) {
	g.follow(t)
	g.executedAt = t
}

// burst takes a burst of the downlink, prevEnd being the end of the one
// before it (zero when none), and returns the handover's interruption
// once the first burst ending after the execution came.
func (g *interruptionGauge) burst(b estimator.Burst, prevEnd time.Time) (time.Duration, bool) {
	if g.from.IsZero() {
		return 0, false
	}
	if !prevEnd.IsZero() && b.Start.After(prevEnd) {
		// A gap that began before the command counts from it: the
		// source delivered until the execution, so earlier idleness
		// is the application's.
		since := prevEnd
		if since.Before(g.from) {
			since = g.from
		}
		g.longest = max(g.longest, b.Start.Sub(since))
	}
	if g.executedAt.IsZero() || !b.End.After(g.executedAt) {
		return 0, false
	}
	gap := g.longest
	*g = interruptionGauge{}
	return gap, gap > 0 && gap <= interruptionMaxGap
}

// recordInterruption keeps a measured interruption.
func (m *Machine) recordInterruption(gap time.Duration) {
	m.interruptions = append(m.interruptions, gap)
	if n := len(m.interruptions); n > interruptionSamples {
		m.interruptions = slices.Delete(m.interruptions, 0, n-interruptionSamples)
	}
}

// interruption is the lower median of the kept interruptions, 0 when
// none was measured.
func (m *Machine) interruption() time.Duration {
	if len(m.interruptions) == 0 {
		return 0
	}
	// A copy: the kept ones stay oldest first.
	return stats.LowerMedian(slices.Clone(m.interruptions))
}

// interruptionHeadroom is C * (RTT_min - T) for a handover from the data
// cell to target, the flight above the target's buffer that the
// interruption does not pile up (see above); 0 when T is unknown or not
// shorter than RTT_min, when nothing is known of the source's delivery,
// and from mmWave down to sub-6, whose target drains far slower than the
// source delivered.
func (m *Machine) interruptionHeadroom(target diag.Cell) uint64 {
	t := m.interruption()
	if t == 0 || (bandKey(m.dataCell().Band) == diag.BandMmWave && bandKey(target.Band) == diag.BandSub6) {
		return 0
	}
	kept, ok := m.est.Carried(m.now)
	if !ok || t >= kept.MinRTT {
		return 0
	}
	return uint64(float64(kept.BDP) * float64(kept.MinRTT-t) / float64(kept.MinRTT))
}
