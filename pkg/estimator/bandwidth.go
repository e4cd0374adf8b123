package estimator

import (
	"sort"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
)

// byteHistoryLen is how many ingress byte samples are kept to size slot
// bursts: with the daemon polling every 10 ms, about 10 s.
const byteHistoryLen = 1024

// maxPlausibleRTT rejects RTT samples that can only be measurement errors.
const maxPlausibleRTT = time.Minute

// MaxWindowBytes is the largest answer of TargetBuffer and
// BandwidthClamp: no TCP window exceeds 1 GiB (RFC 7323).
const MaxWindowBytes = 1 << 30

type byteSample struct {
	t     time.Time
	total uint64
}

// byteHistory is a ring of cumulative ingress byte samples in time order.
type byteHistory struct {
	samples []byteSample
	head    int // index of the oldest sample once the ring is full
}

func (h *byteHistory) len() int { return len(h.samples) }

func (h *byteHistory) get(i int) byteSample {
	return h.samples[(h.head+i)%len(h.samples)]
}

func (h *byteHistory) last() (byteSample, bool) {
	if h.len() == 0 {
		return byteSample{}, false
	}
	return h.get(h.len() - 1), true
}

func (h *byteHistory) push(s byteSample) {
	if len(h.samples) < byteHistoryLen {
		h.samples = append(h.samples, s)
		return
	}
	h.samples[h.head] = s
	h.head = (h.head + 1) % byteHistoryLen
}

func (h *byteHistory) reset() { h.samples, h.head = h.samples[:0], 0 }

// coverage says where a time falls relative to the byte history.
type coverage int

const (
	coverageInside coverage = iota
	coverageBefore          // older than the oldest sample: never resolvable
	coverageAfter           // newer than the newest sample: wait for more
)

// at interpolates the cumulative byte count at t.
func (h *byteHistory) at(t time.Time) (uint64, coverage) {
	n := h.len()
	if n == 0 || t.After(h.get(n-1).t) {
		return 0, coverageAfter
	}
	if t.Before(h.get(0).t) {
		return 0, coverageBefore
	}
	// The first sample at or after t; it exists because t is covered.
	i := sort.Search(n, func(i int) bool { return !h.get(i).t.Before(t) })
	b := h.get(i)
	if i == 0 || b.t.Equal(t) {
		return b.total, coverageInside
	}
	a := h.get(i - 1)
	frac := float64(t.Sub(a.t)) / float64(b.t.Sub(a.t))
	return a.total + uint64(frac*float64(b.total-a.total)), coverageInside
}

// bandwidth holds the state of Eq. 2: the bytes received per RTT round,
// the smoothed RTT and the windowed minimum RTT.
type bandwidth struct {
	srtt     time.Duration
	minRTT   time.Duration
	minRTTAt time.Time
	// probeStart is when the probe of a stale RTT_min began, zero when
	// none is under way; probeMin is its smallest sample (see AddRTT).
	probeStart time.Time
	probeMin   time.Duration
	// minRTTCarried says RTT_min is the previous cell's (restart), not
	// yet confirmed by a sample or a probe of this one.
	minRTTCarried bool

	roundStart byteSample
	inRound    bool
	// roundQueueSum and roundSamples add up the queues the RTT samples of
	// the current round waited behind (sampleQueueLocked); roundQueueLow
	// and roundQueueHigh are its smallest and largest. roundQueue is the
	// mean of the last complete round's, which says what it queued
	// without the smoothed RTT's lag of several rounds.
	roundQueueSum  float64
	roundSamples   int
	roundQueueLow  float64
	roundQueueHigh float64
	roundQueue     float64
	// standing is the queue the last complete round kept throughout, 0
	// when it had no RTT sample of its own (see queueLowerBound).
	standing float64
	// lastWait is the newest RTT sample's delay above RTT_min, and
	// lastWaitRate the rate the cell delivered at meanwhile: the bytes
	// queued ahead of that sample over its wait (see DrainableWindow).
	lastWait     time.Duration
	lastWaitRate float64
	// bytesPerSecond is the delivery rate of the last complete round.
	bytesPerSecond float64
	estimateAt     time.Time
	// rounds are the complete rounds of the last Config.PeakWindow, in
	// time order, for the peak delivery rate.
	rounds []round
}

