package estimator

import "time"

// Loss persistence tells senders that shrink on loss apart from those that
// do not (BBR), from the receiving side. A sender that shrinks its window
// on loss stops overflowing the cell for many round trips after one: its
// retransmissions arrive within a round trip or two of the loss, then none
// for seconds. A sender that keeps its rate through loss goes on
// overflowing a shallow buffer, and retransmissions keep arriving. A clamp
// that holds the window below what the cell carries gains such a sender
// nothing (it never cut its window) and costs it throughput (BBR with the
// bandwidth clamp made 95% of BBR's throughput, docs/results.md).

// lossWindow is the span over which retransmissions are counted.
const lossWindow = time.Second

// persistentLossSamples is how many samples within lossWindow must carry
// retransmissions for the loss to persist. The daemon samples the flows
// every 100 ms while data flows, so this is half of them: a loss-based
// sender's recovery, even a slow start after a timeout, spans a few round
// trips of 70 ms and fewer samples.
const persistentLossSamples = 5

// lossMemory is how long a sender seen losing persistently counts as one
// that does not shrink on loss. Longer than the time between handovers
// (4.8 s driving, 22 s walking in the testbed's corpora): once unclamped,
// such a sender shows it again within a second.
const lossMemory = 30 * time.Second

// lossState is the estimator's record of retransmissions.
type lossState struct {
	// samples are the times of the recent samples that carried
	// retransmitted bytes, oldest first.
	samples []time.Time
	// persistedAt is when the loss last persisted; zero: never.
	persistedAt time.Time
}

// AddRetransmitted takes the downlink payload bytes that arrived at or
// below the highest sequence their flow had received (retransmissions,
// and data a handover reordered), summed over the flows since the
// previous sample, sampled at t.
func (e *Estimator) AddRetransmitted(t time.Time, bytes uint64) {
	if bytes == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	l := &e.loss
	keep := 0
	for keep < len(l.samples) && t.Sub(l.samples[keep]) > lossWindow {
		keep++
	}
	l.samples = append(l.samples[keep:], t)
	if len(l.samples) >= persistentLossSamples {
		if l.persistedAt.IsZero() || t.Sub(l.persistedAt) > lossMemory {
			e.logger.Info("senders keep losing without shrinking their windows: no ramp or bandwidth clamp for them",
				"samples", len(l.samples), "window", lossWindow)
		}
		l.persistedAt = t
	}
}

// LossPersists reports whether, within the last lossMemory, the senders
// kept losing data over a second: they do not shrink on loss, and a clamp
// below what the cell carries would only slow them.
func (e *Estimator) LossPersists(now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	at := e.loss.persistedAt
	return !at.IsZero() && now.Sub(at) <= lossMemory
}
