package report

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/traffic"
)

// sampleCut is a change of flow 0's state in cutSamples: from at on, the
// slow-start threshold is ssthresh and the cwnd cwnd; retransmit adds a
// retransmission at retransAfter past at.
type sampleCut struct {
	at           time.Duration
	ssthresh     uint32
	cwnd         uint32
	retransmit   bool
	retransAfter time.Duration
}

// cutSamples: flow 0 sampled every 10 ms for 20 s, from cwnd 100 and an
// unset threshold, changed as changes say; a second flow, whose cuts do
// not count, cut at every sample.
func cutSamples(changes ...sampleCut) *traffic.Measurements {
	m := &traffic.Measurements{}
	ssthresh, cwnd, retrans := uint32(1<<31-1), uint32(100), uint32(0)
	var pending []time.Duration
	for at := time.Duration(0); at <= 20*time.Second; at += 10 * time.Millisecond {
		for _, c := range changes {
			if c.at == at {
				ssthresh, cwnd = c.ssthresh, c.cwnd
				if c.retransmit {
					pending = append(pending, at+c.retransAfter)
				}
			}
		}
		for len(pending) > 0 && pending[0] <= at {
			retrans, pending = retrans+1, pending[1:]
		}
		m.TCPInfo = append(m.TCPInfo,
			traffic.TCPInfoSample{At: at, Flow: 0, Cwnd: cwnd, Ssthresh: ssthresh, Retrans: retrans},
			traffic.TCPInfoSample{At: at, Flow: 1, Cwnd: 10, Ssthresh: uint32(at / time.Millisecond), Retrans: uint32(at / time.Millisecond)})
	}
	return m
}

func TestWindowCuts(t *testing.T) {
	sc, _ := fixture(t)
	// fixture's cells: a is sub-6, b mmWave; the handover to b is
	// reported at 9.82 s, executes at 10 s and completes at 10.027 s.
	handover := []emu.HandoverRecord{handoverAt(0, "b", 9820*time.Millisecond, 10*time.Second)}
	failure := []emu.HandoverRecord{rlfAt(0, "b", 10*time.Second)}
	ms := time.Millisecond
	cases := []struct {
		name      string
		handovers []emu.HandoverRecord
		changes   []sampleCut
		want      Cuts
	}{
		{"startup is left out", handover, []sampleCut{{at: 4990 * ms, ssthresh: 70, cwnd: 70, retransmit: true}}, Cuts{}},
		{"first cut after startup", handover, []sampleCut{{at: 5 * time.Second, ssthresh: 70, cwnd: 70, retransmit: true}}, Cuts{Sub6: 1}},
		{"between handovers on sub-6", handover, []sampleCut{{at: 9810 * ms, ssthresh: 70, cwnd: 70, retransmit: true}}, Cuts{Sub6: 1}},
		{"from the report", handover, []sampleCut{{at: 9820 * ms, ssthresh: 70, cwnd: 70, retransmit: true}}, Cuts{Handover: 1}},
		{"until 2 s after completion", handover, []sampleCut{{at: 12020 * ms, ssthresh: 70, cwnd: 70, retransmit: true}}, Cuts{Handover: 1}},
		{"then between handovers on mmWave", handover, []sampleCut{{at: 12030 * ms, ssthresh: 70, cwnd: 70, retransmit: true}}, Cuts{MmWave: 1}},
		{"a timeout", handover, []sampleCut{{at: 15 * time.Second, ssthresh: 70, cwnd: 1, retransmit: true}}, Cuts{MmWave: 1, Timeouts: 1}},
		{"retransmission within 500 ms", handover, []sampleCut{{at: 15 * time.Second, ssthresh: 70, cwnd: 70, retransmit: true, retransAfter: 500 * ms}}, Cuts{MmWave: 1}},
		{"HyStart lowers the threshold without a loss", handover, []sampleCut{
			{at: 7 * time.Second, ssthresh: 70, cwnd: 100, retransmit: true, retransAfter: 510 * ms}}, Cuts{}},
		{"an undo raises it", handover, []sampleCut{
			{at: 7 * time.Second, ssthresh: 70, cwnd: 70, retransmit: true},
			{at: 7100 * ms, ssthresh: 100, cwnd: 100},
			{at: 16 * time.Second, ssthresh: 80, cwnd: 80, retransmit: true}}, Cuts{Sub6: 1, MmWave: 1}},
		{"a failure's window opens at the failure", failure, []sampleCut{
			{at: 9990 * ms, ssthresh: 70, cwnd: 70, retransmit: true},
			{at: 10 * time.Second, ssthresh: 50, cwnd: 1, retransmit: true}}, Cuts{Sub6: 1, Handover: 1, Timeouts: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			truth := &emu.GroundTruth{Handovers: tc.handovers}
			got, err := WindowCuts(sc, truth, cutSamples(tc.changes...))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestWindowCutsRejectsUnknownCells(t *testing.T) {
	sc, _ := fixture(t)
	truth := &emu.GroundTruth{Handovers: []emu.HandoverRecord{handoverAt(0, "c", 9820*time.Millisecond, 10*time.Second)}}
	_, err := WindowCuts(sc, truth, cutSamples())
	assert.ErrorContains(t, err, `target "c"`)
}

func TestCutsAdd(t *testing.T) {
	a := Cuts{Handover: 1, Sub6: 2, MmWave: 3, Timeouts: 1}
	b := Cuts{Handover: 10, Sub6: 20, MmWave: 30, Timeouts: 2}
	assert.Equal(t, Cuts{Handover: 11, Sub6: 22, MmWave: 33, Timeouts: 3}, a.Add(b))
	assert.Equal(t, 66, a.Add(b).Total())
}
