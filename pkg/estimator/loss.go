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
	// overflowAt is when retransmissions were last taken for an overflow
	// of the serving cell (overflowLocked); zero: never.
	overflowAt time.Time
	// handoverAt is when a handover was last under way
	// (HandoverUnderWay).
	handoverAt time.Time
}

// overflowGuard is how long after a handover was last under way
// (HandoverUnderWay), and after the serving cell changed, retransmissions
// are the handover's: the source releases its link-layer context on the
// command and delivers what it held out of order (below the highest
// sequence received, as a retransmission arrives), the target may grant
// a smaller buffer while it admits the UE, the window kept through the
// handover may overflow it, and the senders repair all that in the round
// trips that follow. Such losses say nothing of the sender or of the
// serving cell's buffer: neither LossPersists nor the buffer estimate
// (overflowLocked) counts them. In an evaluation (m2hod f0bf032,
// docs/results/eval-f0bf032), 8 of the 9 times CUBIC senders were taken
// for senders that do not shrink on loss, and lost the hold for 30 s,
// came 0.7 to 1.6 s after a handover's execution.
const overflowGuard = 2 * time.Second

// HandoverUnderWay tells the estimator that a handover is under way at
// at: from its command until the ramp after it ends (see overflowGuard).
func (e *Estimator) HandoverUnderWay(at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if at.After(e.loss.handoverAt) {
		e.loss.handoverAt = at
	}
}

// handoverLossLocked says whether retransmissions at t are a handover's
// (see overflowGuard).
func (e *Estimator) handoverLossLocked(t time.Time) bool {
	return t.Sub(e.servingSince) < overflowGuard || t.Sub(e.loss.handoverAt) < overflowGuard
}

// AddRetransmitted takes the downlink payload bytes that arrived at or
// below the highest sequence their flow had received (retransmissions,
// and data a handover reordered), summed over the flows since the
// previous sample, sampled at t. A handover's own (see overflowGuard)
// are dropped; the others tell whether the senders shrink on loss
// (LossPersists) and what the serving cell's buffer holds
// (overflowLocked).
func (e *Estimator) AddRetransmitted(t time.Time, bytes uint64) {
	if bytes == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.handoverLossLocked(t) {
		return
	}
	l := &e.loss
	keep := 0
	for keep < len(l.samples) && t.Sub(l.samples[keep]) > lossWindow {
		keep++
	}
	l.samples = append(l.samples[keep:], t)
	e.overflowLocked(t)
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

// overflowLocked takes retransmissions at t for an overflow of the
// serving cell's drop-tail buffer, and the largest queue the cell held in
// the rounds before them for its size: the packets queued last before a
// drop waited behind a full buffer. That queue becomes the cell's
// ceiling (CellRecord.CeilingBytes), and its estimate when lower.
//
// Every other input of the estimate is a lower bound, so without this
// the estimate only grows, and one input that overshoots stays. Packet
// trains do: a bulk sender keeps a cell busy and its trains count
// arrivals, up to Config.MaxBurstDuration times the cell's rate, which
// exceeds the buffer of a cell whose rate drains it faster than that. In
// an evaluation (m2hod f0bf032, walking seed 7, docs/results/eval-f0bf032)
// a 150 kB sub-6 cell at 26 Mbit/s reached 244.5 kB, 75 ms of its rate;
// the bandwidth hold, the rate times RTT_min plus half the estimate, then
// let the queue reach 84 of the buffer's 100 packets, and the next fall
// in rate dropped the senders' data.
//
// One episode corrects once (within lossWindow of the last correction),
// and never to less than half the estimate: the queue is read from RTT
// samples, some of them late. Losses with less than a quarter of the
// estimate queued are not this buffer's (a radio loss, a bottleneck
// beyond the cell) and change nothing.
func (e *Estimator) overflowLocked(t time.Time) {
	l := &e.loss
	if e.serving.RAT == "" || (!l.overflowAt.IsZero() && t.Sub(l.overflowAt) < lossWindow) {
		return
	}
	r, ok := e.cells[e.serving.Key()]
	if !ok {
		return
	}
	queued := uint64(e.recentPeakQueueLocked())
	if queued < r.BufferBytes/4 || queued == 0 {
		return
	}
	l.overflowAt = t
	ceiling := max(queued, r.BufferBytes/2)
	r.CeilingBytes = ceiling
	r.Updated = t
	if ceiling < r.BufferBytes {
		e.logger.Info("buffer estimate lowered to the queue the cell overflowed at", "cell", r.Cell, "from", r.BufferBytes, "to", ceiling)
		r.BufferBytes = ceiling
		delete(e.bandMin, r.Cell.Band)
	}
	e.saveLocked(r)
}

// recentPeakQueueLocked is the largest queue the serving cell held in the
// rounds of the last Config.PeakWindow and the round under way: the
// largest queue one of their RTT samples waited behind.
func (e *Estimator) recentPeakQueueLocked() float64 {
	b := &e.bw
	if b.minRTT == 0 {
		return 0
	}
	queued := 0.0
	for _, r := range b.rounds {
		queued = max(queued, r.peakQueue)
	}
	if b.roundSamples > 0 {
		queued = max(queued, b.roundQueueHigh)
	}
	return queued
}
