package fleet

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/natstest"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// TestPeersLearntAnswersPriors: what peers published of a cell's reports
// and of their band's lead comes back as priors, combined by the lower
// median, aged, and gone with the entries that brought it.
func TestPeersLearntAnswersPriors(t *testing.T) {
	srv := natstest.Start(t)
	kv := bucket(t, srv.URL())
	var clk clock
	c := startClient(t, srv.URL(), "bus-1", withClock(&clk), withMaxAge(time.Hour))
	require.Eventually(t, connected(c), waitFor, tick)
	now := time.Now().UTC()
	a5 := func(reports, followed uint32) []reportCount {
		return []reportCount{{Event: diag.EventA5, Measured: diag.BandSub6, Carrier: statemachine.CarrierInterFrequency,
			Reports: reports, Followed: followed}}
	}
	peer := func(cell diag.Cell, reports []reportCount, leadMs float64, samples int) []byte {
		e := entry{Version: entryVersion, RAT: cell.RAT, Band: cell.Band, ARFCN: cell.ARFCN, PCI: cell.PCI, Updated: now, Reports: reports}
		if samples > 0 {
			e.Lead = &leadSummary{Quantile: 0.95, Millis: leadMs, Samples: samples}
		}
		b, err := json.Marshal(e)
		require.NoError(t, err)
		return b
	}
	put(t, kv, cellKey(network, cellB, "honest-1"), peer(cellB, a5(10, 9), 400, 64))
	put(t, kv, cellKey(network, cellB, "honest-2"), peer(cellB, a5(20, 16), 500, 30))
	put(t, kv, cellKey(network, cellB, "liar"), peer(cellB, a5(1000, 0), 2000, 64))
	// Another network's entries are not watched.
	put(t, kv, cellKey("310-260", cellB, "elsewhere"), peer(cellB, a5(50, 50), 1500, 64))
	require.Eventually(t, func() bool { return c.Stats().Entries == 3 }, waitFor, tick)
	assert.Empty(t, c.Stats().Malformed)

	type answer struct {
		share   float64
		reports uint32
		ok      bool
	}
	reportPrior := func(cell diag.Cell, carrier string) answer {
		share, reports, ok := c.ReportPrior(cell.Key(), diag.EventA5, diag.BandSub6, carrier)
		return answer{share, reports, ok}
	}
	type leadAnswer struct {
		lead    time.Duration
		samples int
		ok      bool
	}
	leadPrior := func(band diag.Band) leadAnswer {
		lead, samples, ok := c.LeadPrior(band)
		return leadAnswer{lead, samples, ok}
	}
	ms := time.Millisecond
	assert.Equal(t, answer{0.8, 1030, true}, reportPrior(cellB, statemachine.CarrierInterFrequency),
		"the lower median of 0, 0.8 and 0.9: one liar among three moves nothing")
	assert.Equal(t, answer{}, reportPrior(cellB, statemachine.CarrierIntraFrequency), "another kind")
	assert.Equal(t, answer{}, reportPrior(cellA, statemachine.CarrierInterFrequency), "another cell")
	assert.Equal(t, leadAnswer{500 * ms, 158, true}, leadPrior(diag.BandSub6), "the lower median of 400, 500 and 2000 ms")
	assert.Equal(t, leadAnswer{}, leadPrior(diag.BandMmWave))
	_, ok := c.Lookup(cellB)
	assert.False(t, ok, "report counts alone are no buffer estimate")

	// A host's lead is the one its latest entry of the band brought
	// (65 intervals rather than 64); the deletion of another of its
	// entries leaves it.
	put(t, kv, cellKey(network, mustSub6(t, 1), "honest-1"), peer(mustSub6(t, 1), a5(1, 1), 300, 65))
	require.Eventually(t, func() bool { return leadPrior(diag.BandSub6).samples == 159 }, waitFor, tick)
	assert.Equal(t, leadAnswer{500 * ms, 159, true}, leadPrior(diag.BandSub6), "the lower median of 300, 500 and 2000 ms")
	require.NoError(t, kv.Delete(context.Background(), cellKey(network, cellB, "honest-1")))
	require.Eventually(t, func() bool { return c.Stats().Entries == 3 }, waitFor, tick)
	assert.Equal(t, leadAnswer{500 * ms, 159, true}, leadPrior(diag.BandSub6))
	assert.Equal(t, answer{0, 1020, true}, reportPrior(cellB, statemachine.CarrierInterFrequency),
		"the lower median of two is the lower")
	require.NoError(t, kv.Delete(context.Background(), cellKey(network, mustSub6(t, 1), "honest-1")))
	require.Eventually(t, func() bool { return leadPrior(diag.BandSub6).samples == 94 }, waitFor, tick)
	assert.Equal(t, leadAnswer{500 * ms, 94, true}, leadPrior(diag.BandSub6), "the lower median of 500 and 2000 ms")

	clk.advance(time.Hour + time.Minute)
	assert.Equal(t, answer{}, reportPrior(cellB, statemachine.CarrierInterFrequency), "aged out")
	assert.Equal(t, leadAnswer{}, leadPrior(diag.BandSub6), "aged out")
}