// round is one complete RTT round: when it ended, its delivery rate, and
// the largest queue one of its RTT samples waited behind (0 without
// samples).
type round struct {
	end            time.Time
	bytesPerSecond float64
	peakQueue      float64
}

// peak returns the highest delivery rate of the rounds that ended within
// window before now.
func (b *bandwidth) peak(now time.Time, window time.Duration) float64 {
	best := 0.0
	for _, r := range b.rounds {
		if now.Sub(r.end) <= window {
			best = max(best, r.bytesPerSecond)
		}
	}
	return best
}

// sampleQueueLocked is the queue an RTT sample of rtt waited behind: the
// bytes the interface received in its delay above RTT_min, up to the
// newest byte sample. The cell's queue is first in, first out, so the
// bytes it delivered while a packet waited are those queued ahead of it,
// whatever the rate did meanwhile. A rate times the delay is not: the
// last round's rate, measured over a round that began before a fall in
// capacity, read a 150 kB queue as 216 kB in the testbed, and one after
// it as under half. Without the bytes of that delay (the history starts
// later), the last complete round's rate stands in.
func (e *Estimator) sampleQueueLocked(rtt time.Duration) float64 {
	b := &e.bw
	wait := max(rtt-b.minRTT, 0)
	if wait == 0 {
		return 0
	}
	if end, ok := e.bytes.last(); ok {
		if from, cov := e.bytes.at(end.t.Add(-wait)); cov == coverageInside {
			return float64(end.total - from)
		}
	}
	return b.queueAtRate(rtt)
}

// queueAtRate is the queue a sample of rtt waited behind if the cell
// delivered at the last complete round's rate: that rate times its delay
// above RTT_min. It stands in where the bytes of the delay are unknown.
func (b *bandwidth) queueAtRate(rtt time.Duration) float64 {
	return b.bytesPerSecond * max(rtt-b.minRTT, 0).Seconds()
}

// restart forgets what the previous cell measured at a change of cell at
// at: its rate, rounds and smoothed RTT. The byte history stays: it is the
// interface's, not the path's. RTT_min stays too, for carriedRTTMin at
// most, as a ceiling the new cell's samples lower (see carriedRTTMin).
func (b *bandwidth) restart(at time.Time, window time.Duration) {
	minRTT, minRTTAt := b.minRTT, b.minRTTAt
	*b = bandwidth{}
	if minRTT == 0 {
		return
	}
	b.minRTT, b.minRTTAt, b.minRTTCarried = minRTT, minRTTAt, true
	if expires := at.Add(carriedRTTMin - window); minRTTAt.After(expires) {
		b.minRTTAt = expires
	}
}

// carriedRTTMin is how long the path's RTT_min outlives a change of cell.
// It is mostly the way to the servers, which a handover between cells of
// one network barely changes, and the new cell's first samples cannot
// measure it: they wait behind what the handover piled up in the target
// (the data the source forwarded, the flight a mmWave cell held), and the
// holds sized on an RTT_min taken from them (the rate times it, plus half
// the buffer) keep that pile as a standing queue until RTT_min expires. In
// an evaluation (m2hod b177332, walking seed 6) a mmWave to sub-6 handover
// that overflowed the target left the sender's smoothed RTT at 135 to 160
// ms for the 3.6 s to the next handover, twice the path's 71 ms: the
// held window kept a queue of about the whole 150 kB buffer, and that
// handover overflowed the target, 23 packets as it completed and 24 after.
// Carried for a while only: once it expires a probe (probingLocked)
// drains the queue and measures the new cell's own RTT_min. Until then a
// path slower than the old one has its holds short of its bandwidth-delay
// product by the rate times the difference, which the half buffer they
// keep queued covers, and Eq. 2's lambda of 2 covers a path up to twice
// as slow; the difference, which looks like a queue, raises no buffer
// estimate (queueLowerBoundLocked).
const carriedRTTMin = 2 * time.Second

