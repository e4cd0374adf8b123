package statemachine

import (
	"errors"
	"math"
	"testing"
	"time"

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
	loadedLeads      []LeadStats
	loadedT2         []T2Stats
	loadErr, saveErr error
	saved            map[string]ReportStats
	savedLeads       map[diag.Band]LeadStats
	savedT2          map[diag.Band]T2Stats
}

func (s *memoryLearntStore) LoadReportStats() ([]ReportStats, error) { return s.loaded, s.loadErr }
func (s *memoryLearntStore) LoadLeadStats() ([]LeadStats, error)     { return s.loadedLeads, s.loadErr }
func (s *memoryLearntStore) LoadT2Stats() ([]T2Stats, error)         { return s.loadedT2, s.loadErr }

func (s *memoryLearntStore) SaveT2Stats(t T2Stats) error {
	if s.saveErr != nil {
		return s.saveErr
	}
	if s.savedT2 == nil {
		s.savedT2 = map[diag.Band]T2Stats{}
	}
	s.savedT2[t.Band] = t
	return nil
}

func (s *memoryLearntStore) SaveLeadStats(l LeadStats) error {
	if s.saveErr != nil {
		return s.saveErr
	}
	if s.savedLeads == nil {
		s.savedLeads = map[diag.Band]LeadStats{}
	}
	s.savedLeads[l.Band] = l
	return nil
}

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
	require.NoError(t, h.m.UseLearntStore(store, ""))
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
	require.ErrorContains(t, h.m.UseLearntStore(broken, ""), "disk on fire")
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

// rounds runs one handoverRound a second from ms per entry of
// commandsAfter, and returns the time after them.
func rounds(h *harness, ms int, ev diag.MeasEvent, serving, neighbor diag.Cell, commandsAfter ...int) int {
	for _, after := range commandsAfter {
		for _, s := range handoverRound(ms, ev, serving, neighbor, after) {
			s(h)
		}
		ms += 1000
	}
	return ms
}

