package estimator

import (
	"cmp"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }

var (
	lteA = diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 1, ARFCN: 1850}
	lteB = diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 2, ARFCN: 1850}
	nrA  = diag.Cell{RAT: diag.RATNR, Band: diag.BandSub6, PCI: 10, ARFCN: 632628}
	mmA  = diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 100, ARFCN: 2079167}
	mmB  = diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 101, ARFCN: 2079167}
)

// memStore is an in-memory Store that records saves.
type memStore struct {
	records []CellRecord
	loadErr error
	saveErr error
	saved   []CellRecord
}

func (s *memStore) LoadCells() ([]CellRecord, error) { return s.records, s.loadErr }
func (s *memStore) SaveCell(r CellRecord) error {
	s.saved = append(s.saved, r)
	return s.saveErr
}

func newEstimator(t *testing.T, store Store) *Estimator {
	t.Helper()
	e, err := New(DefaultConfig(), store, nil)
	require.NoError(t, err)
	return e
}

// skipped returns the reasons the estimator rejected inputs for at least
// once.
func skipped(e *Estimator) map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range e.Skipped() {
		if c.Value > 0 {
			out[c.Label] = c.Value
		}
	}
	return out
}

// TestSkipReasonsStartAtZero: a new estimator lists every reason, at 0.
func TestSkipReasonsStartAtZero(t *testing.T) {
	var want []diag.Counter
	for _, reason := range SkipReasons {
		want = append(want, diag.Counter{Label: reason})
	}
	slices.SortFunc(want, func(a, b diag.Counter) int { return cmp.Compare(a.Label, b.Label) })
	assert.Equal(t, want, newEstimator(t, nil).Skipped())
}

func TestTargetBufferLookupRules(t *testing.T) {
	const min = 64 << 10
	tests := []struct {
		name    string
		records []CellRecord
		target  diag.Cell
		bytes   uint64
		source  string
	}{
		{
			name:    "known sub-6 cell: its own estimate",
			records: []CellRecord{{Cell: lteA, BufferBytes: 300_000}, {Cell: lteB, BufferBytes: 500_000}},
			target:  lteB,
			bytes:   500_000,
			source:  SourceCell,
		},
		{
			name:    "unknown sub-6 cell: minimum of the band",
			records: []CellRecord{{Cell: lteA, BufferBytes: 300_000}, {Cell: nrA, BufferBytes: 250_000}, {Cell: mmA, BufferBytes: 100_000}},
			target:  lteB,
			bytes:   250_000,
			source:  SourceBandMin,
		},
		{
			name:    "mmWave cell, even known: minimum over sub-6",
			records: []CellRecord{{Cell: lteA, BufferBytes: 300_000}, {Cell: nrA, BufferBytes: 250_000}, {Cell: mmA, BufferBytes: 9_000_000}},
			target:  mmA,
			bytes:   250_000,
			source:  SourceSub6Min,
		},
		{
			name:    "mmWave cell without sub-6 history: default",
			records: []CellRecord{{Cell: mmA, BufferBytes: 9_000_000}},
			target:  mmB,
			bytes:   1 << 20,
			source:  SourceDefault,
		},
		{
			name:   "no history at all: default",
			target: lteA,
			bytes:  1 << 20,
			source: SourceDefault,
		},
		{
			name:    "a band-only target is an unknown cell of that band",
			records: []CellRecord{{Cell: lteA, BufferBytes: 300_000}},
			target:  diag.Cell{Band: diag.BandSub6},
			bytes:   300_000,
			source:  SourceBandMin,
		},
		{
			name:    "a target of no band counts as sub-6",
			records: []CellRecord{{Cell: lteA, BufferBytes: 300_000}},
			target:  diag.Cell{},
			bytes:   300_000,
			source:  SourceBandMin,
		},
		{
			name:    "band derived from the ARFCN",
			records: []CellRecord{{Cell: lteA, BufferBytes: 300_000}},
			target:  diag.Cell{RAT: diag.RATNR, PCI: 5, ARFCN: 2079167},
			bytes:   300_000,
			source:  SourceSub6Min,
		},
		{
			name:    "a tiny estimate is raised to the minimum clamp",
			records: []CellRecord{{Cell: lteA, BufferBytes: 3000}},
			target:  lteA,
			bytes:   min,
			source:  SourceCell,
		},
		{
			name:    "a huge estimate is capped at the largest window",
			records: []CellRecord{{Cell: lteA, BufferBytes: 5 << 30}},
			target:  lteA,
			bytes:   1 << 30,
			source:  SourceCell,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEstimator(t, &memStore{records: tc.records})
			bytes, source := e.TargetBuffer(tc.target)
			assert.Equal(t, tc.bytes, bytes)
			assert.Equal(t, tc.source, source)
		})
	}
}