// AddBytes takes a sample of the cumulative ingress byte counter of the
// modem interface, on the clock of the diag events. Samples must come in
// strictly increasing time (others are counted and skipped); a counter
// that went down (the datapath was reloaded) restarts the history. Each
// sample also resolves the slot bursts it covers.
func (e *Estimator) AddBytes(t time.Time, totalBytes uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := byteSample{t: t, total: totalBytes}
	if last, ok := e.bytes.last(); ok {
		switch {
		case t.Before(last.t):
			e.skipLocked("bytes_time_backwards")
			return
		case t.Equal(last.t):
			// The counter is cumulative: the next sample carries
			// whatever this one would have added.
			e.skipLocked("bytes_duplicate_time")
			return
		case totalBytes < last.total:
			e.skipLocked("bytes_counter_reset")
			e.bytes.reset()
			e.bw.inRound = false
		}
	}
	e.bytes.push(s)
	e.closeRoundLocked(s)
	e.resolvePendingLocked()
}

// closeRoundLocked ends the current RTT round at s once it lasted one
// smoothed RTT, and starts the next one.
func (e *Estimator) closeRoundLocked(s byteSample) {
	b := &e.bw
	if !b.inRound {
		b.roundStart, b.inRound = s, true
		return
	}
	elapsed := s.t.Sub(b.roundStart.t)
	if b.srtt == 0 || elapsed < b.srtt {
		return
	}
	b.bytesPerSecond = float64(s.total-b.roundStart.total) / elapsed.Seconds()
	standing, peakQueue := 0.0, 0.0
	if b.roundSamples > 0 {
		b.roundQueue = b.roundQueueSum / float64(b.roundSamples)
		standing, peakQueue = b.roundQueueLow, b.roundQueueHigh
	} else {
		// No sample of its own: the round queued what the smoothed
		// RTT says, at its rate.
		b.roundQueue = b.queueAtRate(b.srtt)
	}
	b.roundQueueSum, b.roundSamples, b.roundQueueLow, b.roundQueueHigh = 0, 0, 0, 0
	e.queueLowerBoundLocked(min(standing, b.standing), s.t)
	b.standing = standing
	b.estimateAt = s.t
	b.roundStart = s
	keep := 0
	for keep < len(b.rounds) && s.t.Sub(b.rounds[keep].end) > e.cfg.PeakWindow {
		keep++
	}
	b.rounds = append(b.rounds[keep:], round{end: s.t, bytesPerSecond: b.bytesPerSecond, peakQueue: peakQueue})
}

// queueLowerBoundLocked raises the serving cell's buffer estimate to
// what two rounds in a row kept queued in it. The bytes a cell holds
// queued are a lower bound of its buffer, as a burst is (paper section
// 4.3), and one that loss-based senders reach between handovers: they
// fill the buffer before every loss. Bursts alone come short of it when
// the queue before a handover was small (a Preparation clamp holds it to
// the estimate itself, so the estimate could not grow past its first
// bursts): in the testbed the largest burst of a cell of 150 kB was 65
// to 97 kB in four cells of ten. A round's queue here is the standing
// one, the smallest queue one of its RTT samples waited behind: every
// sample of the round waited at least that long. Their mean is not a
// lower bound: delays beyond the queue (radio retransmissions,
// scheduling gaps) raise it above what the cell held. Two rounds in a
// row, so that one round's slow samples are not taken for a queue.
// mmWave estimates are kept but not used for mmWave targets
// (lookupLocked).
func (e *Estimator) queueLowerBoundLocked(queued float64, at time.Time) {
	// Against a carried RTT_min, a path slower than the previous one
	// looks like a queue it does not hold.
	if queued < 1 || e.serving.RAT == "" || e.bw.minRTTCarried {
		return
	}
	r := e.recordLocked(e.serving)
	if uint64(queued) <= r.BufferBytes {
		return
	}
	r.Updated = at
	// A queue two rounds held is the evidence an overflow's ceiling was
	// made of, and newer: it lifts the ceiling with the estimate.
	if r.CeilingBytes != 0 {
		r.CeilingBytes = max(r.CeilingBytes, uint64(queued))
	}
	e.raiseLocked(r, uint64(queued))
	e.saveLocked(r)
}

