package datapath

import (
	"context"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sackFlow opens a flow on d, framed as f, whose handshake agreed on a
// window scale of 7 both ways, timestamps and SACK.
func sackFlow(t *testing.T, d *Datapath, f framing) segment {
	t.Helper()
	s := freshPorts(segment{ipv6: f.ipv6, ethernet: f.ethernet, timestamps: true, tsval: 1, sack: true})
	handshake(t, d, s, 7, 7)
	return s
}

// peerData is an ingress data segment of flow s at byte offset off.
func peerData(s segment, off uint32, length int) segment {
	s.egress, s.syn, s.ackFlag = false, false, true
	s.seq, s.ack, s.window, s.payload = peerISN+1+off, hostISN+1, 500, length
	s.mss, s.wscale = 0, -1
	return s
}

// ackOf is the host's pure ACK of flow s acknowledging off bytes.
func ackOf(s segment, off uint32) segment {
	a := hostACK(s, 1000, 0)
	a.ack = peerISN + 1 + off
	return a
}

func verdictOf(t *testing.T, d *Datapath, s segment, egress bool) int32 {
	t.Helper()
	frame, _ := s.build(t)
	if egress {
		v, _ := d.egress(t, frame)
		return v
	}
	v, _ := d.ingress(t, frame)
	return v
}

func TestDupACKSuppression(t *testing.T) {
	for _, f := range framings[:4] {
		t.Run(f.name, func(t *testing.T) {
			d := datapathFor(t, f)
			s := sackFlow(t, d, f)
			// before the handover: 0..1000 arrives, then 2000..3000 (a hole)
			verdictOf(t, d, peerData(s, 0, 1000), false)
			verdictOf(t, d, peerData(s, 2000, 1000), false)
			assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true))

			epoch, err := d.StartSuppression(time.Now().Add(time.Minute))
			require.NoError(t, err)
			assert.Equal(t, uint32(1), epoch)

			// the first packet in the epoch snapshots highest seq 3000
			steps := []struct {
				name   string
				seg    segment
				egress bool
				want   int32
			}{
				{"duplicate ACK dropped", ackOf(s, 1000), true, verdictDrop},
				{"another duplicate dropped", ackOf(s, 1000), true, verdictDrop},
				// its SACK blocks would let the sender mark the hole lost
				{"window update of the same ACK dropped", func() segment { a := ackOf(s, 1000); a.window = 4000; return a }(), true, verdictDrop},
				{"data after the handover", peerData(s, 3000, 1000), false, verdictPass},
				{"duplicate of it still dropped", ackOf(s, 1000), true, verdictDrop},
				{"ACK carrying data passes", func() segment { a := ackOf(s, 1000); a.payload = 10; return a }(), true, verdictPass},
				{"FIN passes", func() segment { a := ackOf(s, 1000); a.fin = true; return a }(), true, verdictPass},
				{"new ACK below the snapshot passes", ackOf(s, 1500), true, verdictPass},
				{"its duplicate is dropped", ackOf(s, 1500), true, verdictDrop},
				// the hole filled: the host acknowledges the data after
				// the handover too
				{"ACK past the snapshot releases", ackOf(s, 4000), true, verdictPass},
				{"released flow's duplicates pass", ackOf(s, 4000), true, verdictPass},
			}
			for _, step := range steps {
				assert.Equal(t, step.want, verdictOf(t, d, step.seg, step.egress), step.name)
				if step.name == "its duplicate is dropped" {
					pending, err := d.SuppressionPending()
					require.NoError(t, err)
					assert.Equal(t, 1, pending)
				}
			}
			pending, err := d.SuppressionPending()
			require.NoError(t, err)
			assert.Zero(t, pending)
			c, err := d.Counters()
			require.NoError(t, err)
			assert.Equal(t, uint64(5), c[m2hoCounterIdCNT_DUPACK_SUPPRESSED])
			assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_FLOW_RELEASED])

			flows, err := d.Flows()
			require.NoError(t, err)
			require.Len(t, flows, 1)
			assert.Equal(t, epoch, flows[0].Epoch)
			assert.Equal(t, uint32(peerISN+1+3000), flows[0].SnapshotRxSeq)
			assert.Equal(t, uint32(peerISN+1+4000), flows[0].HighestRxSeq)
			assert.True(t, flows[0].Released)
			assert.Equal(t, uint64(3000), flows[0].RxBytes)
		})
	}
}