func repeat(n, v int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func durations(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

// sub6PredictionWindow is the prediction window of sub-6 serving cells, in ms.
func sub6PredictionWindow(t *testing.T, m *Machine) float64 {
	t.Helper()
	st := m.Status()
	require.Equal(t, diag.BandSub6, st.T2[0].Band)
	return st.T2[0].WindowMillis
}

// TestLeadsSurviveARestart: the report-to-command intervals a machine
// learnt reach the store, and a machine started on that store predicts
// with the window they make from its first report.
func TestLeadsSurviveARestart(t *testing.T) {
	store := &memoryLearntStore{}
	h := newHarness(t, DefaultConfig())
	require.NoError(t, h.m.UseLearntStore(store, "001-01"))
	serve(0, lteA, diag.Cell{})(h)
	rounds(h, 1000, diag.EventA3, lteA, lteB, repeat(8, 400)...)
	saved, ok := store.savedLeads[diag.BandSub6]
	require.True(t, ok)
	assert.Equal(t, LeadStats{Network: "001-01", Band: diag.BandSub6, Samples: durations(8, 400*time.Millisecond)}, saved)
	assert.Equal(t, 400*time.Millisecond, saved.Lead())

	// A command 350 ms after the report: later than 2*T2, within the
	// learnt lead.
	for _, tt := range []struct {
		name       string
		leads      []LeadStats
		wantWindow float64
		want       string
	}{
		{name: "a fresh machine", wantWindow: 292, want: OutcomeTimedOut},
		{name: "a machine restarted on the store", leads: []LeadStats{saved}, wantWindow: 400, want: OutcomeConfirmed},
	} {
		h := newHarness(t, DefaultConfig())
		require.NoError(t, h.m.UseLearntStore(&memoryLearntStore{loadedLeads: tt.leads}, "001-01"), tt.name)
		assertFirstPrediction(t, h, tt.name, tt.wantWindow, 1350, tt.want)
	}
}

// TestT2SurvivesARestart: the mean T2 a machine learnt reaches the
// store, and a machine started on that store waits 2*T2 of it for the
// command of its first prediction, where a fresh one waits 2*DefaultT2.
// Algorithm 1 alone, so that no learnt lead widens the window.
func TestT2SurvivesARestart(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Learning = false
	store := &memoryLearntStore{}
	h := newHarness(t, cfg)
	require.NoError(t, h.m.UseLearntStore(store, "001-01"))
	serve(0, lteA, diag.Cell{})(h)
	rounds(h, 1000, diag.EventA3, lteA, lteB, repeat(8, 250)...)
	saved, ok := store.savedT2[diag.BandSub6]
	require.True(t, ok)
	assert.Equal(t, T2Stats{Network: "001-01", Band: diag.BandSub6, Mean: 250 * time.Millisecond, Samples: 8}, saved)

	// A command 400 ms after the report: later than 2*DefaultT2, within
	// 2*T2 learnt.
	for _, tt := range []struct {
		name       string
		t2         []T2Stats
		network    string
		wantWindow float64
		want       string
	}{
		{name: "a fresh machine", wantWindow: 292, want: OutcomeTimedOut},
		{name: "a machine restarted on the store", t2: []T2Stats{saved}, network: "001-01", wantWindow: 500, want: OutcomeConfirmed},
		{name: "a machine of another network", t2: []T2Stats{saved}, network: "001-02", wantWindow: 292, want: OutcomeTimedOut},
		{name: "a machine of no network", t2: []T2Stats{saved}, wantWindow: 292, want: OutcomeTimedOut},
	} {
		h := newHarness(t, cfg)
		require.NoError(t, h.m.UseLearntStore(&memoryLearntStore{loadedT2: tt.t2}, tt.network), tt.name)
		assertFirstPrediction(t, h, tt.name, tt.wantWindow, 1400, tt.want)
	}
}

// assertFirstPrediction checks a machine's sub-6 prediction window (ms),
// then predicts a handover from lteA to lteB at 1000, commanded at
// commandMs, and checks the prediction's outcome.
func assertFirstPrediction(t *testing.T, h *harness, name string, wantWindow float64, commandMs int, want string) {
	t.Helper()
	assert.InDelta(t, wantWindow, sub6PredictionWindow(t, h.m), 0.001, name)
	serve(0, lteA, diag.Cell{})(h)
	meas(1000, diag.EventA3, lteA, lteB)(h)
	cmd(commandMs, diag.HOPCell, lteA, lteB)(h)
	require.NotEmpty(t, h.obs.predictions, name)
	assert.Equal(t, want, h.obs.predictions[0], name)
}

func TestRestoreT2(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		t2   []T2Stats
		// wantT2 is the sub-6 T2 in use after the restore, in ms.
		wantT2      float64
		wantInvalid uint64
	}{
		{name: "nothing stored", wantT2: 146},
		{name: "a mean of enough intervals", t2: []T2Stats{{Band: diag.BandSub6, Mean: 200 * ms, Samples: 100}}, wantT2: 200},
		{name: "a mean of fewer intervals than MinT2Samples waits for more",
			t2: []T2Stats{{Band: diag.BandSub6, Mean: 200 * ms, Samples: 4}}, wantT2: 146},
		{name: "another network's is left out", t2: []T2Stats{{Network: "001-01", Band: diag.BandSub6, Mean: 200 * ms, Samples: 9}}, wantT2: 146},
		{name: "records no network gives are skipped and counted", t2: []T2Stats{
			{Band: "cmwave", Mean: 200 * ms, Samples: 9},
			{Band: diag.BandSub6, Mean: 0, Samples: 9},
			{Band: diag.BandSub6, Mean: 1500 * ms, Samples: 9},
			{Band: diag.BandSub6, Mean: 200 * ms, Samples: 0},
		}, wantT2: 146, wantInvalid: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, DefaultConfig())
			require.NoError(t, h.m.UseLearntStore(&memoryLearntStore{loadedT2: tt.t2}, ""))
			st := h.m.Status()
			require.Equal(t, diag.BandSub6, st.T2[0].Band)
			assert.InDelta(t, tt.wantT2, st.T2[0].InUseMillis, 0.001)
			assert.Equal(t, tt.wantInvalid, st.Counters.Ignored["learnt_invalid"])
		})
	}
}

