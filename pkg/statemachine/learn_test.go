package statemachine

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

// handoverRound is one report at ms, a command commandAfter later when
// commandAfter > 0, and its completion; the machine is back in Stable
// well before the next round (rounds are a second apart).
func handoverRound(ms int, ev diag.MeasEvent, serving, neighbor diag.Cell, commandAfter int) []step {
	steps := []step{meas(ms, ev, serving, neighbor)}
	if commandAfter > 0 {
		steps = append(steps, cmd(ms+commandAfter, diag.HOPCell, serving, serving), done(ms+commandAfter+20, serving))
	}
	return append(steps, tick(ms+900), tick(ms+990))
}

// predictsNow reports whether a report of ev at ms makes the machine
// predict, without changing what it learnt: the report is withdrawn by
// a command right away.
func predictsNow(h *harness, ms int, ev diag.MeasEvent, serving, neighbor diag.Cell) bool {
	meas(ms, ev, serving, neighbor)(h)
	return h.m.Status().Prediction != nil
}

func TestLearningPredictor(t *testing.T) {
	lteC := diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 3, ARFCN: 1850}
	lteOther := diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 4, ARFCN: 2175}
	tests := []struct {
		name string
		cfg  func(*Config)
		// rounds of a report and whether a command followed (ms after).
		ev            diag.MeasEvent
		neighbor      diag.Cell
		commandsAfter []int
		// probe is the report asked about at the end.
		probe         diag.MeasEvent
		probeNeighbor diag.Cell
		want          bool
	}{
		{name: "Algorithm 1 decides an A3 before anything is learnt", ev: diag.EventA3, neighbor: lteB,
			probe: diag.EventA3, probeNeighbor: lteB, want: true},
		{name: "Algorithm 1 ignores an LTE A5 before anything is learnt", ev: diag.EventA5, neighbor: lteB,
			probe: diag.EventA5, probeNeighbor: lteB, want: false},
		{name: "an A5 the network follows becomes a prediction", ev: diag.EventA5, neighbor: lteB,
			commandsAfter: []int{60, 70, 50, 80, 65}, probe: diag.EventA5, probeNeighbor: lteB, want: true},
		{name: "what a band taught reaches a neighbour met for the first time", ev: diag.EventA5, neighbor: lteB,
			commandsAfter: []int{60, 70, 50, 80, 65, 60}, probe: diag.EventA5, probeNeighbor: lteC, want: true},
		{name: "an A3 the network never follows stops predicting", ev: diag.EventA3, neighbor: lteB,
			commandsAfter: []int{0, 0, 0, 0, 0}, probe: diag.EventA3, probeNeighbor: lteB, want: false},
		{name: "a few unfollowed A3 do not overrule Algorithm 1", ev: diag.EventA3, neighbor: lteB,
			commandsAfter: []int{0, 60, 0, 60, 60}, probe: diag.EventA3, probeNeighbor: lteB, want: true},
		{name: "an LTE A5 towards another carrier predicts before anything is learnt", ev: diag.EventA5, neighbor: lteOther,
			probe: diag.EventA5, probeNeighbor: lteOther, want: true},
		{name: "so does an A4 towards another carrier", ev: diag.EventA4, neighbor: lteOther,
			probe: diag.EventA4, probeNeighbor: lteOther, want: true},
		{name: "an inter-frequency A5 the network never follows stops predicting", ev: diag.EventA5, neighbor: lteOther,
			commandsAfter: []int{0, 0, 0, 0, 0}, probe: diag.EventA5, probeNeighbor: lteOther, want: false},
		{name: "what the serving carrier's A5 taught does not reach another carrier", ev: diag.EventA5, neighbor: lteB,
			commandsAfter: []int{0, 0, 0, 0, 0, 0, 0, 0}, probe: diag.EventA5, probeNeighbor: lteOther, want: true},
		{name: "Algorithm 1 alone ignores an inter-frequency A5", cfg: func(c *Config) { c.Learning = false },
			ev: diag.EventA5, neighbor: lteOther, probe: diag.EventA5, probeNeighbor: lteOther, want: false},
		{name: "without learning Algorithm 1 alone decides", cfg: func(c *Config) { c.Learning = false },
			ev: diag.EventA5, neighbor: lteB, commandsAfter: []int{60, 70, 50, 80, 65, 60, 60, 60},
			probe: diag.EventA5, probeNeighbor: lteB, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			h := newHarness(t, cfg)
			serve(0, lteA, diag.Cell{})(h)
			ms := 1000
			for _, after := range tt.commandsAfter {
				for _, s := range handoverRound(ms, tt.ev, lteA, tt.neighbor, after) {
					s(h)
				}
				ms += 1000
			}
			assert.Equal(t, tt.want, predictsNow(h, ms, tt.probe, lteA, tt.probeNeighbor))
			if !cfg.Learning {
				assert.Empty(t, h.m.Learnt())
			}
		})
	}
}

