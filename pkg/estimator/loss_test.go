package estimator

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestLossPersists: retransmissions in half of a second's samples mark
// senders that do not shrink on loss, for lossMemory; a loss-based
// sender's recovery, a few samples long, does not.
func TestLossPersists(t *testing.T) {
	tests := []struct {
		name    string
		lossyMs []float64 // samples carrying retransmitted bytes
		queryMs float64
		want    bool
	}{
		{"nothing lost", nil, 1000, false},
		{"one recovery: three samples", []float64{100, 200, 300}, 400, false},
		{"four samples a second apart from a fifth", []float64{100, 200, 300, 400, 1500}, 1600, false},
		{"five samples within a second", []float64{100, 200, 300, 400, 500}, 600, true},
		{"still known 30 s later", []float64{100, 200, 300, 400, 500}, 30_500, true},
		{"forgotten after 30 s", []float64{100, 200, 300, 400, 500}, 30_501, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEstimator(t, nil)
			e.AddRetransmitted(at(50), 0) // a sample without loss counts for nothing
			for _, ms := range tc.lossyMs {
				e.AddRetransmitted(at(ms), 1448)
			}
			assert.Equal(t, tc.want, e.LossPersists(at(tc.queryMs)))
		})
	}
}

// TestLossPersistsAcrossCells: it is the senders', not the cell's.
func TestLossPersistsAcrossCells(t *testing.T) {
	e := newEstimator(t, nil)
	for ms := 0.0; ms <= 400; ms += 100 {
		e.AddRetransmitted(at(ms), 1448)
	}
	e.SetServing(lteA, at(500))
	assert.True(t, e.LossPersists(at(600)))
}
