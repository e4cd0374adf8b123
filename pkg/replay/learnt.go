package replay

import (
	"maps"
	"slices"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// Learnt is what the machine learnt, held in memory as m2hod's cell
// store holds it on disk: the statemachine.LearntStore a replay's
// machines restore from and save every change to, report counts,
// report-to-command intervals and the mean T2 alike. Given to the replay of
// the next recording, it carries both over, as the cell store does
// across drives. The zero value holds nothing. It is not safe for
// concurrent use.
type Learnt struct {
	// reports and leads are in the order first saved; the indexes find
	// a kind's or a band's record, as the machine saves on every
	// outcome.
	reports     []statemachine.ReportStats
	reportIndex map[statemachine.ReportStats]int
	leads       []statemachine.LeadStats
	leadIndex   map[leadKey]int
	// t2 are the means of T2, by network and band.
	t2 map[leadKey]statemachine.T2Stats
}

var _ statemachine.LearntStore = (*Learnt)(nil)

type leadKey struct {
	network string
	band    diag.Band
}

// LoadReportStats returns the latest counts of every kind of report.
func (l *Learnt) LoadReportStats() ([]statemachine.ReportStats, error) {
	return slices.Clone(l.reports), nil
}

// SaveReportStats records the latest counts of a kind of report.
func (l *Learnt) SaveReportStats(s statemachine.ReportStats) error {
	// A kind is its stats without the counts.
	kind := s
	kind.Reports, kind.Followed = 0, 0
	if i, ok := l.reportIndex[kind]; ok {
		l.reports[i] = s
		return nil
	}
	if l.reportIndex == nil {
		l.reportIndex = make(map[statemachine.ReportStats]int)
	}
	l.reportIndex[kind] = len(l.reports)
	l.reports = append(l.reports, s)
	return nil
}

// LoadLeadStats returns the latest intervals of every network and band.
func (l *Learnt) LoadLeadStats() ([]statemachine.LeadStats, error) {
	var out []statemachine.LeadStats
	for _, s := range l.leads {
		s.Samples = slices.Clone(s.Samples)
		out = append(out, s)
	}
	return out, nil
}

// SaveLeadStats records the latest intervals of a network and band.
func (l *Learnt) SaveLeadStats(s statemachine.LeadStats) error {
	// Its own copy, as a store on disk has: what the caller does with
	// its slice afterwards changes nothing here.
	s.Samples = slices.Clone(s.Samples)
	key := leadKey{network: s.Network, band: s.Band}
	if i, ok := l.leadIndex[key]; ok {
		l.leads[i] = s
		return nil
	}
	if l.leadIndex == nil {
		l.leadIndex = make(map[leadKey]int)
	}
	l.leadIndex[key] = len(l.leads)
	l.leads = append(l.leads, s)
	return nil
}

// LoadT2Stats returns the latest mean T2 of every network and band.
func (l *Learnt) LoadT2Stats() ([]statemachine.T2Stats, error) {
	return slices.Collect(maps.Values(l.t2)), nil
}

// SaveT2Stats records the latest mean T2 of a network and band.
func (l *Learnt) SaveT2Stats(s statemachine.T2Stats) error {
	if l.t2 == nil {
		l.t2 = make(map[leadKey]statemachine.T2Stats)
	}
	l.t2[leadKey{network: s.Network, band: s.Band}] = s
	return nil
}