func TestLearningCounts(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	serve(0, lteA, diag.Cell{})(h)
	// A report, its periodic repeat while it waits, and a command: one
	// report followed, at the band, cell and neighbour scopes.
	meas(1000, diag.EventA5, lteA, lteB)(h)
	meas(1040, diag.EventA5, lteA, lteB)(h)
	cmd(1080, diag.HOPCell, lteA, lteB)(h)
	done(1100, lteB)(h)
	// A report no command follows is counted once a command can no
	// longer answer it.
	meas(3000, diag.EventA2, lteB, diag.Cell{})(h)
	meas(3900, diag.EventA4, lteB, diag.Cell{})(h)
	pendingA2 := countOf(h.m.Learnt(), diag.EventA2)
	meas(4001, diag.EventA4, lteB, diag.Cell{})(h)

	byScope := map[string]ReportStats{}
	for _, s := range h.m.Learnt() {
		scope := "band"
		switch {
		case !s.Neighbor.IsZero():
			scope = "pair"
		case !s.Cell.IsZero():
			scope = "cell"
		}
		byScope[string(s.Event)+"/"+scope] = s
	}
	for _, scope := range []string{"band", "cell", "pair"} {
		s, ok := byScope["A5/"+scope]
		require.True(t, ok, scope)
		assert.Equal(t, uint32(1), s.Reports, scope)
		assert.Equal(t, uint32(1), s.Followed, scope)
		assert.Equal(t, diag.BandSub6, s.Measured, scope)
	}
	assert.Equal(t, lteA, byScope["A5/pair"].Cell)
	assert.Equal(t, lteB, byScope["A5/pair"].Neighbor)
	a2 := byScope["A2/cell"]
	assert.Equal(t, uint32(1), a2.Reports)
	assert.Zero(t, a2.Followed)
	assert.Empty(t, a2.Measured, "an A2 names no neighbour")
	_, hasPair := byScope["A2/pair"]
	assert.False(t, hasPair)
	assert.Zero(t, pendingA2, "not counted while a command may still answer it")
}

func TestCarrierRelation(t *testing.T) {
	tests := []struct {
		name              string
		serving, measured diag.Cell
		want              string
	}{
		{"same carrier", lteA, lteB, CarrierIntraFrequency},
		{"another carrier", lteA, diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 4, ARFCN: 2175}, CarrierInterFrequency},
		{"another RAT", lteA, nrA, CarrierInterRAT},
		{"no neighbour", lteA, diag.Cell{}, ""},
		{"carrier unknown", diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6}, lteB, ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, carrierRelation(tt.serving, tt.measured), tt.name)
	}
}

func countOf(stats []ReportStats, ev diag.MeasEvent) uint32 {
	var n uint32
	for _, s := range stats {
		if s.Event == ev {
			n += s.Reports
		}
	}
	return n
}

func TestLearningWindowFollowsLateCommands(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	serve(0, lteA, diag.Cell{})(h)
	ms := 1000
	// The network answers A3 reports 400 ms late, after 2*T2 (292 ms).
	for range 8 {
		for _, s := range handoverRound(ms, diag.EventA3, lteA, lteB, 400) {
			s(h)
		}
		ms += 1000
	}
	st := h.m.Status()
	require.Equal(t, diag.BandSub6, st.T2[0].Band)
	assert.GreaterOrEqual(t, st.T2[0].WindowMillis, 400.0, "the window covers the learnt report-to-command interval")
	assert.LessOrEqual(t, st.T2[0].WindowMillis, 1000.0)
	meas(ms, diag.EventA3, lteA, lteB)(h)
	cmd(ms+400, diag.HOPCell, lteA, lteB)(h)
	assert.Equal(t, OutcomeConfirmed, h.obs.predictions[len(h.obs.predictions)-1], "a command 400 ms late confirms")

	h = newHarness(t, DefaultConfig())
	serve(0, lteA, diag.Cell{})(h)
	ms = 1000
	for range 8 {
		// Commands further than a second away answer other reports.
		for _, s := range handoverRound(ms, diag.EventA3, lteA, lteB, 0) {
			s(h)
		}
		cmd(ms+950, diag.HOPCell, lteA, lteB)(h)
		done(ms+970, lteB)(h)
		ms += 2000
	}
	assert.LessOrEqual(t, h.m.Status().T2[0].WindowMillis, 1000.0)

	cfg := DefaultConfig()
	cfg.Learning = false
	h = newHarness(t, cfg)
	assert.InDelta(t, 292, h.m.Status().T2[0].WindowMillis, 0.001, "2*T2 without learning")
}

