package emu

import (
	"slices"
	"time"
)

// When a Linux receiver (kernel 6.x, SACK on, default sysctls) sends the
// ACKs that repeat rcv_nxt: values of net/ipv4/tcp_input.c
// (__tcp_ack_snd_check, tcp_enter_quickack_mode) and of the net.ipv4
// sysctls tcp_comp_sack_nr and tcp_comp_sack_delay_ns.
const (
	// maxQuickAcks (TCP_MAX_QUICKACKS): after the first data segment and
	// after old data, the receiver acknowledges this many segments at once.
	maxQuickAcks = 16
	// immediateOutOfOrderAcks (TCP_FASTRETRANS_THRESH): out-of-order
	// segments acknowledged at once per rcv_nxt before compression starts,
	// so that the sender still sees three duplicates.
	immediateOutOfOrderAcks = 3
	// maxCompressedAcks (tcp_comp_sack_nr): at most this many out-of-order
	// segments share one ACK.
	maxCompressedAcks = 44
	// maxCompressDelay (tcp_comp_sack_delay_ns): the compressed ACK leaves
	// 5% of the RTT after the first segment it covers, at most this late.
	maxCompressDelay = time.Millisecond
)

// receiverModel predicts the duplicate ACKs the UE's TCP stack sends,
// before anything on the UE (m2ho's duplicate-ACK suppression) can drop
// them. The uplink only shows the ACKs that survived the UE, so this
// model is the ground truth of duplicate-ACK handling: generated minus
// seen on the uplink is what the UE suppressed.
//
// A segment above a hole, or wholly below the next expected byte, is
// answered with rcv_nxt (RFC 5681 section 4.2; tcp_data_queue). Linux
// sends the first three such ACKs per rcv_nxt at once and compresses the
// rest into one ACK per timer period (or per 44 segments), except in
// quickack mode where every segment is acknowledged at once. Such an ACK
// is a duplicate when the previous ACK carried the same number, which is
// not the case when that one was still delayed. The model sees segments,
// not the receiving application: window updates, and ACKs that depend on
// when the application reads, are outside it; the evaluation measures the
// resulting error on runs where nothing suppresses duplicate ACKs.
type receiverModel struct {
	flows map[FlowKey]*receiverFlow
	// cancelled are the compressed ACKs recorded in advance whose hole
	// closed while their timer was pending; the Link decides which the
	// ACK of the closing segment replaced.
	cancelled []pendingCancel
}

// pendingCancel is a compressed ACK, recorded at record in the generated
// list to leave at timerAt, whose hole closed at closedAt, when the UE got
// the segment that filled it.
type pendingCancel struct {
	record   int
	timerAt  time.Duration
	closedAt time.Duration
}

// receiverFlow is one connection's receive sequence space and ACK state.
type receiverFlow struct {
	// rcvNxt is the next byte expected in order.
	rcvNxt uint32
	// ooo holds the byte ranges received above rcvNxt, sorted and
	// disjoint.
	ooo []seqRange
	// rcvWup is the acknowledgement number of the last ACK sent.
	rcvWup uint32
	// mss is the largest payload seen, the receiver's segment size
	// estimate: more than one of them unacknowledged forces an ACK.
	mss uint32
	// quickAcks counts the segments still acknowledged at once; quick is
	// set when the latest segment was one of them.
	quickAcks int
	quick     bool

	// ACK compression: immediateSent counts the ACKs sent at once on the
	// out-of-order path for compressRcvNxt; compressed counts the
	// segments waiting for the ACK the compression timer sends at
	// timerAt, recorded at timerRecord in the generated list (-1 when
	// beyond its bound).
	compressRcvNxt uint32
	immediateSent  int
	compressed     int
	timerAt        time.Duration
	timerRecord    int
}

type seqRange struct{ start, end uint32 }

// seqBefore compares sequence numbers modulo 2^32.
func seqBefore(a, b uint32) bool { return int32(a-b) < 0 }

func newReceiverModel() receiverModel {
	return receiverModel{flows: map[FlowKey]*receiverFlow{}}
}

// receive runs a segment the UE gets at at through the receiver model and
// records the duplicate ACK it answers with, if any. With the receiver's
// ACKs tapped, those are the record and the model stays out.
func (l *Link) receive(tcp TCPHeader, at time.Duration) {
	if l.tapped {
		return
	}
	ack, outOfOrder := l.receiver.segment(tcp, at)
	l.resolveCancelled()
	if outOfOrder {
		l.recordGenerated(tcp, ack, at)
	}
}