// TestDroppedDupACKsAreNotStamped checks that a suppressed duplicate ACK
// takes no TSval stamp: the peer never sees it, so its TSval is never
// echoed, and four such stamps would leave the ACKs that do leave
// unstamped, with no RTT sample while the flow recovers from a handover.
func TestDroppedDupACKsAreNotStamped(t *testing.T) {
	d := loadDetached(t, true, 0)
	s := freshPorts(segment{timestamps: true, sack: true})
	handshake(t, d, s, 7, 7)
	withTimestamps := func(seg segment, tsval, tsecr uint32) segment {
		seg.tsval, seg.tsecr = tsval, tsecr
		return seg
	}
	// a hole at 1000 before the handover
	verdictOf(t, d, withTimestamps(peerData(s, 0, 1000), 10, 1), false)
	verdictOf(t, d, withTimestamps(peerData(s, 2000, 1000), 11, 1), false)
	require.Equal(t, int32(verdictPass), verdictOf(t, d, withTimestamps(ackOf(s, 1000), 50, 11), true))
	verdictOf(t, d, withTimestamps(peerData(s, 3000, 100), 12, 50), false) // frees every stamp
	setSmoothedRTT(t, d, s, 40*time.Millisecond)

	_, err := d.StartSuppression(time.Now().Add(time.Minute))
	require.NoError(t, err)
	before, err := d.Counters()
	require.NoError(t, err)
	for tsval := uint32(51); tsval <= 54; tsval++ {
		require.Equal(t, int32(verdictDrop), verdictOf(t, d, withTimestamps(ackOf(s, 1000), tsval, 12), true))
	}
	// The ACK that leaves repeats the last dropped TSval, as it does
	// within one tick of the host's clock: it must be stamped itself.
	require.Equal(t, int32(verdictPass), verdictOf(t, d, withTimestamps(ackOf(s, 1500), 54, 12), true))
	verdictOf(t, d, withTimestamps(peerData(s, 3100, 100), 13, 54), false)

	after, err := d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(4), after[m2hoCounterIdCNT_DUPACK_SUPPRESSED]-before[m2hoCounterIdCNT_DUPACK_SUPPRESSED])
	assert.Equal(t, uint64(1), after[m2hoCounterIdCNT_TS_STAMPED]-before[m2hoCounterIdCNT_TS_STAMPED], "only the ACK that left")
	assert.Zero(t, after[m2hoCounterIdCNT_TS_UNSTAMPED]-before[m2hoCounterIdCNT_TS_UNSTAMPED])
	assert.Equal(t, uint64(1), after[m2hoCounterIdCNT_RTT_SAMPLES]-before[m2hoCounterIdCNT_RTT_SAMPLES], "the echo of the ACK that left")
}

// setSmoothedRTT gives flow s a smoothed RTT as a cellular path has it.
// The echo of a stamp between two BPF_PROG_RUN calls measures the test's
// own pace, a few microseconds on a slow host, and a hold of two such RTTs
// would be over before the next packet runs.
func setSmoothedRTT(t *testing.T, d *Datapath, s segment, rtt time.Duration) {
	t.Helper()
	slot, _ := flowSlot(t, d, fixtureFlowKey(s.localPort, s.remotePort))
	_, entry := d.table.slot(slot)
	entry.State.SrttNs, entry.State.RttSamples = uint64(rtt), max(entry.State.RttSamples, 1)
}

// TestDupACKHold: a flow's duplicates are held only for DUPACK_HOLD_MS
// after its acknowledgement last moved, below a Linux sender's minimum
// RTO, and are counted when they go out; an ACK that moves restarts the
// hold.
func TestDupACKHold(t *testing.T) {
	const hold = time.Duration(m2hoDupackHoldDUPACK_HOLD_MS) * time.Millisecond
	d := loadDetached(t, true, 0)
	s := sackFlow(t, d, framings[0])
	verdictOf(t, d, peerData(s, 0, 1000), false)
	moved := time.Now()
	require.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true))
	verdictOf(t, d, peerData(s, 2000, 1000), false) // a hole at 1000
	_, err := d.StartSuppression(time.Now().Add(time.Minute))
	require.NoError(t, err)

	require.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 1000), true), "within the hold")
	time.Sleep(time.Until(moved.Add(hold + 20*time.Millisecond)))
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true), "the hold is over")
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true), "and stays over for this acknowledgement")
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_DUPACK_SUPPRESSED])
	assert.Equal(t, uint64(2), c[m2hoCounterIdCNT_DUPACK_HOLD_EXPIRED])

	// The hole fills up to 1500: the acknowledgement moves, and its
	// duplicates are held again.
	verdictOf(t, d, peerData(s, 1000, 500), false)
	require.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1500), true))
	assert.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 1500), true), "a new hold")

	// A flow with a 20 ms smoothed RTT is held for two of them only:
	// the sender's tail loss probe comes after that.
	fast := sackFlow(t, d, framings[0])
	verdictOf(t, d, peerData(fast, 0, 1000), false)
	setSmoothedRTT(t, d, fast, 20*time.Millisecond)
	moved = time.Now()
	require.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(fast, 1000), true))
	verdictOf(t, d, peerData(fast, 2000, 1000), false)
	_, err = d.StartSuppression(time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(fast, 1000), true), "within two RTTs")
	time.Sleep(time.Until(moved.Add(40*time.Millisecond + 10*time.Millisecond)))
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(fast, 1000), true), "two RTTs are over")
}

// TestHoleAtTheCommandSurvivesTheExecutionEpoch: suppression holds holes
// from the handover command and opens the handover's epoch at execution.
// The source cell's context release opens a hole at the command; the
// execution's epoch snapshots the data above it, so its duplicates stay
// held until the forwarded packets fill it, and then the flow releases
// itself.
func TestHoleAtTheCommandSurvivesTheExecutionEpoch(t *testing.T) {
	d := loadDetached(t, true, 0)
	s := sackFlow(t, d, framings[0])
	verdictOf(t, d, peerData(s, 0, 1000), false)
	require.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true))

	// The command. The context release holds 1000..3000 back and
	// delivers what follows.
	require.NoError(t, d.PrepareSuppression(time.Now().Add(time.Minute)))
	verdictOf(t, d, peerData(s, 3000, 1000), false)
	assert.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 1000), true), "duplicate at the command")

	// The execution: the handover's epoch, its snapshot 4000.
	_, err := d.StartSuppression(time.Now().Add(time.Minute))
	require.NoError(t, err)
	verdictOf(t, d, peerData(s, 4000, 1000), false)
	assert.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 1000), true), "duplicate after the execution")

	// The target delivers the held data; the ACK passes the snapshot.
	verdictOf(t, d, peerData(s, 1000, 2000), false)
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 5000), true))
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 5000), true), "a loss after the release reaches the sender")
	flows, err := d.Flows()
	require.NoError(t, err)
	require.Len(t, flows, 1)
	assert.True(t, flows[0].Released)
	assert.Equal(t, uint32(peerISN+1+4000), flows[0].SnapshotRxSeq)
}