// memoryLearntStore is a LearntStore in memory.
type memoryLearntStore struct {
	loaded           []ReportStats
	loadErr, saveErr error
	saved            map[string]ReportStats
}

func (s *memoryLearntStore) LoadReportStats() ([]ReportStats, error) { return s.loaded, s.loadErr }

func (s *memoryLearntStore) SaveReportStats(r ReportStats) error {
	if s.saveErr != nil {
		return s.saveErr
	}
	if s.saved == nil {
		s.saved = map[string]ReportStats{}
	}
	s.saved[r.Cell.String()+r.Neighbor.String()+string(r.Event)] = r
	return nil
}

func TestLearntStore(t *testing.T) {
	followed := ReportStats{RAT: diag.RATLTE, Band: diag.BandSub6, Event: diag.EventA5, Measured: diag.BandSub6,
		Carrier: CarrierIntraFrequency, Reports: 40, Followed: 38}
	invalid := []ReportStats{
		{RAT: diag.RATLTE, Band: diag.BandSub6, Event: diag.EventA3, Carrier: "same", Reports: 1},
		{RAT: "gsm", Band: diag.BandSub6, Event: diag.EventA3, Reports: 1},
		{RAT: diag.RATLTE, Band: "cmwave", Event: diag.EventA3, Reports: 1},
		{RAT: diag.RATLTE, Band: diag.BandSub6, Event: diag.EventA3, Reports: 1, Followed: 2},
		{RAT: diag.RATLTE, Band: diag.BandSub6, Event: diag.EventA3, Neighbor: lteB, Reports: 1},
	}
	store := &memoryLearntStore{loaded: append([]ReportStats{followed}, invalid...)}
	h := newHarness(t, DefaultConfig())
	require.NoError(t, h.m.UseLearntStore(store))
	assert.Equal(t, []ReportStats{followed}, h.m.Learnt(), "invalid records are skipped")
	assert.Equal(t, uint64(len(invalid)), h.m.Status().Counters.Ignored["learnt_invalid"])

	serve(0, lteA, diag.Cell{})(h)
	assert.True(t, predictsNow(h, 1000, diag.EventA5, lteA, lteB), "what the store holds predicts from the start")
	cmd(1050, diag.HOPCell, lteA, lteB)(h)
	for k, s := range store.saved {
		if s.Event != diag.EventA5 {
			delete(store.saved, k) // the reports of serve
		}
	}
	assert.Len(t, store.saved, 3, "every scope of the followed report is saved")
	for _, s := range store.saved {
		want := uint32(1)
		if s.Cell.IsZero() {
			want += followed.Followed // the band's counts went on from the stored ones
		}
		assert.Equal(t, want, s.Followed, "%+v", s)
	}

	store.saveErr = errors.New("store closed")
	meas(3000, diag.EventA3, lteB, lteA)(h)
	cmd(3050, diag.HOPCell, lteB, lteA)(h)
	assert.Positive(t, h.m.Status().Counters.Ignored["learnt_save_failed"])

	broken := &memoryLearntStore{loadErr: errors.New("disk on fire")}
	h = newHarness(t, DefaultConfig())
	require.Error(t, h.m.UseLearntStore(broken))
	assert.Empty(t, h.m.Learnt())
}

func TestLearntRoundTrip(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	serve(0, lteA, diag.Cell{})(h)
	for i := range 3 {
		for _, s := range handoverRound(1000+1000*i, diag.EventB1, lteA, nrA, 50) {
			s(h)
		}
	}
	learnt := h.m.Learnt()
	require.NotEmpty(t, learnt)
	assert.Equal(t, len(learnt), h.m.Status().LearntReportKinds)
	other := newHarness(t, DefaultConfig())
	other.m.RestoreLearnt(learnt)
	assert.Equal(t, learnt, other.m.Learnt())
}