// TestUseNetwork: a machine told its network later leaves what it
// learnt of none in the store and goes on from what the store holds of
// the new one; the same network again changes nothing.
func TestUseNetwork(t *testing.T) {
	ms := time.Millisecond
	followed := ReportStats{RAT: diag.RATLTE, Band: diag.BandSub6, Event: diag.EventA5, Measured: diag.BandSub6,
		Carrier: CarrierIntraFrequency, Reports: 40, Followed: 38}
	mine := followed
	mine.Network = "460-00"
	store := &memoryLearntStore{
		loaded:      []ReportStats{followed, mine},
		loadedLeads: []LeadStats{{Network: "460-00", Band: diag.BandSub6, Samples: durations(8, 400*ms)}},
		loadedT2:    []T2Stats{{Network: "460-00", Band: diag.BandSub6, Mean: 250 * ms, Samples: 8}},
	}
	h := newHarness(t, DefaultConfig())
	require.NoError(t, h.m.UseLearntStore(store, ""))
	assert.Equal(t, []ReportStats{followed}, h.m.Learnt())
	assert.InDelta(t, 292, sub6PredictionWindow(t, h.m), 0.001)

	serve(0, lteA, diag.Cell{})(h)
	meas(1000, diag.EventA3, lteA, lteB)(h) // waits for its outcome
	require.NoError(t, h.m.UseNetwork("460-00"))
	assert.Equal(t, "460-00", h.m.learn.network)
	assert.Equal(t, []ReportStats{mine}, h.m.Learnt())
	assert.InDelta(t, 500, sub6PredictionWindow(t, h.m), 0.001, "2*T2 of the network, above its leads")
	cmd(1100, diag.HOPCell, lteA, lteB)(h)
	assert.Equal(t, []ReportStats{mine}, h.m.Learnt(), "the report of no network is not counted in the network's")

	store.loaded = nil
	require.NoError(t, h.m.UseNetwork("460-00"))
	assert.Equal(t, []ReportStats{mine}, h.m.Learnt(), "the same network is not loaded again")

	bare := newHarness(t, DefaultConfig())
	require.NoError(t, bare.m.UseNetwork("460-00"))
	assert.Equal(t, "460-00", bare.m.learn.network)
}

func TestRestoreLeads(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		leads []LeadStats
		// wantWindow is the sub-6 window after the restore, in ms.
		wantWindow  float64
		wantInvalid uint64
		// wantKept is how many sub-6 intervals the next save holds.
		wantKept int
	}{
		{name: "intervals of the band", leads: []LeadStats{{Network: "001-01", Band: diag.BandSub6, Samples: durations(8, 400*ms)}},
			wantWindow: 400, wantKept: 9},
		{name: "only the last t2Window intervals are kept",
			leads: []LeadStats{{Network: "001-01", Band: diag.BandSub6,
				Samples: append(durations(36, 900*ms), durations(t2Window, 300*ms)...)}},
			wantWindow: 300, wantKept: t2Window},
		{name: "fewer intervals than MinT2Samples do not move the window",
			leads: []LeadStats{{Network: "001-01", Band: diag.BandSub6, Samples: durations(3, 400*ms)}}, wantWindow: 292, wantKept: 4},
		{name: "another network's intervals are not this one's",
			leads: []LeadStats{{Network: "310-260", Band: diag.BandSub6, Samples: durations(8, 400*ms)}}, wantWindow: 292, wantKept: 1},
		{name: "a negative interval", leads: []LeadStats{{Network: "001-01", Band: diag.BandSub6,
			Samples: append(durations(7, 400*ms), -ms)}}, wantWindow: 292, wantInvalid: 1, wantKept: 1},
		{name: "an interval longer than a command follows a report by", leads: []LeadStats{{Network: "001-01", Band: diag.BandSub6,
			Samples: append(durations(7, 400*ms), 3*time.Second)}}, wantWindow: 292, wantInvalid: 1, wantKept: 1},
		{name: "an unknown band", leads: []LeadStats{{Network: "001-01", Band: "cmwave", Samples: durations(8, 400*ms)}},
			wantWindow: 292, wantInvalid: 1, wantKept: 1},
		{name: "no interval", leads: []LeadStats{{Network: "001-01", Band: diag.BandSub6}}, wantWindow: 292, wantInvalid: 1, wantKept: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &memoryLearntStore{loadedLeads: tt.leads}
			h := newHarness(t, DefaultConfig())
			require.NoError(t, h.m.UseLearntStore(store, "001-01"))
			assert.InDelta(t, tt.wantWindow, sub6PredictionWindow(t, h.m), 0.001)
			assert.Equal(t, tt.wantInvalid, h.m.Status().Counters.Ignored["learnt_invalid"])

			serve(0, lteA, diag.Cell{})(h)
			rounds(h, 1000, diag.EventA3, lteA, lteB, 250)
			saved := store.savedLeads[diag.BandSub6].Samples
			require.Len(t, saved, tt.wantKept)
			assert.Equal(t, 250*ms, saved[len(saved)-1], "the newest interval comes last")
		})
	}
}

