package replay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// TestLearnt: a store keeps the latest record of each kind of report and
// of each network's band, as the cell store does.
func TestLearnt(t *testing.T) {
	a3 := statemachine.ReportStats{Cell: lteA, RAT: diag.RATLTE, Band: diag.BandSub6, Event: diag.EventA3}
	counted := func(s statemachine.ReportStats, reports, followed uint32) statemachine.ReportStats {
		s.Reports, s.Followed = reports, followed
		return s
	}
	otherNetwork := a3
	otherNetwork.Network = "001-01"
	a5 := a3
	a5.Event = diag.EventA5
	ms := func(n ...int) []time.Duration {
		out := make([]time.Duration, len(n))
		for i, v := range n {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		name        string
		reports     []statemachine.ReportStats
		leads       []statemachine.LeadStats
		wantReports []statemachine.ReportStats
		wantLeads   []statemachine.LeadStats
	}{
		{name: "nothing"},
		{
			name:        "the latest counts of a kind",
			reports:     []statemachine.ReportStats{counted(a3, 1, 1), counted(a5, 1, 0), counted(a3, 2, 1)},
			wantReports: []statemachine.ReportStats{counted(a3, 2, 1), counted(a5, 1, 0)},
		},
		{
			name:        "networks apart",
			reports:     []statemachine.ReportStats{counted(a3, 1, 1), counted(otherNetwork, 3, 0)},
			wantReports: []statemachine.ReportStats{counted(a3, 1, 1), counted(otherNetwork, 3, 0)},
		},
		{
			name: "the latest intervals of a network's band",
			leads: []statemachine.LeadStats{{Band: diag.BandSub6, Samples: ms(60)}, {Band: diag.BandMmWave, Samples: ms(40)},
				{Band: diag.BandSub6, Samples: ms(60, 300)}, {Network: "001-01", Band: diag.BandSub6, Samples: ms(90)}},
			wantLeads: []statemachine.LeadStats{{Band: diag.BandSub6, Samples: ms(60, 300)}, {Band: diag.BandMmWave, Samples: ms(40)},
				{Network: "001-01", Band: diag.BandSub6, Samples: ms(90)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l Learnt
			for _, r := range tt.reports {
				require.NoError(t, l.SaveReportStats(r))
			}
			for _, s := range tt.leads {
				require.NoError(t, l.SaveLeadStats(s))
			}
			reports, err := l.LoadReportStats()
			require.NoError(t, err)
			assert.Equal(t, tt.wantReports, reports)
			leads, err := l.LoadLeadStats()
			require.NoError(t, err)
			assert.Equal(t, tt.wantLeads, leads)
		})
	}
}

// TestLearntKeepsItsOwnCopies: what a caller does with the intervals it
// saved or loaded changes nothing in the store.
func TestLearntKeepsItsOwnCopies(t *testing.T) {
	var l Learnt
	saved := []time.Duration{60 * time.Millisecond}
	require.NoError(t, l.SaveLeadStats(statemachine.LeadStats{Band: diag.BandSub6, Samples: saved}))
	saved[0] = time.Second
	loaded, err := l.LoadLeadStats()
	require.NoError(t, err)
	loaded[0].Samples[0] = 2 * time.Second
	again, err := l.LoadLeadStats()
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{60 * time.Millisecond}, again[0].Samples)
}