// TestACKAtTheSnapshotReleasesOnlyWithoutDataAbove: an ACK that reaches
// the snapshot releases a flow that has nothing beyond it, and holds one
// whose data above the snapshot waits behind a hole.
func TestACKAtTheSnapshotReleasesOnlyWithoutDataAbove(t *testing.T) {
	d := loadDetached(t, true, 0)
	quiet, holed := freshPorts(segment{sack: true}), freshPorts(segment{sack: true})
	for _, s := range []segment{quiet, holed} {
		handshake(t, d, s, 7, 7)
		verdictOf(t, d, peerData(s, 0, 1000), false)
		require.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true))
	}
	_, err := d.StartSuppression(time.Now().Add(time.Minute))
	require.NoError(t, err)
	verdictOf(t, d, peerData(holed, 2000, 1000), false) // snapshot 1000, hole at 1000

	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(quiet, 1000), true), "nothing above the snapshot")
	assert.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(holed, 1000), true), "data above it waits")
	pending, err := d.SuppressionPending()
	require.NoError(t, err)
	assert.Equal(t, 1, pending, "only the flow with the hole")
}

// TestSuppressionFromThePrediction: from a prediction to the execution no
// epoch is open; a duplicate ACK is held only while data above its
// acknowledgement has arrived, within the hold, and the handover's epoch
// at the execution keeps holding the same hole. The first duplicates of
// the context release leave as the UE applies the command, before user
// space reads it from the modem: suppression must already be on.
func TestSuppressionFromThePrediction(t *testing.T) {
	d := loadDetached(t, true, 0)
	s := sackFlow(t, d, framings[0])
	verdictOf(t, d, peerData(s, 0, 1000), false)
	require.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true))
	setSmoothedRTT(t, d, s, 40*time.Millisecond)

	require.NoError(t, d.PrepareSuppression(time.Now().Add(time.Minute)))
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true), "a window update")
	verdictOf(t, d, peerData(s, 1000, 1000), false)
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 2000), true), "in-order data is acknowledged")
	pending, err := d.SuppressionPending()
	require.NoError(t, err)
	assert.Zero(t, pending, "no handover epoch before the execution")

	// The UE applies the command: the context release delivers 3000..4000
	// ahead of 2000..3000.
	verdictOf(t, d, peerData(s, 3000, 1000), false)
	assert.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 2000), true), "duplicate at the command")
	assert.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 2000), true))
	flows, err := d.Flows()
	require.NoError(t, err)
	require.Len(t, flows, 1)
	assert.Zero(t, flows[0].Epoch)

	epoch, err := d.StartSuppression(time.Now().Add(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 2000), true), "the same hole in the execution's epoch")
	verdictOf(t, d, peerData(s, 2000, 1000), false)
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 4000), true), "the hole filled")
	flows, err = d.Flows()
	require.NoError(t, err)
	assert.Equal(t, epoch, flows[0].Epoch)
	assert.True(t, flows[0].Released)
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(3), c[m2hoCounterIdCNT_DUPACK_SUPPRESSED])

	// A prediction that no command follows: suppression stops, and so
	// does the holding of a hole.
	require.NoError(t, d.PrepareSuppression(time.Now().Add(time.Minute)))
	verdictOf(t, d, peerData(s, 5000, 1000), false)
	require.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 4000), true), "a hole after the prediction")
	require.NoError(t, d.StopSuppression())
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 4000), true), "after the prediction ended")
}

// TestPreparationHoldsOnlyHolesSinceThePrediction: a hole whose
// acknowledgement last moved before the prediction is a loss the sender
// is already repairing, not the handover's: its duplicates pass. A hole
// opened since is held, through a renewal of the same Preparation.
func TestPreparationHoldsOnlyHolesSinceThePrediction(t *testing.T) {
	d, s := flowAcknowledging1000(t)
	verdictOf(t, d, peerData(s, 2000, 1000), false) // a loss at 1000
	require.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true))
	// the egress clock lags by two ticks at most, 20 ms at HZ=100
	time.Sleep(coarseClockLag + 25*time.Millisecond)

	require.NoError(t, d.PrepareSuppression(time.Now().Add(time.Minute)))
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true), "a hole from before the prediction")
	verdictOf(t, d, peerData(s, 1000, 1000), false) // retransmitted
	require.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 3000), true))
	verdictOf(t, d, peerData(s, 4000, 1000), false) // a hole at 3000
	assert.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 3000), true), "a hole since the prediction")
	require.NoError(t, d.PrepareSuppression(time.Now().Add(2*time.Minute)))
	assert.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 3000), true), "held through a renewal")
}