// TestLearntNetworks: what was learnt in one mobile network never
// predicts in another, though its cells have the same identities.
func TestLearntNetworks(t *testing.T) {
	followedA5 := func(network string) ReportStats {
		return ReportStats{Network: network, RAT: diag.RATLTE, Band: diag.BandSub6, Event: diag.EventA5, Measured: diag.BandSub6,
			Carrier: CarrierIntraFrequency, Reports: 40, Followed: 38}
	}
	tests := []struct {
		name    string
		stored  []ReportStats
		network string
		want    bool
	}{
		{"the network that followed it", []ReportStats{followedA5("310-260")}, "310-260", true},
		{"another network", []ReportStats{followedA5("310-260")}, "001-01", false},
		{"counts of no network are not a known network's", []ReportStats{followedA5("")}, "001-01", false},
		{"a host that knows no network keeps its counts", []ReportStats{followedA5("")}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &memoryLearntStore{loaded: tt.stored}
			h := newHarness(t, DefaultConfig())
			require.NoError(t, h.m.UseLearntStore(store, tt.network))
			assert.Zero(t, h.m.Status().Counters.Ignored["learnt_invalid"], "another network's counts are not invalid")
			serve(0, lteA, diag.Cell{})(h)
			assert.Equal(t, tt.want, predictsNow(h, 1000, diag.EventA5, lteA, lteB))
			cmd(1050, diag.HOPCell, lteA, lteB)(h)
			require.NotEmpty(t, store.saved)
			for _, s := range store.saved {
				assert.Equal(t, tt.network, s.Network, "saved under the machine's network: %+v", s)
			}
			for _, s := range h.m.Learnt() {
				assert.Equal(t, tt.network, s.Network)
			}
		})
	}
}

// priorStore is a learnt store that is also a LearntPrior: what peers
// learnt of cell.
type priorStore struct {
	memoryLearntStore
	cell diag.CellKey
	// share and reports answer for the reports of every kind in cell.
	share   float64
	reports uint32
	// lead and samples answer for every band, when samples > 0.
	lead    time.Duration
	samples int
}

func (p *priorStore) ReportPrior(cell diag.CellKey, _ diag.MeasEvent, _ diag.Band, _ string) (float64, uint32, bool) {
	return p.share, p.reports, cell == p.cell && p.reports > 0
}

func (p *priorStore) LeadPrior(diag.Band) (time.Duration, int, bool) {
	return p.lead, p.samples, p.samples > 0
}

func TestReportPrior(t *testing.T) {
	tests := []struct {
		name string
		cfg  func(*Config)
		// prior is what peers saw in their cell.
		prior priorStore
		// local are this host's rounds of the probed report at lteA.
		local    []int
		probe    diag.MeasEvent
		neighbor diag.Cell
		want     bool
	}{
		{name: "a kind peers saw followed predicts in a cell never served here",
			prior: priorStore{cell: lteA.Key(), share: 1, reports: 20}, probe: diag.EventA5, neighbor: lteB, want: true},
		{name: "without peers Algorithm 1 ignores it",
			probe: diag.EventA5, neighbor: lteB, want: false},
		{name: "a peer's single report weighs one report",
			prior: priorStore{cell: lteA.Key(), share: 1, reports: 1}, probe: diag.EventA5, neighbor: lteB, want: false},
		{name: "peers cannot silence Algorithm 1, however many reports they claim",
			prior: priorStore{cell: lteA.Key(), share: 0, reports: math.MaxUint32}, probe: diag.EventA3, neighbor: lteB, want: true},
		{name: "this host's outcomes in the cell win",
			prior: priorStore{cell: lteA.Key(), share: 1, reports: 20}, local: []int{0, 0}, probe: diag.EventA5, neighbor: lteB, want: false},
		{name: "peers of another cell say nothing of this one",
			prior: priorStore{cell: lteB.Key(), share: 1, reports: 20}, probe: diag.EventA5, neighbor: lteB, want: false},
		{name: "a share above one is ignored",
			prior: priorStore{cell: lteA.Key(), share: 1.5, reports: 20}, probe: diag.EventA5, neighbor: lteB, want: false},
		{name: "a share that is not a number is ignored",
			prior: priorStore{cell: lteA.Key(), share: math.NaN(), reports: 20}, probe: diag.EventA5, neighbor: lteB, want: false},
		{name: "Algorithm 1 alone asks no peer", cfg: func(c *Config) { c.Learning = false },
			prior: priorStore{cell: lteA.Key(), share: 1, reports: 20}, probe: diag.EventA5, neighbor: lteB, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			h := newHarness(t, cfg)
			require.NoError(t, h.m.UseLearntStore(&tt.prior, "001-01"))
			serve(0, lteA, diag.Cell{})(h)
			ms := rounds(h, 1000, tt.probe, lteA, tt.neighbor, tt.local...)
			assert.Equal(t, tt.want, predictsNow(h, ms, tt.probe, lteA, tt.neighbor))
		})
	}
}

