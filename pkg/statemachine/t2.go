package statemachine

import (
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
)

// t2Window is how many recent intervals the running mean of T2 weighs
// evenly before it starts forgetting the oldest: it follows a network
// whose configuration changes along a route.
const t2Window = 64

// lateCommandT2Factor bounds how long after a timed-out prediction a
// command still counts as its outcome for learning T2: the tail of the
// report-to-command distribution reaches several times its mean (p90 vs
// p50 in data/handover-timing.md), but a later command is unrelated.
const lateCommandT2Factor = 4

// t2Mean is the learnt mean interval from a predicting measurement report
// to the handover command, for one band of serving cell.
type t2Mean struct {
	mean    time.Duration
	weight  int
	samples int
}

func (t *t2Mean) add(sample time.Duration) {
	t.samples++
	t.weight = min(t.weight+1, t2Window)
	t.mean += (sample - t.mean) / time.Duration(t.weight)
}

// t2For returns T2 for a serving cell of band: the learnt mean once
// enough intervals were measured, else Config.DefaultT2.
func (m *Machine) t2For(band diag.Band) time.Duration {
	if t, ok := m.t2[bandKey(band)]; ok && t.samples >= m.cfg.MinT2Samples {
		return t.mean
	}
	return m.cfg.DefaultT2
}

func (m *Machine) learnT2(band diag.Band, sample time.Duration) {
	if sample <= 0 {
		return
	}
	key := bandKey(band)
	t, ok := m.t2[key]
	if !ok {
		t = &t2Mean{}
		m.t2[key] = t
	}
	t.add(sample)
	m.learn.saveT2(key, t)
}

// T2Stats is the learnt mean T2 of the serving cells of one band of a
// network, and how many intervals it rests on.
type T2Stats struct {
	Network string
	Band    diag.Band
	Mean    time.Duration
	Samples int
}

// saveT2 stores the mean T2 of band.
func (l *learner) saveT2(band diag.Band, t *t2Mean) {
	if l.store == nil {
		return
	}
	if err := l.store.SaveT2Stats(T2Stats{Network: l.network, Band: band, Mean: t.mean, Samples: t.samples}); err != nil {
		l.saveErrors++
	}
}

// restoreT2 replaces the means of T2 with the machine's network's of
// stats. The mean goes on weighing at most t2Window intervals, as if
// they had been learnt here. A record of an unknown band, of no
// interval, or with a mean no command can follow a report by, is
// skipped and counted.
func (m *Machine) restoreT2(stats []T2Stats) {
	clear(m.t2)
	for _, s := range stats {
		if s.Network != m.learn.network {
			continue
		}
		if (s.Band != diag.BandSub6 && s.Band != diag.BandMmWave) || s.Samples <= 0 || s.Mean <= 0 || s.Mean > maxCommandLead {
			m.cnt.ignored["learnt_invalid"]++
			continue
		}
		m.t2[s.Band] = &t2Mean{mean: s.Mean, weight: min(s.Samples, t2Window), samples: s.Samples}
	}
}