// AddRTT takes an RTT sample measured at t and read while Path returned
// path. A sample of an earlier path is dropped (and counted): the serving
// cell changed while it was being read, so it may have been measured on
// the previous cell, and it would count in the new cell's smoothed RTT
// and in the queue of its first round.
func (e *Estimator) AddRTT(path uint64, t time.Time, rtt time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case path != e.path:
		e.skipLocked("rtt_previous_cell")
		return
	case rtt <= 0:
		e.skipLocked("rtt_not_positive")
		return
	case rtt > maxPlausibleRTT:
		e.skipLocked("rtt_implausible")
		return
	}
	b := &e.bw
	if b.srtt == 0 {
		b.srtt = rtt
	} else {
		// RFC 6298 smoothing (alpha 1/8): one delayed sample must not
		// swing the clamp.
		b.srtt += (rtt - b.srtt) / 8
	}
	switch {
	case b.minRTT == 0 || rtt <= b.minRTT:
		b.minRTT, b.minRTTAt, b.minRTTCarried = rtt, t, false
		b.probeStart = time.Time{}
	case t.Sub(b.minRTTAt) > e.cfg.RTTMinWindow:
		if b.probeStart.IsZero() {
			b.probeStart, b.probeMin = t, rtt
		}
		b.probeMin = min(b.probeMin, rtt)
		if t.Sub(b.probeStart) >= max(probeRounds*b.srtt, minProbe) {
			b.minRTT, b.minRTTAt, b.minRTTCarried = b.probeMin, t, false
			b.probeStart = time.Time{}
		}
	}
	// Against the RTT_min this sample may just have lowered.
	q := e.sampleQueueLocked(rtt)
	if b.roundSamples == 0 || q < b.roundQueueLow {
		b.roundQueueLow = q
	}
	b.roundQueueHigh = max(b.roundQueueHigh, q)
	b.roundQueueSum += q
	b.roundSamples++
	b.lastWait, b.lastWaitRate = max(rtt-b.minRTT, 0), 0
	if b.lastWait > 0 {
		b.lastWaitRate = q / b.lastWait.Seconds()
	}
}

// An RTT_min older than Config.RTTMinWindow is measured again by a probe
// rather than replaced by the next sample. The holds keep a queue in the
// cell, half a buffer on sub-6, so once the path's RTT_min expires, every
// sample carries that queue; taken for RTT_min, it raises the
// bandwidth-delay product the holds add their queue to by the queue
// itself, and the queue grows by as much every RTTMinWindow until the
// cell overflows. In an evaluation (m2hod f0bf032, walking seeds 1 to 8,
// docs/results/eval-f0bf032), in 11 of 19 stays of 12 s or more on a
// sub-6 cell the held sender lost its first packet 9.9 to 14.6 s after
// the cell began to serve (2 sooner, 3 later, 3 never), where plain
// CUBIC's first losses spread from 2.0 to 18.2 s, 12 of 18 before 7 s.
// During a probe the holds let through the bandwidth-delay product only
// (probingLocked), which drains their queue and keeps the cell busy; the
// probe's smallest sample becomes RTT_min, the path's base delay whether
// it stayed or rose.
const (
	// probeRounds is how many smoothed RTTs a probe lasts: one for the
	// smaller window to reach the senders and their queue to drain, one
	// for the data they send behind it to come back, one spare.
	probeRounds = 3
	// minProbe is the shortest probe: the daemon reads one sample per
	// flow every 100 ms, and a probe needs a few after the drain.
	minProbe = 300 * time.Millisecond
)

// probingLocked says whether a probe of RTT_min is under way.
func (e *Estimator) probingLocked() bool { return !e.bw.probeStart.IsZero() }