func TestStoreLoading(t *testing.T) {
	tests := []struct {
		name    string
		store   *memStore
		cells   []CellRecord
		skipped map[string]uint64
	}{
		{
			name: "records load ordered by band, RAT, ARFCN, PCI, bands filled in",
			store: &memStore{records: []CellRecord{
				{Cell: diag.Cell{RAT: diag.RATNR, PCI: 100, ARFCN: 2079167}, BufferBytes: 7, Bursts: 2, Updated: t0},
				{Cell: lteB, BufferBytes: 5},
				{Cell: lteA, BufferBytes: 6},
			}},
			cells: []CellRecord{
				{Cell: mmA, BufferBytes: 7, Bursts: 2, Updated: t0},
				{Cell: lteA, BufferBytes: 6},
				{Cell: lteB, BufferBytes: 5},
			},
			skipped: map[string]uint64{},
		},
		{
			name:    "invalid records are skipped and counted",
			store:   &memStore{records: []CellRecord{{Cell: lteA}, {BufferBytes: 10}, {Cell: lteB, BufferBytes: 5}}},
			cells:   []CellRecord{{Cell: lteB, BufferBytes: 5}},
			skipped: map[string]uint64{"stored_record_invalid": 2},
		},
		{
			name:    "an unreadable store starts empty",
			store:   &memStore{records: []CellRecord{{Cell: lteA, BufferBytes: 5}}, loadErr: errors.New("corrupt")},
			cells:   []CellRecord{},
			skipped: map[string]uint64{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEstimator(t, tc.store)
			assert.Equal(t, tc.cells, e.Cells())
			assert.Equal(t, tc.skipped, skipped(e))
		})
	}
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{name: "zero config takes the defaults", cfg: Config{}, ok: true},
		{name: "lambda 1", cfg: Config{Lambda: 1}, ok: true},
		{name: "negative lambda", cfg: Config{Lambda: -1}},
		{name: "minimum clamp above the default", cfg: Config{MinClampBytes: 2 << 20}},
		{name: "negative burst duration", cfg: Config{MaxBurstDuration: -time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(tc.cfg, nil, nil)
			if !tc.ok {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			bytes, source := e.TargetBuffer(lteA)
			assert.Equal(t, DefaultConfig().DefaultBufferBytes, bytes)
			assert.Equal(t, SourceDefault, source)
		})
	}
}

func TestAddBurst(t *testing.T) {
	type burstIn struct {
		serving diag.Cell
		// sinceMs is when serving started to serve.
		sinceMs float64
		burst   Burst
	}
	b := func(startMs, endMs float64, bytes uint64) Burst {
		return Burst{Start: at(startMs), End: at(endMs), Bytes: bytes, Packets: bytes / 1448}
	}
	tests := []struct {
		name    string
		in      []burstIn
		cells   []CellRecord
		skipped map[string]uint64
		saves   int
	}{
		{
			name: "the largest burst per cell is the estimate",
			in: []burstIn{
				{lteA, 0, b(0, 10, 200_000)},
				{lteA, 0, b(20, 40, 350_000)},
				{lteA, 0, b(50, 55, 100_000)},
				{mmA, 60, b(60, 62, 2_000_000)},
			},
			cells: []CellRecord{
				{Cell: mmA, BufferBytes: 2_000_000, Bursts: 1, Updated: at(62)},
				{Cell: lteA, BufferBytes: 350_000, Bursts: 3, Updated: at(55)},
			},
			skipped: map[string]uint64{},
			saves:   4,
		},
		{
			name: "bad bursts are counted and skipped",
			in: []burstIn{
				{diag.Cell{}, 0, b(0, 10, 1000)},
				{lteA, 0, b(0, 10, 0)},
				{lteA, 0, b(10, 5, 1000)},
				{lteA, 0, b(0, 76, 1000)},
			},
			cells: []CellRecord{},
			skipped: map[string]uint64{
				"burst_no_serving_cell":   1,
				"burst_empty":             1,
				"burst_ends_before_start": 1,
				"burst_too_long":          1,
			},
		},
		{
			name: "a train running into a cell change is the previous cell's",
			in: []burstIn{
				{mmA, 0, b(0, 20, 900_000)},
				// Started on mmA, reported once lteA served.
				{lteA, 30, b(25, 40, 1_200_000)},
				{lteA, 30, b(50, 60, 150_000)},
				// Serving the same cell again keeps its start.
				{lteA, 70, b(55, 65, 160_000)},
			},
			cells: []CellRecord{
				{Cell: mmA, BufferBytes: 900_000, Bursts: 1, Updated: at(20)},
				{Cell: lteA, BufferBytes: 160_000, Bursts: 2, Updated: at(65)},
			},
			skipped: map[string]uint64{"burst_spans_cell_change": 1},
			saves:   3,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := &memStore{}
			e := newEstimator(t, store)
			for _, in := range tc.in {
				e.SetServing(in.serving, at(in.sinceMs))
				e.AddBurst(in.burst)
			}
			assert.Equal(t, tc.cells, e.Cells())
			assert.Equal(t, tc.skipped, skipped(e))
			assert.Len(t, store.saved, tc.saves)
		})
	}
}