// segment takes a segment the UE receives at at and reports whether it
// leaves rcv_nxt where it was (outOfOrder: above a hole, or old data), so
// that the receiver answers it with ack, the unchanged rcv_nxt;
// recordGenerated then decides when that ACK leaves and whether it is a
// duplicate. The server's SYN (or SYN-ACK) fixes where a flow's data
// starts; without one, the first data segment does.
func (m *receiverModel) segment(tcp TCPHeader, at time.Duration) (ack uint32, outOfOrder bool) {
	if !tcp.Valid {
		return 0, false
	}
	f, known := m.flows[tcp.Flow]
	if tcp.Flags&tcpSYN != 0 {
		if !known {
			next := tcp.Seq + 1
			m.flows[tcp.Flow] = &receiverFlow{rcvNxt: next, rcvWup: next, quickAcks: maxQuickAcks}
		}
		return 0, false
	}
	if tcp.Payload <= 0 {
		return 0, false
	}
	start, end := tcp.Seq, tcp.Seq+uint32(tcp.Payload)
	if !known {
		// Its own ACK is the first of the quickack mode data starts.
		m.flows[tcp.Flow] = &receiverFlow{rcvNxt: end, rcvWup: end, mss: uint32(tcp.Payload), quickAcks: maxQuickAcks - 1}
		return 0, false
	}
	f.mss = max(f.mss, uint32(tcp.Payload))
	f.quick = f.quickAcks > 0
	if f.quick {
		f.quickAcks--
	}
	switch {
	case !seqBefore(f.rcvNxt, end):
		// Wholly old: a retransmission the receiver already has. Linux
		// answers at once and enters quickack mode.
		f.quick, f.quickAcks = true, maxQuickAcks-1
		return f.rcvNxt, true
	case seqBefore(f.rcvNxt, start):
		f.insert(seqRange{start, end})
		return f.rcvNxt, true
	}
	hadHole := len(f.ooo) > 0
	f.rcvNxt = end
	f.absorb()
	if f.acknowledgeInOrder(hadHole) && f.compressed > 0 {
		// The ACK cancels the pending compressed one, unless its timer
		// fired first: the Link decides which, from when this segment
		// came.
		m.cancelled = append(m.cancelled, pendingCancel{record: f.timerRecord, timerAt: f.timerAt, closedAt: at})
		f.compressed = 0
	}
	return 0, false
}

// acknowledgeInOrder updates the ACK state after a segment advanced
// rcvNxt and reports whether an ACK left at once. It does in quickack
// mode, when the segment closed the last hole, or when more than one
// segment is unacknowledged; otherwise it is delayed (the delayed-ACK
// timer, 40 ms or more, is taken not to fire between the segments of a
// bulk transfer). A segment that only narrows a hole makes the receiver
// queue the data above it unread, so the window test that sends ACKs at
// once fails and its ACK takes the out-of-order path as the first of the
// three immediate ones.
func (f *receiverFlow) acknowledgeInOrder(hadHole bool) (sent bool) {
	switch {
	case f.quick || (hadHole && len(f.ooo) == 0):
	case hadHole:
		f.compressRcvNxt, f.immediateSent = f.rcvNxt, 1
	case f.rcvNxt-f.rcvWup <= f.mss:
		return false
	}
	f.rcvWup = f.rcvNxt
	return true
}

// insert adds an out-of-order range, merging it with the ranges it
// touches, in place: segments above a hole mostly extend its last range.
func (f *receiverFlow) insert(r seqRange) {
	i := 0
	for i < len(f.ooo) && seqBefore(f.ooo[i].end, r.start) {
		i++
	}
	j := i
	for j < len(f.ooo) && !seqBefore(r.end, f.ooo[j].start) {
		if seqBefore(f.ooo[j].start, r.start) {
			r.start = f.ooo[j].start
		}
		if seqBefore(r.end, f.ooo[j].end) {
			r.end = f.ooo[j].end
		}
		j++
	}
	if i == j {
		f.ooo = slices.Insert(f.ooo, i, r)
		return
	}
	f.ooo[i] = r
	f.ooo = slices.Delete(f.ooo, i+1, j)
}

// absorb moves rcvNxt over the out-of-order ranges it now reaches.
func (f *receiverFlow) absorb() {
	n := 0
	for n < len(f.ooo) && !seqBefore(f.rcvNxt, f.ooo[n].start) {
		if seqBefore(f.rcvNxt, f.ooo[n].end) {
			f.rcvNxt = f.ooo[n].end
		}
		n++
	}
	f.ooo = slices.Delete(f.ooo, 0, n)
}