// BandwidthClamp returns the window of Eq. 2, lambda * c_est * RTT_min /
// RTT, where c_est is the bytes a round of one RTT delivers, capped at
// what the path holds without overflowing the serving cell: its
// bandwidth-delay product (the rate times RTT_min) plus the cell's buffer
// estimate. Since c_est is the rate times RTT, the window is lambda times
// the rate times RTT_min.
//
// The rate is the peak delivery rate of the rounds of the last
// Config.PeakWindow on this cell, not the last round's. A clamp that
// follows the last round holds a sender one round behind its own probing:
// a sender that keeps its rate through a loss (BBR) ends each round where
// the clamp let it, and the next clamp is made of that. BBR with m2ho made
// 95% of BBR's throughput that way (docs/results.md).
//
// The cap is not in Eq. 2: the window is at most the product plus half
// the cell's buffer estimate. With lambda = 2 the window converges to
// twice the bandwidth-delay product, so the cell's queue holds one
// product: more than the buffer of a cell whose buffer is about one
// product, as the paper's own sub-6 figures give (1.5 MB against 150
// Mbit/s x 70 ms = 1.3 MB). In the testbed the uncapped clamp kept the
// sub-6 queue at 95% of its buffer and a few seconds later overflowed it
// (109 retransmissions, docs/testbed.md "Results"). A cap of the product
// plus the whole estimate still overflowed, for two reasons. The estimate
// is not always below the buffer: in an evaluation (m2hod 39262e2, its
// per-run results in docs/results/eval-39262e2) 9 of 37 estimates of 150 kB sub-6
// cells ended 9% to 60% above it, and a sender that fills the window
// fills the buffer. And a cell that slows keeps the peak of the rounds
// before for up to Config.PeakWindow, so the window sized on it exceeds
// what the cell carries by what it no longer delivers: in the testbed a
// sub-6 cell whose rate fell by a third within a second dropped the tail
// of such a window (cwnd 218 to 121). Half the estimate spare absorbs an
// estimate up to twice the buffer, or a fall in rate of half a buffer per
// RTT_min, and the cell stays busy: the product is always allowed, and
// half a buffer above it keeps a queue.
//
// Once the last round was cell-bound (its queue above CellBoundShare of
// the buffer estimate, Round.CellBound), the rate is that round's rather
// than the peak: the cell, not a window, set it, and a cell that slowed
// carries no more. Half the buffer lies above the share that marks a
// round cell-bound, so a cell the window keeps busy stays under this
// rule rather than alternating between it and the peak's.
//
// It is not ok until an RTT sample and a full round exist, and when the
// last round ended more than a smoothed RTT plus Config.BandwidthMaxAge
// before now (freshLocked).
func (e *Estimator) BandwidthClamp(now time.Time) (bytes uint64, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := &e.bw
	if !e.freshLocked(now) {
		return 0, false
	}
	peak := e.peakRateLocked(now)
	window := e.cfg.Lambda * peak * b.minRTT.Seconds()
	// The cap keeps to this host's own estimates: the fleet answers, and
	// counts, the lookups of handover targets only.
	buffer, _ := e.lookupLocked(e.serving, false)
	product := e.holdRateLocked(peak, buffer) * b.minRTT.Seconds()
	if e.probingLocked() {
		return e.holdBytes(min(window, product)), true
	}
	window = min(window, product+float64(HoldQueue(buffer)))
	return e.holdBytes(window), true
}

// HoldQueue is the queue a hold lets a sub-6 cell of the given buffer
// estimate keep above its bandwidth-delay product: half the buffer (see
// BandwidthClamp). What a window takes of a cell's buffer beyond it is
// room the cell no longer has for a fall in rate or, after a handover,
// for the data the source forwarded into it.
func HoldQueue(buffer uint64) uint64 { return buffer / 2 }