// TestPreparationHoldsTheHoleOfAStandingAck: a cell that delivered
// nothing for a while before the command leaves the acknowledgement
// standing, with no hole, since before the prediction; the context release
// then opens a hole at the command. That hole is the handover's, however
// old the acknowledgement: its duplicates are held. A window update while
// the acknowledgement stood (no data above it) opened no hole.
func TestPreparationHoldsTheHoleOfAStandingAck(t *testing.T) {
	d, s := flowAcknowledging1000(t)
	require.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true), "a window update")
	// the egress clock lags by two ticks at most, 20 ms at HZ=100
	time.Sleep(coarseClockLag + 25*time.Millisecond)

	require.NoError(t, d.PrepareSuppression(time.Now().Add(time.Minute)))
	verdictOf(t, d, peerData(s, 2000, 1000), false) // the release: a hole at 1000
	assert.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 1000), true), "the release's hole, under an ACK older than the prediction")
	assert.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 1000), true), "and its next duplicate")
}

// flowAcknowledging1000 loads a detached datapath with a flow (40 ms
// smoothed RTT) whose host received and acknowledged its first 1000 bytes.
func flowAcknowledging1000(t *testing.T) (*Datapath, segment) {
	t.Helper()
	d := loadDetached(t, true, 0)
	s := sackFlow(t, d, framings[0])
	setSmoothedRTT(t, d, s, 40*time.Millisecond)
	verdictOf(t, d, peerData(s, 0, 1000), false)
	require.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true))
	return d, s
}

// TestImplausibleSegmentsLeaveTheSequence checks that an ingress segment
// further from the flow's highest sequence than the host's largest window
// (a damaged sequence number, a stray segment of an earlier connection)
// neither moves that sequence nor closes the flow. Otherwise the next
// handover's snapshot would lie beyond anything the host acknowledges, and
// the flow would drop its duplicate ACKs until the deadline.
func TestImplausibleSegmentsLeaveTheSequence(t *testing.T) {
	// wscale 7: the host's window is at most 65535 << 7, about 8 MB
	const largestWindow = 0xffff << 7
	tests := []struct {
		name    string
		segment func(s segment) segment
		// whether the segment counts: moves the sequence or closes
		plausible bool
	}{
		{"data with bit 30 of its sequence flipped", func(s segment) segment {
			seg := peerData(s, 1000, 1000)
			seg.seq ^= 1 << 30
			return seg
		}, false},
		{"data just beyond the largest window", func(s segment) segment {
			return peerData(s, 1000+largestWindow+1, 1000)
		}, false},
		{"data ending at the largest window", func(s segment) segment {
			return peerData(s, 1000+largestWindow-1000, 1000)
		}, true},
		{"RST far behind", func(s segment) segment {
			seg := peerData(s, 0, 0)
			seg.seq -= 2 * largestWindow
			seg.rst = true
			return seg
		}, false},
		{"RST at the next sequence", func(s segment) segment {
			seg := peerData(s, 1000, 0)
			seg.rst = true
			return seg
		}, true},
		{"FIN far ahead", func(s segment) segment {
			seg := peerData(s, 1<<31-1, 0)
			seg.fin = true
			return seg
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := loadDetached(t, true, 0)
			s := freshPorts(segment{})
			handshake(t, d, s, 7, 7)
			verdictOf(t, d, peerData(s, 0, 1000), false)
			seg := tc.segment(s)
			assert.Equal(t, int32(verdictPass), verdictOf(t, d, seg, false), "passed either way")

			flows, err := d.Flows()
			require.NoError(t, err)
			require.Len(t, flows, 1)
			c, err := d.Counters()
			require.NoError(t, err)
			if !tc.plausible {
				assert.Equal(t, uint32(peerISN+1+1000), flows[0].HighestRxSeq)
				assert.False(t, flows[0].Closed)
				assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_SEQ_IMPLAUSIBLE])
				return
			}
			assert.Zero(t, c[m2hoCounterIdCNT_SEQ_IMPLAUSIBLE])
			assert.Equal(t, seg.rst, flows[0].Closed)
			if seg.payload > 0 {
				assert.Equal(t, seg.seq+uint32(seg.payload), flows[0].HighestRxSeq)
			}
		})
	}
}

// TestDamagedSegmentDoesNotHoldSuppression follows a flow through a
// handover after a segment with a damaged sequence number: the flow
// releases itself once the host has acknowledged everything it received,
// and a later loss's duplicate ACKs then reach the sender.
func TestDamagedSegmentDoesNotHoldSuppression(t *testing.T) {
	d := loadDetached(t, true, 0)
	s := freshPorts(segment{})
	handshake(t, d, s, 7, 7)
	verdictOf(t, d, peerData(s, 0, 1000), false)
	damaged := peerData(s, 1000, 1000)
	damaged.seq ^= 1 << 30
	verdictOf(t, d, damaged, false)
	verdictOf(t, d, peerData(s, 1000, 1000), false)
	verdictOf(t, d, peerData(s, 3000, 1000), false) // a hole at 2000
	require.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 2000), true))

	_, err := d.StartSuppression(time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 2000), true), "a duplicate from before the handover")
	verdictOf(t, d, peerData(s, 2000, 1000), false)
	require.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 4000), true))
	flows, err := d.Flows()
	require.NoError(t, err)
	require.Len(t, flows, 1)
	assert.True(t, flows[0].Released, "everything the host received is acknowledged")
	verdictOf(t, d, peerData(s, 5000, 1000), false) // a loss at 4000
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 4000), true), "the duplicate ACK of a loss after the handover")
}