func TestLeadPrior(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		prior priorStore
		// local are this host's rounds of predicted A3 reports and how
		// long after them the command came.
		local      []int
		wantWindow float64
	}{
		{name: "no peer", wantWindow: 292},
		{name: "the peers' lead stands in", prior: priorStore{lead: 400 * ms, samples: 64}, wantWindow: 400},
		{name: "a peer cannot stretch the window beyond a second", prior: priorStore{lead: 5 * time.Second, samples: 64}, wantWindow: 1000},
		{name: "a lead resting on fewer intervals than MinT2Samples is ignored", prior: priorStore{lead: 400 * ms, samples: 4}, wantWindow: 292},
		{name: "a lead that is not positive is ignored", prior: priorStore{lead: -ms, samples: 64}, wantWindow: 292},
		{name: "this host's own intervals win once there are enough", prior: priorStore{lead: 900 * ms, samples: 64},
			local: repeat(5, 100), wantWindow: 200},
		{name: "until then the peers' lead holds", prior: priorStore{lead: 900 * ms, samples: 64},
			local: repeat(4, 100), wantWindow: 900},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, DefaultConfig())
			require.NoError(t, h.m.UseLearntStore(&tt.prior, "001-01"))
			serve(0, lteA, diag.Cell{})(h)
			rounds(h, 1000, diag.EventA3, lteA, lteB, tt.local...)
			assert.InDelta(t, tt.wantWindow, sub6PredictionWindow(t, h.m), 0.001)
		})
	}
}

// TestLearningCountsARepeatedReportOnce: a report and the repeats that
// keep coming within a prediction window of each other wait for one
// command, for a second from the first.
func TestLearningCountsARepeatedReportOnce(t *testing.T) {
	pairStats := func(h *harness) ReportStats {
		for _, s := range h.m.Learnt() {
			if s.Event == diag.EventA5 && !s.Neighbor.IsZero() {
				return s
			}
		}
		return ReportStats{}
	}
	tests := []struct {
		name    string
		reports []int
		// commandMs is the command's time, 0 for none.
		commandMs                 int
		wantReports, wantFollowed uint32
	}{
		{name: "repeats within a window of each other are one report", reports: []int{1000, 1250, 1500, 1750},
			wantReports: 1},
		{name: "a command after the last repeat follows it", reports: []int{1000, 1250, 1500}, commandMs: 1600,
			wantReports: 1, wantFollowed: 1},
		{name: "a repeat after the window is another report", reports: []int{1000, 1400},
			wantReports: 2},
		{name: "a repeat a second after the first report is another report", reports: []int{1000, 1250, 1500, 1750, 2000, 2040},
			wantReports: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, DefaultConfig())
			serve(0, lteA, diag.Cell{})(h)
			for _, ms := range tt.reports {
				meas(ms, diag.EventA5, lteA, lteB)(h)
			}
			if tt.commandMs > 0 {
				cmd(tt.commandMs, diag.HOPCell, lteA, lteB)(h)
				done(tt.commandMs+20, lteB)(h)
			}
			// Every report's outcome is known a second on.
			meas(tt.reports[len(tt.reports)-1]+1500, diag.EventA2, lteA, diag.Cell{})(h)
			s := pairStats(h)
			assert.Equal(t, tt.wantReports, s.Reports, "reports")
			assert.Equal(t, tt.wantFollowed, s.Followed, "followed")
		})
	}
}