// peakRateLocked is the peak delivery rate of the rounds of the last
// Config.PeakWindow before now, or the last round's when higher.
func (e *Estimator) peakRateLocked(now time.Time) float64 {
	return max(e.bw.peak(now, e.cfg.PeakWindow), e.bw.bytesPerSecond)
}

// holdRateLocked is the rate the holds size their windows by: the peak
// rate, or the last round's once that round was cell-bound against
// buffer (see BandwidthClamp).
func (e *Estimator) holdRateLocked(peak float64, buffer uint64) float64 {
	if e.cellBoundLocked(buffer) {
		return e.bw.bytesPerSecond
	}
	return peak
}

// holdBytes fits a hold's window between Config.MinClampBytes and
// MaxWindowBytes.
func (e *Estimator) holdBytes(window float64) uint64 {
	if window >= MaxWindowBytes {
		return MaxWindowBytes
	}
	return max(uint64(window), e.cfg.MinClampBytes)
}

// DrainableWindow returns the window that holds the senders on a mmWave
// cell: what the cell delivers in lead (never less than its
// bandwidth-delay product), plus the smallest sub-6 buffer estimate, the
// estimate a mmWave cell is looked up by. lead is the time a predicted
// handover leaves: from the report to the command.
//
// A handover from mmWave to sub-6 moves what the source still holds into
// a buffer a tenth of its own. The Preparation clamp stops the senders
// at the prediction, and the source drains at its rate until the
// execution; what it has not drained by then must fit in the target's
// buffer. So the flight must not exceed the rate times the lead plus that
// buffer. A loss-based sender left alone fills the mmWave buffer: in an
// evaluation (m2hod 34f55dd, docs/results/eval-34f55dd), 10 of 22 mmWave
// to sub-6 handovers with m2ho began with a flight beyond what the source
// drained from the report to the execution, by 97 kB to 1 MB, and each of
// them overflowed the target (40 to 625 packets, six times followed by a
// retransmission timeout); of the 12 within it, two lost more than 10
// packets. Above the product the window keeps a queue, so the cell stays
// busy.
//
// The rate is BandwidthClamp's: the last round's once the round was
// cell-bound, since a cell that slowed drains at its new rate. And once
// the newest RTT sample waited longer than the lead, it is at most the
// rate the cell delivered over that wait: a round lasts a smoothed RTT,
// so under a queue that grows as the cell slows, the last round ended
// before the fall and answers for a cell that no longer exists. A
// queue the lead drains anyway needs no such care, and the rate over a
// wait that short would be at the mercy of the cell's scheduling gaps.
// In an evaluation (m2hod b177332, driving seed 5, handover 5) a mmWave
// cell slowed around its A2 report: at a flight of 453 packets, which
// the hold had sized on the rate before, the sender's smoothed RTT rose
// from 152 ms 200 ms before the report to 410 ms at the execution; the
// source drained a third of the flight by then, the target dropped 234
// packets and the sender timed out. Plain CUBIC, at 133 packets,
// dropped 38. In three announced mmWave to sub-6 handovers m2ho
// overflowed the target by 75 to 234 packets where plain CUBIC lost 0
// to 38.
//
// It is not ok when BandwidthClamp is not.
func (e *Estimator) DrainableWindow(now time.Time, lead time.Duration) (bytes uint64, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := &e.bw
	if !e.freshLocked(now) {
		return 0, false
	}
	buffer, _ := e.lookupLocked(diag.Cell{Band: diag.BandMmWave}, false)
	rate := e.holdRateLocked(e.peakRateLocked(now), buffer)
	if b.lastWait > lead {
		rate = min(rate, b.lastWaitRate)
	}
	if e.probingLocked() {
		return e.holdBytes(rate * b.minRTT.Seconds()), true
	}
	return e.holdBytes(rate*max(lead, b.minRTT).Seconds() + float64(buffer)), true
}

