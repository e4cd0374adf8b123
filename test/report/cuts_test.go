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
// cwnd is cwnd (0: unchanged), and retransmit adds a retransmission at at.
type sampleCut struct {
	at         time.Duration
	cwnd       uint32
	retransmit bool
}

// cutSamples: flow 0 sampled every 10 ms for 20 s, from cwnd 100, changed
// as changes say; a second flow, whose cuts do not count, retransmits and
// halves its window at every sample.
func cutSamples(changes ...sampleCut) *traffic.Measurements {
	m := &traffic.Measurements{}
	cwnd, retrans := uint32(100), uint32(0)
	for at := time.Duration(0); at <= 20*time.Second; at += 10 * time.Millisecond {
		for _, c := range changes {
			if c.at != at {
				continue
			}
			if c.cwnd > 0 {
				cwnd = c.cwnd
			}
			if c.retransmit {
				retrans++
			}
		}
		other := uint32(at/(10*time.Millisecond)) % 2
		m.TCPInfo = append(m.TCPInfo,
			traffic.TCPInfoSample{At: at, Flow: 0, Cwnd: cwnd, Retrans: retrans},
			traffic.TCPInfoSample{At: at, Flow: 1, Cwnd: 10 + 10*other, Retrans: uint32(at / time.Millisecond)})
	}
	return m
}

// cutAt is a loss episode at at that cuts the window to cwnd and restores
// it to 100 a second later.
func cutAt(at time.Duration, cwnd uint32) []sampleCut {
	return []sampleCut{{at: at, cwnd: cwnd, retransmit: true}, {at: at + time.Second, cwnd: 100}}
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
		{"startup is left out", handover, cutAt(4990*ms, 70), Cuts{}},
		{"first cut after startup", handover, cutAt(5*time.Second, 70), Cuts{Sub6: 1}},
		{"between handovers on sub-6", handover, cutAt(9810*ms, 70), Cuts{Sub6: 1}},
		{"from the report", handover, cutAt(9820*ms, 70), Cuts{Handover: 1}},
		{"until 2 s after completion", handover, cutAt(12020*ms, 70), Cuts{Handover: 1}},
		{"then between handovers on mmWave", handover, cutAt(12030*ms, 70), Cuts{MmWave: 1}},
		{"a timeout", handover, cutAt(15*time.Second, 1), Cuts{MmWave: 1, Timeouts: 1}},
		{"a retransmission without a cut (a tail loss probe)", handover, cutAt(15*time.Second, 95), Cuts{}},
		{"the cwnd falls within the episode", handover, []sampleCut{
			{at: 15 * time.Second, retransmit: true}, {at: 15400 * ms, cwnd: 70}}, Cuts{MmWave: 1}},
		{"retransmissions less than 500 ms apart are one episode", handover, []sampleCut{
			{at: 15 * time.Second, cwnd: 70, retransmit: true}, {at: 15400 * ms, cwnd: 50, retransmit: true},
			{at: 15800 * ms, retransmit: true}, {at: 17 * time.Second, cwnd: 100}}, Cuts{MmWave: 1}},
		{"two cuts at the same window are two", handover, append(cutAt(6*time.Second, 70), cutAt(8*time.Second, 70)...), Cuts{Sub6: 2}},
		{"a failure's window opens at the failure", failure, append(cutAt(9990*ms, 70), sampleCut{at: 10500 * ms, cwnd: 1, retransmit: true}),
			Cuts{Sub6: 1, Handover: 1, Timeouts: 1}},
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