func TestSaveFailureIsCounted(t *testing.T) {
	store := &memStore{saveErr: errors.New("disk full")}
	e := newEstimator(t, store)
	e.SetServing(lteA, at(0))
	e.AddBurst(Burst{Start: at(0), End: at(5), Bytes: 1000})
	assert.Equal(t, map[string]uint64{"store_save_failed": 1}, skipped(e))
	assert.Len(t, e.Cells(), 1, "the estimate is kept in memory")
}

func TestBurstsTeachTargetBuffer(t *testing.T) {
	e := newEstimator(t, nil)
	e.SetServing(lteA, at(0))
	e.AddBurst(Burst{Start: at(0), End: at(20), Bytes: 300_000})
	e.SetServing(nrA, at(100))
	e.AddBurst(Burst{Start: at(100), End: at(110), Bytes: 180_000})

	bytes, source := e.TargetBuffer(lteA)
	assert.Equal(t, uint64(300_000), bytes)
	assert.Equal(t, SourceCell, source)
	bytes, source = e.TargetBuffer(mmB)
	assert.Equal(t, uint64(180_000), bytes)
	assert.Equal(t, SourceSub6Min, source)
}

func TestBandMinimumFollowsTheEstimates(t *testing.T) {
	e := newEstimator(t, nil)
	steps := []struct {
		serving diag.Cell
		bytes   uint64
		min     uint64
	}{
		{serving: lteA, bytes: 100_000, min: 100_000},
		{serving: lteB, bytes: 300_000, min: 100_000},
		{serving: lteA, bytes: 400_000, min: 300_000},
		{serving: nrA, bytes: 80_000, min: 80_000},
		{serving: mmA, bytes: 70_000, min: 80_000},
	}
	for i, s := range steps {
		e.SetServing(s.serving, at(float64(10*i)))
		e.AddBurst(Burst{Start: at(float64(10 * i)), End: at(float64(10*i + 5)), Bytes: s.bytes})
		bytes, source := e.TargetBuffer(mmB)
		assert.Equal(t, s.min, bytes, "step %d", i)
		assert.Equal(t, SourceSub6Min, source)
		bytes, source = e.TargetBuffer(diag.Cell{Band: diag.BandSub6})
		assert.Equal(t, s.min, bytes, "step %d", i)
		assert.Equal(t, SourceBandMin, source)
	}
}

// TestConcurrentUse feeds and reads an estimator from several goroutines,
// as the daemon's datapath readers, state machine and HTTP handler do;
// run with -race it checks the locking.
func TestConcurrentUse(t *testing.T) {
	e := newEstimator(t, &memStore{})
	e.SetServing(lteA, at(0))
	const perWorker = 500
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range perWorker {
			e.AddBytes(at(float64(i)), uint64(i)*1000)
			e.AddRTT(e.Path(), at(float64(i)), 40*time.Millisecond)
		}
	}()
	bursts := make(chan struct{})
	go func() {
		defer close(bursts)
		for i := range perWorker {
			e.AddBurst(Burst{Start: at(float64(i)), End: at(float64(i) + 1), Bytes: uint64(1000 + i)})
			e.AddRBAlloc(rbAlloc(float64(i), nrA, full, partial, empty))
		}
	}()
	for range perWorker {
		e.TargetBuffer(mmA)
		e.BandwidthClamp(at(perWorker))
		e.Cells()
		e.Skipped()
	}
	<-done
	<-bursts
	cells := e.Cells()
	require.NotEmpty(t, cells)
	for _, c := range cells {
		if c.Cell == lteA {
			assert.Equal(t, uint64(perWorker), c.Bursts)
			assert.Equal(t, uint64(1000+perWorker-1), c.BufferBytes)
		}
	}
}
