package emu

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/scenario"
)

var receiverTestFlow = FlowKey{ServerPort: 5201, UEPort: 40000}

// dataSegment is a segment of the test flow with payload bytes at seq.
func dataSegment(seq uint32, payload int) TCPHeader {
	return TCPHeader{Valid: true, Flow: receiverTestFlow, Seq: seq, Flags: tcpACK, Payload: payload}
}

// wantAnswer is what segment should report for one segment.
type wantAnswer struct {
	ack        uint32
	outOfOrder bool
}

func TestReceiverModelSequenceSpace(t *testing.T) {
	const mss = 1000
	nearWrap := uint32(1<<32 - 1500)
	inOrder := wantAnswer{}
	answer := func(ack uint32) wantAnswer { return wantAnswer{ack: ack, outOfOrder: true} }
	tests := []struct {
		name       string
		segments   []TCPHeader
		want       []wantAnswer
		wantRcvNxt uint32
		wantHoles  []seqRange
	}{
		{
			name:       "in order",
			segments:   []TCPHeader{dataSegment(0, mss), dataSegment(1000, mss), dataSegment(2000, mss)},
			want:       []wantAnswer{inOrder, inOrder, inOrder},
			wantRcvNxt: 3000,
		},
		{
			name:       "first segment of a flow sets its start",
			segments:   []TCPHeader{dataSegment(50000, mss), dataSegment(51000, mss)},
			want:       []wantAnswer{inOrder, inOrder},
			wantRcvNxt: 52000,
		},
		{
			name: "syn sets the start before any data",
			segments: []TCPHeader{
				{Valid: true, Flow: receiverTestFlow, Seq: 999, Flags: tcpSYN},
				dataSegment(2000, mss), dataSegment(1000, mss),
			},
			want:       []wantAnswer{inOrder, answer(1000), inOrder},
			wantRcvNxt: 3000,
		},
		{
			name:       "hole then fill",
			segments:   []TCPHeader{dataSegment(0, mss), dataSegment(2000, mss), dataSegment(3000, mss), dataSegment(1000, mss)},
			want:       []wantAnswer{inOrder, answer(1000), answer(1000), inOrder},
			wantRcvNxt: 4000,
		},
		{
			name: "several holes merge",
			segments: []TCPHeader{
				dataSegment(0, mss), dataSegment(2000, mss), dataSegment(4000, mss), dataSegment(6000, mss),
				dataSegment(3000, mss), dataSegment(5000, mss),
			},
			want:       []wantAnswer{inOrder, answer(1000), answer(1000), answer(1000), answer(1000), answer(1000)},
			wantRcvNxt: 1000,
			wantHoles:  []seqRange{{2000, 7000}},
		},
		{
			name:       "wholly old retransmission",
			segments:   []TCPHeader{dataSegment(0, mss), dataSegment(1000, mss), dataSegment(0, mss), dataSegment(500, 500)},
			want:       []wantAnswer{inOrder, inOrder, answer(2000), answer(2000)},
			wantRcvNxt: 2000,
		},
		{
			name: "partial fill leaves data above",
			segments: []TCPHeader{
				dataSegment(0, mss), dataSegment(2000, mss), dataSegment(4000, mss),
				dataSegment(1000, mss), dataSegment(5000, mss),
			},
			want:       []wantAnswer{inOrder, answer(1000), answer(1000), inOrder, answer(3000)},
			wantRcvNxt: 3000,
			wantHoles:  []seqRange{{4000, 6000}},
		},
		{
			name:       "overlap with received data advances",
			segments:   []TCPHeader{dataSegment(0, mss), dataSegment(500, mss)},
			want:       []wantAnswer{inOrder, inOrder},
			wantRcvNxt: 1500,
		},
		{
			name: "sequence wrap-around",
			segments: []TCPHeader{
				dataSegment(nearWrap, mss), dataSegment(nearWrap+2000, mss), dataSegment(nearWrap+3000, mss),
				dataSegment(nearWrap+1000, mss),
			},
			// nearWrap+1000 is 4294966796; the segments above it end past 2^32.
			want:       []wantAnswer{inOrder, answer(nearWrap + 1000), answer(nearWrap + 1000), inOrder},
			wantRcvNxt: nearWrap + 4000,
		},
		{
			name: "non-data segments are not answered",
			segments: []TCPHeader{
				dataSegment(0, mss),
				{Valid: true, Flow: receiverTestFlow, Seq: 1000, Flags: tcpACK},
				{Valid: true, Flow: receiverTestFlow, Seq: 1000, Flags: tcpACK | tcpFIN},
				{Valid: false, Flow: receiverTestFlow, Seq: 5000, Payload: mss},
				{Valid: true, Flow: receiverTestFlow, Seq: 77, Flags: tcpSYN | tcpACK},
			},
			want:       []wantAnswer{inOrder, inOrder, inOrder, inOrder, inOrder},
			wantRcvNxt: 1000,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Len(t, tt.want, len(tt.segments))
			m := newReceiverModel()
			for i, seg := range tt.segments {
				ack, outOfOrder := m.segment(seg, 0)
				assert.Equal(t, tt.want[i], wantAnswer{ack: ack, outOfOrder: outOfOrder}, "segment %d (seq %d)", i, seg.Seq)
			}
			f := m.flows[receiverTestFlow]
			require.NotNil(t, f)
			assert.Equal(t, tt.wantRcvNxt, f.rcvNxt)
			if len(tt.wantHoles) == 0 {
				assert.Empty(t, f.ooo)
			} else {
				assert.Equal(t, tt.wantHoles, f.ooo)
			}
		})
	}
}