// recordGenerated schedules the ACK (with ack, the unchanged rcv_nxt) the
// UE answers an out-of-order segment it got at at with, as Linux does, and
// records it when it is a duplicate, classified like the ones the uplink
// shows. When the previous in-order segment's ACK was still delayed, this
// one acknowledges it: it is new, leaves at once and is not one of the
// three immediate duplicates, which follow it (as the testbed's captures
// of the UE show).
func (l *Link) recordGenerated(tcp TCPHeader, ack uint32, at time.Duration) {
	f := l.receiver.flows[tcp.Flow]
	if f.compressed > 0 && at > f.timerAt {
		// The compression timer fired in between and sent its ACK.
		f.compressed = 0
	}
	duplicate := ack == f.rcvWup
	f.rcvWup = ack
	if duplicate && !f.quick && f.compressed < maxCompressedAcks {
		if ack != f.compressRcvNxt {
			f.compressRcvNxt, f.immediateSent = ack, 0
		}
		if f.immediateSent >= immediateOutOfOrderAcks {
			f.compressed++
			if f.compressed == 1 {
				f.timerAt = at + l.compressDelay()
				f.timerRecord = l.appendGenerated(tcp.Flow, ack, f.timerAt)
			}
			return
		}
		f.immediateSent++
	}
	// The ACK leaves now.
	if f.compressed > 0 {
		// It takes the place of the compressed ACK the timer would have
		// sent.
		f.compressed = 0
		if f.timerRecord >= 0 {
			l.truth.GeneratedDupAcks[f.timerRecord] = l.dupAckCause(tcp.Flow, ack, at)
		}
		return
	}
	if duplicate {
		l.appendGenerated(tcp.Flow, ack, at)
	}
}

// resolveCancelled takes out of the generated list the compressed ACKs
// whose hole closed before their timer fired: the ACK of the closing
// segment (a retransmission, or a packet a context release held back)
// left instead. One whose timer fired first was sent and stays.
func (l *Link) resolveCancelled() {
	for _, c := range l.receiver.cancelled {
		if c.record >= 0 && c.closedAt <= c.timerAt {
			l.removeGenerated(c.record)
		}
	}
	l.receiver.cancelled = l.receiver.cancelled[:0]
}

// removeGenerated deletes entry i of the generated list, keeping the
// indices the model holds into it valid.
func (l *Link) removeGenerated(i int) {
	l.truth.GeneratedDupAcks = slices.Delete(l.truth.GeneratedDupAcks, i, i+1)
	for _, f := range l.receiver.flows {
		switch {
		case f.timerRecord == i:
			f.timerRecord = -1
		case f.timerRecord > i:
			f.timerRecord--
		}
	}
	for j := range l.receiver.cancelled {
		if l.receiver.cancelled[j].record > i {
			l.receiver.cancelled[j].record--
		}
	}
}

// appendGenerated records a duplicate ACK the UE sends at at and returns
// its index, or -1 when the list is full.
func (l *Link) appendGenerated(flow FlowKey, ack uint32, at time.Duration) int {
	if len(l.truth.GeneratedDupAcks) >= MaxDupAcksRecorded {
		l.truth.GeneratedDupAcksNotRecorded++
		return -1
	}
	l.truth.GeneratedDupAcks = append(l.truth.GeneratedDupAcks, l.dupAckCause(flow, ack, at))
	return len(l.truth.GeneratedDupAcks) - 1
}

// TapAcks makes the receiver's own ACKs, read on the LAN side of the UE
// before anything on it could drop them (TappedAck), the record of the
// duplicate ACKs generated, in place of the receiver model.
func (l *Link) TapAcks() {
	l.tapped = true
	l.truth.GeneratedFrom = GeneratedFromLANTap
}

// TappedAck records an ACK the receiver sent at at, read before the UE's
// datapath, when it is a pure duplicate.
func (l *Link) TappedAck(at time.Duration, tcp TCPHeader) {
	if tcp.Valid && pureDuplicate(l.lastTapped, tcp) {
		l.appendGenerated(tcp.Flow, tcp.Ack, at)
	}
}

// compressDelay is the ACK compression timer: 5% of the UE's RTT
// estimate, at most maxCompressDelay. The UE measures its RTT on the
// handshake, without queueing: the serving cell's two one-way delays.
func (l *Link) compressDelay() time.Duration {
	rtt := l.serving.spec.DelayDown + l.serving.spec.DelayUp
	return min(maxCompressDelay, rtt/20)
}