func TestSuppressionGlobalReleaseAndDeadline(t *testing.T) {
	d := loadDetached(t, true, 0)
	s := freshPorts(segment{})
	handshake(t, d, s, 7, 7)
	verdictOf(t, d, peerData(s, 0, 1000), false)
	verdictOf(t, d, peerData(s, 2000, 1000), false)
	verdictOf(t, d, ackOf(s, 1000), true)

	_, err := d.StartSuppression(time.Now().Add(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 1000), true))
	require.NoError(t, d.StopSuppression())
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true), "global release")
	pending, err := d.SuppressionPending()
	require.NoError(t, err)
	assert.Zero(t, pending)

	// a new epoch takes a new snapshot; the deadline ends it without the daemon
	deadline := time.Now().Add(50 * time.Millisecond)
	epoch, err := d.StartSuppression(deadline)
	require.NoError(t, err)
	assert.Equal(t, uint32(2), epoch)
	assert.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 1000), true))
	// egress's coarse clock lags by up to two ticks: 20 ms at HZ=100
	time.Sleep(time.Until(deadline) + 25*time.Millisecond)
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true), "deadline passed")
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true))
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_SUPPRESS_EXPIRED])
	assert.Equal(t, uint64(2), c[m2hoCounterIdCNT_DUPACK_SUPPRESSED])
}

func TestSuppressionFlowWithoutDataStartsReleased(t *testing.T) {
	d := loadDetached(t, true, 0)
	s := freshPorts(segment{})
	handshake(t, d, s, 7, 7)
	verdictOf(t, d, ackOf(s, 0), true)
	_, err := d.StartSuppression(time.Now().Add(time.Minute))
	require.NoError(t, err)
	// the SYN-ACK's sequence counts: highest is ISN+1, the ACK covers it
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 0), true))
	pending, err := d.SuppressionPending()
	require.NoError(t, err)
	assert.Zero(t, pending)
}

// A flow that was moving data when the cells held the downlink sees no
// packet until the forwarded data arrives, so it has taken no snapshot yet
// but still counts as pending; one quiet for longer than activeFlowWindow
// does not, nor one whose connection just ended.
func TestSuppressionPendingBeforeTheFlowsFirstPacket(t *testing.T) {
	d := loadDetached(t, true, 0)
	active, idle, reset := freshPorts(segment{}), freshPorts(segment{}), freshPorts(segment{})
	for _, s := range []segment{active, idle, reset} {
		handshake(t, d, s, 7, 7)
		verdictOf(t, d, peerData(s, 0, 1000), false)
		verdictOf(t, d, ackOf(s, 1000), true)
	}
	verdictOf(t, d, withFlags(peerData(reset, 1000, 0), false, true), false)
	idleSlot, _ := flowSlot(t, d, fixtureFlowKey(idle.localPort, idle.remotePort))
	_, idleEntry := d.table.slot(idleSlot)
	idleEntry.State.LastSeenNs = monotonicNow() - uint64(activeFlowWindow) - uint64(time.Millisecond)

	_, err := d.StartSuppression(time.Now().Add(time.Minute))
	require.NoError(t, err)
	pending, err := d.SuppressionPending()
	require.NoError(t, err)
	assert.Equal(t, 1, pending, "the active flow, before any packet in the epoch")

	// forwarded data arrives: the snapshot covers what came before it
	verdictOf(t, d, peerData(active, 1000, 1000), false)
	pending, err = d.SuppressionPending()
	require.NoError(t, err)
	assert.Equal(t, 1, pending, "entered the epoch, not released")
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(active, 2000), true), "past the snapshot of 1000")
	pending, err = d.SuppressionPending()
	require.NoError(t, err)
	assert.Zero(t, pending, "released by its own ACK")
}

func TestSuppressionPendingRule(t *testing.T) {
	const epoch, activeSince = 3, 5000
	released := uint32(m2hoFlowFlagsFLOW_RELEASED)
	hasData := uint32(m2hoFlowFlagsFLOW_RX_SEQ_VALID)
	closed := uint32(m2hoFlowFlagsFLOW_CLOSED)
	tests := []struct {
		name  string
		state m2hoFlowState
		want  bool
	}{
		{"in the epoch, not released", m2hoFlowState{Epoch: epoch, Flags: hasData, LastSeenNs: 1}, true},
		{"in the epoch, released", m2hoFlowState{Epoch: epoch, Flags: hasData | released, LastSeenNs: 9000}, false},
		{"before the epoch, active with data", m2hoFlowState{Epoch: epoch - 1, Flags: hasData, LastSeenNs: activeSince}, true},
		{"released in an earlier epoch, active", m2hoFlowState{Epoch: epoch - 1, Flags: hasData | released, LastSeenNs: 9000}, true},
		{"before the epoch, quiet", m2hoFlowState{Epoch: epoch - 1, Flags: hasData, LastSeenNs: activeSince - 1}, false},
		{"before the epoch, no data received", m2hoFlowState{Epoch: epoch - 1, LastSeenNs: 9000}, false},
		{"in the epoch, not released, closed", m2hoFlowState{Epoch: epoch, Flags: hasData | closed, LastSeenNs: 9000}, false},
		{"before the epoch, active with data, closed", m2hoFlowState{Epoch: epoch - 1, Flags: hasData | closed, LastSeenNs: 9000}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, suppressionPending(&tt.state, epoch, activeSince))
		})
	}
}