// receiverLink is a Link whose cells have the given one-way delays, fed
// segments directly as its scheduler hands them to the UE.
func receiverLink(t *testing.T, delay time.Duration) *Link {
	t.Helper()
	r := newLinkRun(t, &scenario.Scenario{Name: "rx", Duration: time.Second, Cells: twoCells(12, 1<<20, delay), InitialCell: "a"})
	return r.link
}

// handToUE runs a segment through the receiver model as Link.hand does.
func handToUE(l *Link, tcp TCPHeader, at time.Duration) {
	l.receive(tcp, at)
}

func TestReceiverAckScheduling(t *testing.T) {
	const mss = 1448
	us := time.Microsecond
	// warmUp delivers n in-order segments from 0, one per 0.5 ms.
	warmUp := func(l *Link, n int) {
		for i := range n {
			handToUE(l, dataSegment(uint32(i*mss), mss), time.Duration(i)*500*us)
		}
	}
	// above sends count segments above a one-segment hole after the first
	// n, every gap apart from at.
	above := func(l *Link, n, count int, at, gap time.Duration) {
		for i := range count {
			handToUE(l, dataSegment(uint32((n+1+i)*mss), mss), at+time.Duration(i)*gap)
		}
	}
	const t0 = 100 * ms
	tests := []struct {
		name    string
		delay   time.Duration // each way
		run     func(l *Link)
		wantAck uint32
		// wantCause is the cause of the first episode's duplicates
		// (loss unless set).
		wantCause string
		wantAt    []time.Duration
	}{
		{
			// 20 segments: quickack for the first 16, then one ACK per
			// two segments, so none is pending. Three duplicates at once,
			// then one compressed ACK 1 ms later for the other seven.
			name: "burst after an even count", delay: 35 * ms,
			run:     func(l *Link) { warmUp(l, 20); above(l, 20, 10, t0, 0) },
			wantAck: 20 * mss,
			wantAt:  []time.Duration{t0, t0, t0, t0 + ms},
		},
		{
			// The ACK for the 19th segment is delayed: the first
			// out-of-order ACK acknowledges it, is not a duplicate and
			// is not one of the three immediate duplicates.
			name: "burst after a delayed ack", delay: 35 * ms,
			run:     func(l *Link) { warmUp(l, 19); above(l, 19, 10, t0, 0) },
			wantAck: 19 * mss,
			wantAt:  []time.Duration{t0, t0, t0, t0 + ms},
		},
		{
			// A retransmission narrows the hole 20-21 to 21: its ACK is
			// the first of the three immediate ones for 21.
			name: "partial fill", delay: 35 * ms,
			run: func(l *Link) {
				warmUp(l, 20)
				for i := 22; i < 26; i++ {
					handToUE(l, dataSegment(uint32(i*mss), mss), t0)
				}
				handToUE(l, dataSegment(20*mss, mss), t0+10*ms)
				for i := 26; i < 31; i++ {
					handToUE(l, dataSegment(uint32(i*mss), mss), t0+20*ms)
				}
			},
			wantAt: []time.Duration{t0, t0, t0, t0 + ms, t0 + 20*ms, t0 + 20*ms, t0 + 21*ms},
		},
		{
			// One segment per 0.5 ms slot: the timer restarts with the
			// first segment after it fired, so a duplicate every 1.5 ms.
			name: "spread segments", delay: 35 * ms,
			run:     func(l *Link) { warmUp(l, 20); above(l, 20, 10, t0, 500*us) },
			wantAck: 20 * mss,
			wantAt:  []time.Duration{t0, t0 + 500*us, t0 + ms, t0 + 2500*us, t0 + 4*ms, t0 + 5500*us},
		},
		{
			// 44 segments share a compressed ACK; the 45th sends it at
			// once and the next starts a new timer.
			name: "compression bound", delay: 35 * ms,
			run:     func(l *Link) { warmUp(l, 20); above(l, 20, 50, t0, 0) },
			wantAck: 20 * mss,
			wantAt:  []time.Duration{t0, t0, t0, t0, t0 + ms},
		},
		{
			// 5% of a 10 ms RTT: the timer is 500 us.
			name: "short rtt shortens the timer", delay: 5 * ms,
			run:     func(l *Link) { warmUp(l, 20); above(l, 20, 5, t0, 0) },
			wantAck: 20 * mss,
			wantAt:  []time.Duration{t0, t0, t0, t0 + 500*us},
		},
		{
			// Every segment of a fresh flow is acknowledged at once.
			name: "quickack at the start", delay: 35 * ms,
			run:     func(l *Link) { warmUp(l, 2); above(l, 2, 5, t0, 0) },
			wantAck: 2 * mss,
			wantAt:  []time.Duration{t0, t0, t0, t0, t0},
		},
		{
			// Old data puts the receiver in quickack mode: no compression
			// for the next 15 segments.
			name: "quickack after old data", delay: 35 * ms,
			run: func(l *Link) {
				warmUp(l, 20)
				handToUE(l, dataSegment(0, mss), t0)
				above(l, 20, 6, t0+ms, 0)
			},
			wantAck: 20 * mss,
			wantAt:  []time.Duration{t0, t0 + ms, t0 + ms, t0 + ms, t0 + ms, t0 + ms, t0 + ms},
		},
		{
			// The segment closing the hole comes at the pace of the ones
			// before it, 3.5 ms, before the pending compressed ACK's timer
			// (4 ms): the ACK for the new data replaces it.
			name: "closing the hole cancels a compressed ack", delay: 35 * ms,
			run: func(l *Link) {
				warmUp(l, 20)
				above(l, 20, 7, t0, 500*us)
				handToUE(l, dataSegment(20*mss, mss), t0+3500*us)
				// rcvNxt is 28 segments; 29 and 30 are above a new hole.
				for i := 29; i < 31; i++ {
					handToUE(l, dataSegment(uint32(i*mss), mss), t0+20*ms)
				}
			},
			wantAt: []time.Duration{t0, t0 + 500*us, t0 + ms, t0 + 2500*us, t0 + 20*ms, t0 + 20*ms},
		},
		{
			// The same, but the retransmission closing the hole comes
			// after a pause (a tail loss, a sender waiting for the RTT),
			// at 10 ms: the timer fired at 4 ms and Linux sent the
			// compressed ACK, so it stays, whatever the pace of the
			// segments before.
			name: "late retransmission closing the hole after the timer", delay: 35 * ms,
			run: func(l *Link) {
				warmUp(l, 20)
				above(l, 20, 7, t0, 500*us)
				handToUE(l, dataSegment(20*mss, mss), t0+10*ms)
				for i := 29; i < 31; i++ {
					handToUE(l, dataSegment(uint32(i*mss), mss), t0+20*ms)
				}
			},
			wantAt: []time.Duration{t0, t0 + 500*us, t0 + ms, t0 + 2500*us, t0 + 4*ms, t0 + 20*ms, t0 + 20*ms},
		},
		{
			// The segment closing the hole is a packet a context release
			// held back, delivered at 10 ms: the timer
			// fired before, and its ACK stays.
			name: "held packet closing the hole after the timer", delay: 35 * ms,
			run: func(l *Link) {
				l.held[receiverTestFlow] = []*HeldPacket{{Flow: receiverTestFlow, Seq: 20 * mss, Len: mss, DeliveredAt: t0 + 10*ms}}
				warmUp(l, 20)
				above(l, 20, 7, t0, 500*us)
				handToUE(l, dataSegment(20*mss, mss), t0+10*ms)
				for i := 29; i < 31; i++ {
					handToUE(l, dataSegment(uint32(i*mss), mss), t0+20*ms)
				}
			},
			wantCause: DupAckReorder,
			wantAt:    []time.Duration{t0, t0 + 500*us, t0 + ms, t0 + 2500*us, t0 + 4*ms, t0 + 20*ms, t0 + 20*ms},
		},
		{
			// Filling the hole acknowledges new data; later segments above
			// the next hole start a new series of three.
			name: "new hole after a fill", delay: 35 * ms,
			run: func(l *Link) {
				warmUp(l, 20)
				above(l, 20, 4, t0, 0)
				handToUE(l, dataSegment(20*mss, mss), t0+10*ms)
				// rcvNxt is 25 segments; 26 onwards is above a new hole.
				for i := range 4 {
					handToUE(l, dataSegment(uint32((26+i)*mss), mss), t0+20*ms)
				}
			},
			wantAt: []time.Duration{t0, t0, t0, t0 + ms, t0 + 20*ms, t0 + 20*ms, t0 + 20*ms, t0 + 21*ms},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := receiverLink(t, tt.delay)
			tt.run(l)
			var at []time.Duration
			generated := l.Truth().GeneratedDupAcks
			for _, d := range generated {
				at = append(at, d.At)
				if tt.wantAck != 0 {
					assert.Equal(t, tt.wantAck, d.Ack)
				}
				if tt.wantCause == "" || d.Ack != generated[0].Ack {
					assert.Equal(t, DupAckLoss, d.Cause)
				} else {
					assert.Equal(t, tt.wantCause, d.Cause)
				}
				// No handover of the ground truth holds the packets.
				assert.Equal(t, -1, d.Handover)
			}
			assert.Equal(t, tt.wantAt, at)
		})
	}
}