// TestReportCountsAreBounded: a peer's report counts beyond the cache's
// bound are dropped and counted; its buffer estimate still counts.
func TestReportCountsAreBounded(t *testing.T) {
	srv := natstest.Start(t)
	kv := bucket(t, srv.URL())
	c := startClient(t, srv.URL(), "bus-1", withMaxEntries(1))
	require.Eventually(t, connected(c), waitFor, tick)
	var reports []reportCount
	for _, ev := range []diag.MeasEvent{diag.EventA1, diag.EventA2, diag.EventA3, diag.EventA4, diag.EventA5, diag.EventA6,
		diag.EventB1, diag.EventB2} {
		for _, carrier := range carriers[1:] {
			reports = append(reports, reportCount{Event: ev, Measured: diag.BandSub6, Carrier: carrier, Reports: 2, Followed: 1})
		}
	}
	require.Greater(t, len(reports), kindsPerEntry)
	b, err := json.Marshal(entry{Version: entryVersion, RAT: cellB.RAT, Band: cellB.Band, ARFCN: cellB.ARFCN, PCI: cellB.PCI,
		BufferBytes: 500_000, Bursts: 3, Updated: time.Now().UTC(), Reports: reports})
	require.NoError(t, err)
	put(t, kv, cellKey(network, cellB, "chatty"), b)
	require.Eventually(t, func() bool { return c.Stats().Malformed[MalformedCapacity] == 1 }, waitFor, tick)
	bytes, ok := c.Lookup(cellB)
	assert.True(t, ok)
	assert.Equal(t, uint64(500_000), bytes)
	_, _, ok = c.ReportPrior(cellB.Key(), diag.EventA3, diag.BandSub6, statemachine.CarrierIntraFrequency)
	assert.False(t, ok, "the counts were dropped")
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.Zero(t, c.kinds)
}

// TestPeersTeachTheLearningPredictor: a host whose network follows LTE A5
// reports on the serving carrier 400 ms later teaches another host,
// through the bucket, to predict on them in a cell it never served, with
// a window that waits for the command.
func TestPeersTeachTheLearningPredictor(t *testing.T) {
	srv := natstest.Start(t)
	newMachine := func(t *testing.T, store statemachine.LearntStore) *statemachine.Machine {
		t.Helper()
		est, err := estimator.New(estimator.DefaultConfig(), nil, nil)
		require.NoError(t, err)
		m, err := statemachine.New(statemachine.DefaultConfig(), est, statemachine.DiscardActuator{}, nil)
		require.NoError(t, err)
		require.NoError(t, m.UseLearntStore(store, network))
		return m
	}
	serving := diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 1, ARFCN: 1850}
	neighbor := diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 2, ARFCN: 1850}
	report := func(m *statemachine.Machine, at time.Time) {
		m.HandleEvent(diag.Event{Type: diag.TypeMeasReport, Time: at, Meas: diag.EventA5, Serving: serving, Neighbor: neighbor})
	}

	teacher := newMachine(t, startClient(t, srv.URL(), "bus-1").LearntStore(&memLearnt{}))
	start := time.Now()
	for i := range 8 {
		at := start.Add(time.Duration(i) * 2 * time.Second)
		report(teacher, at)
		teacher.HandleEvent(diag.Event{Type: diag.TypeHOCommand, Time: at.Add(400 * time.Millisecond), Kind: diag.HOPCell, Source: serving, Target: serving})
		teacher.HandleEvent(diag.Event{Type: diag.TypeHOComplete, Time: at.Add(420 * time.Millisecond), Cell: serving})
	}

	alone := newMachine(t, &memLearnt{})
	report(alone, start)
	assert.Nil(t, alone.Status().Prediction, "Algorithm 1 ignores an A5 on the serving carrier")

	learner := startClient(t, srv.URL(), "bus-2")
	require.Eventually(t, func() bool {
		_, samples, ok := learner.LeadPrior(diag.BandSub6)
		return ok && samples == 8
	}, waitFor, tick, "the teacher's lead never arrived")
	student := newMachine(t, learner.LearntStore(&memLearnt{}))
	assert.InDelta(t, 400, student.Status().T2[0].WindowMillis, 0.001, "the peers' lead, for want of its own")
	report(student, start)
	require.NotNil(t, student.Status().Prediction, "what the teacher learnt in the cell predicts")
}