// freshLocked says whether the last round is recent enough to answer:
// ended within Config.BandwidthMaxAge of when the next round, one
// smoothed RTT long, could end. Rounds last a smoothed RTT, so under a
// queue of more than BandwidthMaxAge every round would otherwise go
// stale before the next one closes, and the hold would let go of the
// senders in between: in an evaluation (m2hod a048eea, driving seed 1),
// a mmWave cell at 5 Mbit/s with a 1.0 to 1.5 s RTT held a flight of
// 860 kB for 4 s that way, where its hold allowed 250 kB, and its
// handover to sub-6 lost 411 packets.
func (e *Estimator) freshLocked(now time.Time) bool {
	b := &e.bw
	return !b.estimateAt.IsZero() && b.srtt != 0 && b.minRTT != 0 && now.Sub(b.estimateAt) <= b.srtt+e.cfg.BandwidthMaxAge
}

// Carried is what the serving cell carried recently: the data in flight
// at the peak delivery rate of the last Config.PeakWindow (the rate times
// the smoothed RTT), and the bandwidth-delay product of that rate (the
// rate times RTT_min), with the smoothed and minimum RTTs.
type Carried struct {
	Flight, BDP  uint64
	SRTT, MinRTT time.Duration
}

// Carried returns what the serving cell carried, with the same freshness
// rule as BandwidthClamp.
func (e *Estimator) Carried(now time.Time) (Carried, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.freshLocked(now) {
		return Carried{}, false
	}
	b := &e.bw
	rate := e.peakRateLocked(now)
	return Carried{Flight: uint64(rate * b.srtt.Seconds()), BDP: uint64(rate * b.minRTT.Seconds()), SRTT: b.srtt, MinRTT: b.minRTT}, true
}

// Round is the last complete RTT round on the serving cell.
type Round struct {
	// End is when the round ended; a later round has a later End.
	End time.Time
	// Flight is the bytes the round delivered per smoothed RTT: the data
	// the senders kept in flight, whichever limit (their window or the
	// advertised one) held them.
	Flight uint64
	// Queue is what the round left queued in the cell: the mean of the
	// queues its RTT samples waited behind.
	Queue uint64
	// CellBound says the queue held more than CellBoundShare of the
	// cell's buffer estimate: the cell, not a window, set the round's
	// rate.
	CellBound bool
}

// CellBoundShare is the share of the serving cell's buffer estimate a
// round must leave queued for its rate to be taken as the cell's. A
// quarter of a sub-6 buffer at scale 0.1 (150 kB at 1.9 MB/s) is 20 ms of
// queueing, above what slot scheduling and delayed ACKs add to an RTT
// sample; a window that held the senders below the cell's rate leaves
// next to nothing queued.
const CellBoundShare = 0.25

// LastRound returns the last complete round, with the same freshness rule
// as BandwidthClamp.
func (e *Estimator) LastRound(now time.Time) (Round, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.freshLocked(now) {
		return Round{}, false
	}
	b := &e.bw
	buffer, _ := e.lookupLocked(e.serving, false)
	return Round{
		End:       b.estimateAt,
		Flight:    uint64(b.bytesPerSecond * b.srtt.Seconds()),
		Queue:     uint64(e.lastQueueLocked()),
		CellBound: e.cellBoundLocked(buffer),
	}, true
}

// cellBoundLocked says the last round left more than CellBoundShare of
// the serving cell's buffer estimate, buffer, queued (Round.CellBound).
func (e *Estimator) cellBoundLocked(buffer uint64) bool {
	return e.lastQueueLocked() > CellBoundShare*float64(buffer)
}

// lastQueueLocked is the bytes the last round left queued in the cell:
// the mean of the queues its RTT samples waited behind.
func (e *Estimator) lastQueueLocked() float64 { return e.bw.roundQueue }

// servingRateLocked is the delivery rate in bytes per second seen on cell
// when it serves and its estimate is fresh at the cell's last update, 0
// otherwise: the fleet gets the rate along with the buffer estimate.
func (e *Estimator) servingRateLocked(cell diag.Cell) float64 {
	r, ok := e.cells[cell.Key()]
	if !ok || cell.Key() != e.serving.Key() || !e.freshLocked(r.Updated) {
		return 0
	}
	return e.peakRateLocked(r.Updated)
}