func TestRTTFromTimestamps(t *testing.T) {
	d := loadDetached(t, false, 0)
	s := freshPorts(segment{ethernet: true, timestamps: true})
	handshake(t, d, s, 7, 7)

	ack := ackOf(s, 0)
	ack.tsval, ack.tsecr = 100, 50
	verdictOf(t, d, ack, true)
	verdictOf(t, d, ack, true) // a repeated TSval keeps the first stamp
	time.Sleep(2 * time.Millisecond)
	data := peerData(s, 0, 1000)
	data.tsval, data.tsecr = 60, 100
	verdictOf(t, d, data, false)
	verdictOf(t, d, data, false) // the stamp was consumed: no second sample

	flows, err := d.Flows()
	require.NoError(t, err)
	require.Len(t, flows, 1)
	fl := flows[0]
	assert.Equal(t, uint64(1), fl.RTTSamples)
	assert.GreaterOrEqual(t, fl.RTTLatest, 2*time.Millisecond)
	assert.Less(t, fl.RTTLatest, time.Second)
	assert.Equal(t, fl.RTTLatest, fl.RTTMin)
	assert.Equal(t, fl.RTTLatest, fl.SRTT)

	hist, err := d.RTTHistogram()
	require.NoError(t, err)
	require.Len(t, hist, RTTBuckets)
	var total uint64
	for i, n := range hist {
		total += n
		if n > 0 {
			lower, upper := RTTBucketBounds(i)
			assert.True(t, fl.RTTLatest >= lower && fl.RTTLatest < upper, "bucket %d [%v, %v) holds %v", i, lower, upper, fl.RTTLatest)
		}
	}
	assert.Equal(t, uint64(1), total)
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_RTT_SAMPLES])
}

// TestRTTStampPool follows a flow's stamps: four TSvals await their echo at
// most, an echo frees its stamp and every older one, and a TSval that found
// no free stamp yields no sample.
func TestRTTStampPool(t *testing.T) {
	d := loadDetached(t, false, 0)
	s := freshPorts(segment{ethernet: true, timestamps: true})
	handshake(t, d, s, 7, 7)

	sendTSval := func(tsval uint32) {
		ack := ackOf(s, 0)
		ack.tsval, ack.tsecr = tsval, 50
		verdictOf(t, d, ack, true)
	}
	echo := func(tsecr uint32) {
		data := peerData(s, 0, 100)
		data.tsval, data.tsecr = 60, tsecr
		verdictOf(t, d, data, false)
	}
	samples := func() uint64 {
		flows, err := d.Flows()
		require.NoError(t, err)
		require.Len(t, flows, 1)
		return flows[0].RTTSamples
	}

	echo(99) // frees the stamp of the host's SYN (TSval 0), which was never echoed
	require.Zero(t, samples())
	before, err := d.Counters()
	require.NoError(t, err)

	for tsval := uint32(100); tsval <= 104; tsval++ {
		sendTSval(tsval)
	}
	echo(102) // frees 100 and 101 unanswered
	assert.Equal(t, uint64(1), samples())
	sendTSval(105) // finds a free stamp again
	echo(103)
	assert.Equal(t, uint64(2), samples())
	echo(104) // was never stamped
	assert.Equal(t, uint64(2), samples())
	echo(101) // reordered: its stamp is gone
	assert.Equal(t, uint64(2), samples())
	echo(105)
	assert.Equal(t, uint64(3), samples())

	after, err := d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(5), after[m2hoCounterIdCNT_TS_STAMPED]-before[m2hoCounterIdCNT_TS_STAMPED], "100-103 and 105")
	assert.Equal(t, uint64(1), after[m2hoCounterIdCNT_TS_UNSTAMPED]-before[m2hoCounterIdCNT_TS_UNSTAMPED], "104")
	assert.Equal(t, uint64(3), after[m2hoCounterIdCNT_RTT_SAMPLES]-before[m2hoCounterIdCNT_RTT_SAMPLES])
}

func TestRTTBucketBounds(t *testing.T) {
	tests := []struct {
		bucket       int
		lower, upper time.Duration
	}{
		{0, 0, 2 * time.Microsecond},
		{1, 2 * time.Microsecond, 4 * time.Microsecond},
		{10, 1024 * time.Microsecond, 2048 * time.Microsecond},
		{RTTBuckets - 1, (1 << 31) * time.Microsecond, 1<<63 - 1},
	}
	for _, tc := range tests {
		lower, upper := RTTBucketBounds(tc.bucket)
		assert.Equal(t, tc.lower, lower, "bucket %d", tc.bucket)
		assert.Equal(t, tc.upper, upper, "bucket %d", tc.bucket)
	}
}

func TestBursts(t *testing.T) {
	// a gap wide enough that scheduling stalls on a busy machine do not
	// split the test's burst
	const gap = 50 * time.Millisecond
	d := loadDetachedWithGap(t, true, 0, gap)
	s := freshPorts(segment{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan Burst, 4)
	done := make(chan error, 1)
	go func() { done <- d.ReadBursts(ctx, func(b Burst) { got <- b }) }()

	frame, _ := peerData(s, 0, 1000).build(t)
	begin := time.Now()
	for range 3 {
		d.ingress(t, frame)
	}
	time.Sleep(3 * gap)
	d.ingress(t, frame) // closes the first burst

	select {
	case b := <-got:
		assert.Equal(t, uint64(3), b.Packets)
		assert.Equal(t, uint64(3*len(frame)), b.Bytes)
		assert.False(t, b.End.Before(b.Start))
		assert.WithinDuration(t, begin, b.Start, 100*time.Millisecond)
		assert.Less(t, b.End.Sub(b.Start), gap)
	case <-ctx.Done():
		t.Fatal("no burst reported")
	}
	cancel()
	require.NoError(t, <-done)
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_BURSTS])
}

