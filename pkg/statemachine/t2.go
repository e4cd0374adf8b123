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
}