// TestReceiverGeneratedMatchesUplink runs a context-release handover and
// a loss after it with a UE that acknowledges every segment at once, as
// Linux does for the first segments of a flow, and feeds its ACKs to the
// uplink unsuppressed: the generated duplicate ACKs must be the ones the
// uplink sees, with the same causes.
func TestReceiverGeneratedMatchesUplink(t *testing.T) {
	const mss = 1448
	const delay = 5 * ms
	sc := handoverScenario(&scenario.ContextRelease{HeldPackets: 3}, 0)
	sc.Cells = twoCells(12, 1<<20, delay)
	r := newLinkRun(t, sc)
	// Ten segments queued just before the command (470 ms): 1-3 held back
	// until after the interruption, so 4-9 each repeat ACK 1. After it,
	// segment 10 is lost and 11-14 each repeat ACK 10.
	for i := range 10 {
		r.arrive(t, uint32(i*mss), 464*ms)
	}
	for i := 11; i < 15; i++ {
		r.arrive(t, uint32(i*mss), 700*ms)
	}
	r.link.Advance(2 * time.Second)
	require.Len(t, r.deliveries, 14)

	// The UE's acknowledgement number after each delivery, from the set
	// of segments it has.
	have := map[uint32]bool{}
	next := uint32(0)
	for _, d := range r.deliveries {
		have[d.p.TCP.Seq/mss] = true
		for have[next] {
			next++
		}
		frame := tcpFrame(t, 1, next*mss, 0, false)
		_, _, up := ParseFrame(frame, false)
		up.Flow = d.p.TCP.Flow
		// The emulator reads the ACK as the UE sends it; the uplink
		// delay comes after.
		r.link.UplinkRelease(d.at, up)
	}

	truth := r.link.Truth()
	type dup struct {
		ack      uint32
		cause    string
		handover int
	}
	collect := func(ds []DupAck) []dup {
		var out []dup
		for _, d := range ds {
			out = append(out, dup{d.Ack / mss, d.Cause, d.Handover})
		}
		return out
	}
	reorder := dup{1, DupAckReorder, 0}
	loss := dup{10, DupAckLoss, -1}
	want := []dup{reorder, reorder, reorder, reorder, reorder, reorder, loss, loss, loss, loss}
	assert.Equal(t, want, collect(truth.GeneratedDupAcks), "generated")
	assert.Equal(t, want, collect(truth.DupAcks), "seen on the uplink")
	for i, g := range truth.GeneratedDupAcks {
		assert.Equal(t, g.At, truth.DupAcks[i].At, "dupACK %d", i)
	}
	assert.Equal(t, []diag.Type{diag.TypeMeasReport, diag.TypeHOCommand, diag.TypeHOComplete}, r.types())
}

// BenchmarkReceiverModel is the model's cost per segment the emulator
// hands to the UE, in order and above a hole (one segment per 10 us).
func BenchmarkReceiverModel(b *testing.B) {
	const mss = 1448
	for _, bench := range []struct {
		name  string
		first uint32 // the first segment's number; above 0 leaves a hole
	}{
		{name: "in order", first: 0},
		{name: "above a hole", first: 1},
	} {
		b.Run(bench.name, func(b *testing.B) {
			l := &Link{receiver: newReceiverModel(), serving: &cell{spec: scenario.Cell{DelayDown: 35 * ms, DelayUp: 35 * ms}}}
			handToUE(l, dataSegment(0, mss), 0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				seq := (bench.first + uint32(i) + 1) * mss
				handToUE(l, dataSegment(seq, mss), time.Duration(i)*10*time.Microsecond)
			}
		})
	}
}