// TestPeerSegmentsCreateNoFlow checks that only the host's segments
// create flows: a remote peer sending bare segments from ports of its
// choosing must not fill the table and leave the host's next connection
// untracked.
func TestPeerSegmentsCreateNoFlow(t *testing.T) {
	const tableSize = 8
	d := loadDetached(t, true, tableSize)
	for range 4 * tableSize {
		probe := peerData(freshPorts(segment{}), 0, 0) // a bare ACK
		assert.Equal(t, int32(verdictPass), verdictOf(t, d, probe, false))
	}
	// A peer's SYN is a connection the host has yet to accept, not a
	// segment of one left untracked.
	syn := peerData(freshPorts(segment{}), 0, 0)
	syn.syn, syn.ackFlag, syn.seq = true, false, peerISN
	assert.Equal(t, int32(verdictPass), verdictOf(t, d, syn, false))
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Zero(t, c[m2hoCounterIdCNT_FLOW_CREATED])
	assert.Equal(t, uint64(4*tableSize), c[m2hoCounterIdCNT_UNTRACKED])

	s := freshPorts(segment{})
	handshake(t, d, s, 7, 7)
	require.NoError(t, d.SetClamp(1<<14, time.Now().Add(time.Minute)))
	expectWindow(t, d, hostACK(s, 50000, 0), 128)
}

// TestHostSYNDropsStoredHandshake checks that a connection the host opens
// afresh never meets the handshake an earlier connection on its ports
// left: were its own SYN missed, a stale scale would put its clamped
// window below one segment.
func TestHostSYNDropsStoredHandshake(t *testing.T) {
	d := loadDetached(t, true, 0)
	s := freshPorts(segment{})
	key := fixtureFlowKey(s.localPort, s.remotePort)
	stale := d.adoption()
	stale.add(&key, hostMSS, 7)
	_, err := stale.done()
	require.NoError(t, err)

	handshake(t, d, s, 2, 7)
	var hint m2hoHandshakeHint
	assert.ErrorIs(t, d.objs.HandshakeHints.Lookup(&key, &hint), ebpf.ErrKeyNotExist)
}

// TestEvictionOfFlowsThatReceivedNothing checks that a flow that never
// received a counted segment (a peer that never answered, a SYN-ACK to a
// forged SYN) goes after the short idle time of closed flows and leaves
// no handshake to fill the store.
func TestEvictionOfFlowsThatReceivedNothing(t *testing.T) {
	d := loadDetached(t, true, 0)
	answered := freshPorts(segment{})
	handshake(t, d, answered, 7, 7)
	halfOpen := freshPorts(segment{})
	synAck := hostACK(halfOpen, 64240, 0)
	synAck.syn, synAck.seq, synAck.ack = true, hostISN, peerISN+1
	synAck.mss, synAck.wscale = hostMSS, 7
	require.Equal(t, int32(verdictPass), verdictOf(t, d, synAck, true))

	time.Sleep(20 * time.Millisecond)
	evicted, err := d.EvictIdle(time.Hour, 10*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, 1, evicted)
	flows, err := d.Flows()
	require.NoError(t, err)
	require.Len(t, flows, 1)
	assert.Equal(t, answered.localPort, flows[0].Local.Port())
	key := fixtureFlowKey(halfOpen.localPort, halfOpen.remotePort)
	var hint m2hoHandshakeHint
	assert.ErrorIs(t, d.objs.HandshakeHints.Lookup(&key, &hint), ebpf.ErrKeyNotExist)
}

func TestFlowsAndEviction(t *testing.T) {
	d := loadDetached(t, true, 4)
	var segs []segment
	for range 4 {
		s := freshPorts(segment{timestamps: true})
		handshake(t, d, s, 9, 9)
		segs = append(segs, s)
	}
	extra := freshPorts(segment{})
	verdictOf(t, d, ackOf(extra, 0), true)
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_MAP_FULL])
	assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_UNTRACKED])

	flows, err := d.Flows()
	require.NoError(t, err)
	require.Len(t, flows, 4)
	for _, fl := range flows {
		assert.True(t, fl.WScaleKnown)
		assert.Equal(t, uint8(9), fl.WScale)
		assert.Equal(t, uint16(hostMSS), fl.MSS)
		assert.Equal(t, "10.0.0.2", fl.Local.Addr().String())
		assert.Equal(t, "192.0.2.1:443", fl.Remote.String())
		assert.WithinDuration(t, time.Now(), fl.LastSeen, time.Second)
	}

	time.Sleep(20 * time.Millisecond)
	verdictOf(t, d, ackOf(segs[0], 0), true) // keeps flow 0 fresh
	evicted, err := d.EvictIdle(10*time.Millisecond, 10*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, 3, evicted)
	flows, err = d.Flows()
	require.NoError(t, err)
	require.Len(t, flows, 1)
	assert.Equal(t, segs[0].localPort, flows[0].Local.Port())

	// room again: the new flow is tracked
	verdictOf(t, d, ackOf(extra, 0), true)
	flows, err = d.Flows()
	require.NoError(t, err)
	assert.Len(t, flows, 2)
}

// blankedSACK is frame, whose TCP header starts at l4 and whose options end
// in NOP, NOP and a SACK option of one block, with that SACK option as
// NOPs: what egress sends when it hides the blocks (the checksum aside).
func blankedSACK(frame []byte, l4 int) []byte {
	out := append([]byte(nil), frame...)
	end := l4 + int(out[l4+12]>>4)*4
	for i := end - 10; i < end; i++ {
		out[i] = 1
	}
	return out
}