// TestInterFrequencyTriggerFollowsTheMajority: an A4 or A5 towards
// another carrier predicts while the network followed at least half of
// those it saw, from the first one on.
func TestInterFrequencyTriggerFollowsTheMajority(t *testing.T) {
	lteOther := diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 4, ARFCN: 2175}
	tests := []struct {
		name          string
		ev            diag.MeasEvent
		commandsAfter []int
		want          bool
	}{
		{name: "the first A5 predicts", ev: diag.EventA5, want: true},
		{name: "the first A4 predicts", ev: diag.EventA4, want: true},
		{name: "one unanswered A5 stops it", ev: diag.EventA5, commandsAfter: []int{0}, want: false},
		{name: "half followed still predicts", ev: diag.EventA5, commandsAfter: []int{60, 0}, want: true},
		{name: "less than half followed stops", ev: diag.EventA5, commandsAfter: []int{60, 0, 0}, want: false},
		{name: "followed again, it predicts again", ev: diag.EventA5, commandsAfter: []int{0, 60, 60}, want: true},
		{name: "an A4 the network always follows", ev: diag.EventA4, commandsAfter: repeat(6, 80), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, DefaultConfig())
			serve(0, lteA, diag.Cell{})(h)
			ms := rounds(h, 1000, tt.ev, lteA, lteOther, tt.commandsAfter...)
			// Half a second on, the last round's outcome is known.
			assert.Equal(t, tt.want, predictsNow(h, ms+500, tt.ev, lteA, lteOther))
		})
	}
}

// TestReportCrossingAHandover: a report naming a cell the UE was just
// handed over to crossed the command, and neither predicts nor counts;
// after a prediction window, or naming another cell, a report predicts
// as before.
func TestReportCrossingAHandover(t *testing.T) {
	tests := []struct {
		name string
		cfg  func(*Config)
		// A report naming report at 1000 ms is answered by a command of
		// kind towards target, which completes 20 ms later.
		kind           diag.HOKind
		report, target diag.Cell
		// The probe is a report of probeEv at probeMs, from probeFrom.
		probeMs                  int
		probeEv                  diag.MeasEvent
		probeFrom, probeNeighbor diag.Cell
		wantPrediction           bool
		wantIgnored              uint64
		// wantReported is how many B1 reports the band's counts hold.
		wantReported uint32
	}{
		{name: "a B1 naming the secondary cell just added", kind: diag.HOSCGAdd, report: nrA, target: nrA,
			probeMs: 1100, probeEv: diag.EventB1, probeFrom: lteA, probeNeighbor: nrA, wantIgnored: 1, wantReported: 1},
		{name: "an A3 naming the primary cell just handed over to", kind: diag.HOPCell, report: lteB, target: lteB,
			probeMs: 1100, probeEv: diag.EventA3, probeFrom: lteB, probeNeighbor: lteB, wantIgnored: 1},
		{name: "a B1 naming another NR cell", kind: diag.HOSCGAdd, report: nrA, target: nrA,
			probeMs: 1100, probeEv: diag.EventB1, probeFrom: lteA, probeNeighbor: nrB, wantPrediction: true, wantReported: 2},
		{name: "a B1 naming the secondary cell a window after its addition", kind: diag.HOSCGAdd, report: nrA, target: nrA,
			probeMs: 1500, probeEv: diag.EventB1, probeFrom: lteA, probeNeighbor: nrA, wantPrediction: true, wantReported: 2},
		{name: "Algorithm 1 alone predicts on it", cfg: func(c *Config) { c.Learning = false }, kind: diag.HOSCGAdd,
			report: nrA, target: nrA, probeMs: 1100, probeEv: diag.EventB1, probeFrom: lteA, probeNeighbor: nrA, wantPrediction: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			h := newHarness(t, cfg)
			serve(0, lteA, diag.Cell{})(h)
			ev := diag.EventA3
			if tt.report.RAT == diag.RATNR {
				ev = diag.EventB1
			}
			meas(1000, ev, lteA, tt.report)(h)
			require.NotNil(t, h.m.Status().Prediction)
			cmd(1060, tt.kind, lteA, tt.target)(h)
			done(1080, tt.target)(h)
			assert.Equal(t, tt.wantPrediction, predictsNow(h, tt.probeMs, tt.probeEv, tt.probeFrom, tt.probeNeighbor))
			st := h.m.Status()
			assert.Equal(t, tt.wantIgnored, st.Counters.Ignored[ignoredReportOfServingCell])
			// Every report's outcome is known a second and a half on.
			meas(tt.probeMs+1500, diag.EventA2, tt.probeFrom, diag.Cell{})(h)
			if cfg.Learning && tt.probeEv == diag.EventB1 {
				var reported uint32
				for _, s := range h.m.Learnt() {
					if s.Event == diag.EventB1 && s.Cell.IsZero() {
						reported += s.Reports
					}
				}
				assert.Equal(t, tt.wantReported, reported, "B1 reports counted at the band")
			}
		})
	}
}