// TestSACKOfAnACKAtAHeldHoleIsHidden: the receiver's first ACK after the
// context release began delivering out of order still acknowledges what
// came in order before it, and passes as no duplicate; its SACK blocks
// would let the sender's RACK mark the hole lost. It leaves with them
// blanked, its acknowledgement, timestamps and window intact and its
// checksum valid. Where suppression does not hold the hole, SACK blocks
// pass as they are.
func TestSACKOfAnACKAtAHeldHoleIsHidden(t *testing.T) {
	for _, f := range framings[:4] {
		t.Run(f.name, func(t *testing.T) {
			d := datapathFor(t, f)
			s := sackFlow(t, d, f)
			verdictOf(t, d, peerData(s, 0, 1000), false)
			require.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true))

			require.NoError(t, d.PrepareSuppression(time.Now().Add(time.Minute)))
			verdictOf(t, d, peerData(s, 1000, 1000), false)
			// The release delivers 3000..4000 ahead of 2000..3000 before
			// the host acknowledged 2000: that ACK carries SACK 3000..4000.
			verdictOf(t, d, peerData(s, 3000, 1000), false)
			frame, l4 := ackOf(s, 2000).build(t)
			verdict, out := d.egress(t, frame)
			require.Equal(t, int32(verdictPass), verdict, "the acknowledgement moved: no duplicate")
			assert.True(t, tcpChecksumOK(out, l4, f.ipv6, s.l3Offset()), "checksum")
			want := blankedSACK(frame, l4)
			copy(want[l4+tcpChecksumOffset:l4+tcpChecksumOffset+2], out[l4+tcpChecksumOffset:])
			assert.Equal(t, want, out, "the SACK option as NOPs, nothing else changed")
			c, err := d.Counters()
			require.NoError(t, err)
			assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_SACK_HIDDEN])

			assert.Equal(t, int32(verdictDrop), verdictOf(t, d, ackOf(s, 2000), true), "its duplicates are held")
			_, err = d.StartSuppression(time.Now().Add(time.Minute))
			require.NoError(t, err)
			// the handover's epoch: snapshot 4000; 2000..2500 arrives
			verdictOf(t, d, peerData(s, 2000, 500), false)
			frame, l4 = ackOf(s, 2500).build(t)
			_, out = d.egress(t, frame)
			assert.Equal(t, blankedSACK(frame, l4)[l4+20:], out[l4+20:], "a hole below the snapshot, in the epoch")
			assert.True(t, tcpChecksumOK(out, l4, f.ipv6, s.l3Offset()))

			// The hole fills and data after the snapshot arrives, with a
			// loss at 4500: the ACK passes the snapshot and releases the
			// flow, and the sender hears of the loss at once.
			verdictOf(t, d, peerData(s, 2500, 500), false)
			verdictOf(t, d, peerData(s, 4000, 500), false)
			verdictOf(t, d, peerData(s, 5500, 1000), false)
			frame, _ = ackOf(s, 4500).build(t)
			verdict, out = d.egress(t, frame)
			assert.Equal(t, int32(verdictPass), verdict)
			assert.Equal(t, frame, out, "the ACK that releases keeps its SACK blocks")
			verdict, out = d.egress(t, frame)
			assert.Equal(t, int32(verdictPass), verdict)
			assert.Equal(t, frame, out, "so do the duplicates of a released flow")
			c, err = d.Counters()
			require.NoError(t, err)
			assert.Equal(t, uint64(2), c[m2hoCounterIdCNT_SACK_HIDDEN])
		})
	}
}

// TestSACKPassesWithoutAHeldHole: without suppression, for a hole from
// before the prediction, or with nothing received above the
// acknowledgement, an ACK's SACK option passes as it is.
func TestSACKPassesWithoutAHeldHole(t *testing.T) {
	t.Run("no suppression", func(t *testing.T) {
		d, s := flowAcknowledging1000(t)
		verdictOf(t, d, peerData(s, 1000, 1000), false)
		verdictOf(t, d, peerData(s, 3000, 1000), false)
		frame, _ := ackOf(s, 2000).build(t)
		_, out := d.egress(t, frame)
		assert.Equal(t, frame, out)
	})
	t.Run("a hole from before the prediction", func(t *testing.T) {
		d, s := flowAcknowledging1000(t)
		verdictOf(t, d, peerData(s, 2000, 1000), false) // a loss at 1000..2000
		require.Equal(t, int32(verdictPass), verdictOf(t, d, ackOf(s, 1000), true), "its first duplicate")
		time.Sleep(coarseClockLag + 25*time.Millisecond)
		require.NoError(t, d.PrepareSuppression(time.Now().Add(time.Minute)))
		verdictOf(t, d, peerData(s, 1000, 500), false) // half of it retransmitted
		frame, _ := ackOf(s, 1500).build(t)
		_, out := d.egress(t, frame)
		assert.Equal(t, frame, out, "the sender's recovery goes on")
	})
	t.Run("nothing above the acknowledgement", func(t *testing.T) {
		d, s := flowAcknowledging1000(t)
		require.NoError(t, d.PrepareSuppression(time.Now().Add(time.Minute)))
		verdictOf(t, d, peerData(s, 1000, 1000), false)
		frame, _ := ackOf(s, 2000).build(t)
		_, out := d.egress(t, frame)
		assert.Equal(t, frame, out)
	})
	d, _ := flowAcknowledging1000(t)
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Zero(t, c[m2hoCounterIdCNT_SACK_HIDDEN])
}
