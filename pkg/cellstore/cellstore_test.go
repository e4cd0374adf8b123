package cellstore

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

var _ estimator.Store = (*Store)(nil)

var (
	nrMmWave = diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 123, ARFCN: 2079167}
	nrSub6   = diag.Cell{RAT: diag.RATNR, Band: diag.BandSub6, PCI: 7, ARFCN: 632628}
	lte      = diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 301, ARFCN: 5110}
)

func rec(c diag.Cell, buffer, bursts uint64) estimator.CellRecord {
	return estimator.CellRecord{Cell: c, BufferBytes: buffer, Bursts: bursts,
		Updated: time.Date(2026, 11, 22, 7, 0, 0, int(buffer), time.UTC)}
}

func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{FlushInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return s
}

func TestPersistsAcrossRestarts(t *testing.T) {
	tests := []struct {
		name  string
		saves []estimator.CellRecord
		want  []estimator.CellRecord // ordered by cell key
	}{
		{name: "nothing saved"},
		{
			name:  "three cells",
			saves: []estimator.CellRecord{rec(nrMmWave, 900000, 3), rec(lte, 150000, 10), rec(nrSub6, 250000, 1)},
			want:  []estimator.CellRecord{rec(lte, 150000, 10), rec(nrMmWave, 900000, 3), rec(nrSub6, 250000, 1)},
		},
		{
			name:  "latest update of a cell wins",
			saves: []estimator.CellRecord{rec(nrSub6, 100000, 1), rec(nrSub6, 180000, 2), rec(nrSub6, 170000, 3)},
			want:  []estimator.CellRecord{rec(nrSub6, 170000, 3)},
		},
		{
			name: "an overflow's ceiling",
			saves: []estimator.CellRecord{func() estimator.CellRecord {
				r := rec(nrSub6, 140000, 4)
				r.CeilingBytes = 140000
				return r
			}()},
			want: []estimator.CellRecord{func() estimator.CellRecord {
				r := rec(nrSub6, 140000, 4)
				r.CeilingBytes = 140000
				return r
			}()},
		},
		{
			name:  "band derived when absent",
			saves: []estimator.CellRecord{rec(diag.Cell{RAT: diag.RATNR, PCI: 9, ARFCN: 2079167}, 5000, 1)},
			want:  []estimator.CellRecord{rec(diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 9, ARFCN: 2079167}, 5000, 1)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir)
			for _, c := range tt.saves {
				require.NoError(t, s.SaveCell(c))
			}
			before, err := s.LoadCells()
			require.NoError(t, err)
			assertCells(t, tt.want, before, "before the flush, pending updates are visible")
			require.NoError(t, s.Close())

			s = openStore(t, dir)
			defer func() { require.NoError(t, s.Close()) }()
			after, err := s.LoadCells()
			require.NoError(t, err)
			assertCells(t, tt.want, after, "after a restart")
		})
	}
}

// assertCells compares records, with times compared as instants.
func assertCells(t *testing.T, want, got []estimator.CellRecord, msg string) {
	t.Helper()
	require.Len(t, got, len(want), msg)
	for i := range want {
		assert.Equal(t, want[i].Network, got[i].Network, msg)
		assert.Equal(t, want[i].Cell, got[i].Cell, msg)
		assert.Equal(t, want[i].BufferBytes, got[i].BufferBytes, msg)
		assert.Equal(t, want[i].CeilingBytes, got[i].CeilingBytes, msg)
		assert.Equal(t, want[i].Bursts, got[i].Bursts, msg)
		assert.True(t, want[i].Updated.Equal(got[i].Updated), "%s: updated %v, want %v", msg, got[i].Updated, want[i].Updated)
	}
}

func TestBackgroundFlush(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	defer func() { require.NoError(t, s.Close()) }()
	require.NoError(t, s.SaveCell(rec(lte, 42000, 1)))
	stored := func() bool {
		var found bool
		require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
			found = tx.Bucket(cellsBucket).Get([]byte(cellKey(lte))) != nil
			return nil
		}))
		return found
	}
	assert.Eventually(t, stored, 2*time.Second, 5*time.Millisecond, "the flusher commits without Close")
}

func TestSaveAfterClose(t *testing.T) {
	s := openStore(t, t.TempDir())
	require.NoError(t, s.Close())
	assert.ErrorIs(t, s.SaveCell(rec(lte, 1, 1)), ErrClosed)
	assert.NoError(t, s.Close(), "Close is idempotent")
}

// validStoreBytes returns the bytes of a store holding two cells.
func validStoreBytes(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	s := openStore(t, dir)
	require.NoError(t, s.SaveCell(rec(nrMmWave, 900000, 3)))
	require.NoError(t, s.SaveCell(rec(lte, 150000, 10)))
	require.NoError(t, s.Close())
	data, err := os.ReadFile(filepath.Join(dir, FileName))
	require.NoError(t, err)
	return data
}

func TestCorruptStoreMovedAside(t *testing.T) {
	valid := validStoreBytes(t)
	pageSize := os.Getpagesize()
	tests := []struct {
		name    string
		corrupt func([]byte) []byte
	}{
		{name: "not a database", corrupt: func([]byte) []byte {
			return bytes.Repeat([]byte("this is not bbolt "), 1000)
		}},
		{name: "truncated", corrupt: func(b []byte) []byte { return b[:100] }},
		{name: "both meta pages zeroed", corrupt: func(b []byte) []byte {
			clear(b[:2*pageSize])
			return b
		}},
		{name: "every page after the metas scrambled", corrupt: func(b []byte) []byte {
			for i := 2 * pageSize; i < len(b); i++ {
				b[i] ^= 0xa5
			}
			return b
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			damaged := tt.corrupt(bytes.Clone(valid))
			require.NoError(t, os.WriteFile(path, damaged, 0o600))

			var logs bytes.Buffer
			now := time.Date(2026, 11, 22, 7, 1, 2, 345, time.UTC)
			s, err := Open(dir, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: func() time.Time { return now }})
			require.NoError(t, err, "a corrupt store never stops the daemon")
			defer func() { require.NoError(t, s.Close()) }()

			cells, err := s.LoadCells()
			require.NoError(t, err)
			assert.Empty(t, cells, "the rebuilt store starts empty")
			aside := path + ".corrupt-20261122T070102.000000345Z"
			kept, err := os.ReadFile(aside)
			require.NoError(t, err, "the damaged file is kept for inspection")
			assert.Equal(t, damaged, kept)
			assert.Contains(t, logs.String(), "level=WARN")
			assert.Contains(t, logs.String(), "moved aside")

			require.NoError(t, s.SaveCell(rec(nrSub6, 1234, 1)))
			require.NoError(t, s.Flush())
			cells, err = s.LoadCells()
			require.NoError(t, err)
			assert.Len(t, cells, 1, "the rebuilt store works")
		})
	}
}

func TestUnreadableRecordsSkipped(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	require.NoError(t, s.SaveCell(rec(nrSub6, 250000, 1)))
	require.NoError(t, s.Flush())
	bad := map[string]string{
		"x/1/1":  "{not json",
		"x/1/2":  `{"v":99,"rat":"nr","pci":1,"arfcn":1}`,
		"x/1/3":  `{"v":1,"rat":"wifi","pci":1,"arfcn":1}`,
		"x/1/4":  `{"v":1,"rat":"nr","band":"thz","pci":1,"arfcn":1}`,
		"x/1/5":  `[]`,
		"x/1/6":  `{"v":1,"rat":"nr","pci":70000,"arfcn":1}`,
		"x/1/7":  "",
		"x/1/99": "\x00\xff",
	}
	require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
		for k, v := range bad {
			if err := tx.Bucket(cellsBucket).Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	}))
	cells, err := s.LoadCells()
	require.NoError(t, err)
	assertCells(t, []estimator.CellRecord{rec(nrSub6, 250000, 1)}, cells, "only the good record")
	assert.Equal(t, len(bad), s.Skipped())
	require.NoError(t, s.Close())
}

func TestLockedByAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	first := openStore(t, dir)
	defer func() { require.NoError(t, first.Close()) }()
	_, err := Open(dir, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "locked by another process")
	_, statErr := os.Stat(filepath.Join(dir, FileName))
	assert.NoError(t, statErr, "a locked store is never moved aside")
}

func TestUnusableStateDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plain-file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err := Open(filepath.Join(file, "state"), Options{})
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "cell store: state directory"), err.Error())
}

func BenchmarkSaveCell(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	require.NoError(b, err)
	defer func() { require.NoError(b, s.Close()) }()
	cells := []diag.Cell{nrMmWave, nrSub6, lte}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := s.SaveCell(rec(cells[i%len(cells)], uint64(i), uint64(i))); err != nil {
			b.Fatal(err)
		}
	}
}

func TestReportStatsPersistAcrossRestarts(t *testing.T) {
	band := statemachine.ReportStats{RAT: diag.RATLTE, Band: diag.BandSub6, Event: diag.EventA3, Measured: diag.BandSub6, Reports: 10, Followed: 7}
	cell := band
	cell.Cell, cell.Reports, cell.Followed = lte, 4, 1
	pair := cell
	pair.Neighbor, pair.Reports, pair.Followed = diag.Cell{RAT: diag.RATLTE, PCI: 302, ARFCN: 5110}.Normalized(), 2, 0
	a2 := statemachine.ReportStats{Cell: nrSub6, RAT: diag.RATNR, Band: diag.BandSub6, Event: diag.EventA2, Reports: 3, Followed: 3}
	// The same trigger on another carrier is another kind.
	inter := band
	inter.Carrier, inter.Reports, inter.Followed = statemachine.CarrierInterFrequency, 6, 6
	band.Carrier = statemachine.CarrierIntraFrequency

	dir := t.TempDir()
	s := openStore(t, dir)
	for _, r := range []statemachine.ReportStats{band, cell, pair, a2, inter} {
		require.NoError(t, s.SaveReportStats(r))
	}
	updated := cell
	updated.Reports, updated.Followed = 5, 2
	require.NoError(t, s.SaveReportStats(updated))
	require.NoError(t, s.SaveCell(rec(lte, 150000, 10)))
	before, err := s.LoadReportStats()
	require.NoError(t, err)
	assert.ElementsMatch(t, []statemachine.ReportStats{band, updated, pair, a2, inter}, before, "before the flush, pending updates are visible")
	require.NoError(t, s.Close())

	s = openStore(t, dir)
	defer func() { require.NoError(t, s.Close()) }()
	after, err := s.LoadReportStats()
	require.NoError(t, err)
	assert.ElementsMatch(t, []statemachine.ReportStats{band, updated, pair, a2, inter}, after, "after a restart")
	cells, err := s.LoadCells()
	require.NoError(t, err)
	assertCells(t, []estimator.CellRecord{rec(lte, 150000, 10)}, cells, "cells and reports share the file")
	require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(reportsBucket).Put([]byte("garbage"), []byte("{"))
	}))
	after, err = s.LoadReportStats()
	require.NoError(t, err)
	assert.Len(t, after, 5, "an unreadable record is skipped")
	assert.Equal(t, 1, s.Skipped())
}

func TestSaveReportStatsAfterClose(t *testing.T) {
	s := openStore(t, t.TempDir())
	require.NoError(t, s.Close())
	assert.ErrorIs(t, s.SaveReportStats(statemachine.ReportStats{RAT: diag.RATLTE, Band: diag.BandSub6, Event: diag.EventA3}), ErrClosed)
}

func TestLeadStatsPersistAcrossRestarts(t *testing.T) {
	ms := time.Millisecond
	sub6 := statemachine.LeadStats{Network: "001-01", Band: diag.BandSub6, Samples: []time.Duration{60 * ms, 310 * ms, 85*ms + 250*time.Microsecond}}
	mmWave := statemachine.LeadStats{Network: "001-01", Band: diag.BandMmWave, Samples: []time.Duration{40 * ms}}
	// The same band of another network is another record.
	otherNetwork := statemachine.LeadStats{Network: "310-260", Band: diag.BandSub6, Samples: []time.Duration{700 * ms, 650 * ms}}
	noNetwork := statemachine.LeadStats{Band: diag.BandSub6, Samples: []time.Duration{120 * ms}}

	dir := t.TempDir()
	s := openStore(t, dir)
	for _, l := range []statemachine.LeadStats{sub6, mmWave, otherNetwork, noNetwork} {
		require.NoError(t, s.SaveLeadStats(l))
	}
	updated := sub6
	updated.Samples = append(slices.Clone(sub6.Samples), 95*ms)
	require.NoError(t, s.SaveLeadStats(updated))
	want := []statemachine.LeadStats{noNetwork, mmWave, updated, otherNetwork} // by network, then band
	before, err := s.LoadLeadStats()
	require.NoError(t, err)
	assert.Equal(t, want, before, "before the flush, pending updates are visible")
	require.NoError(t, s.Close())

	s = openStore(t, dir)
	defer func() { require.NoError(t, s.Close()) }()
	after, err := s.LoadLeadStats()
	require.NoError(t, err)
	assert.Equal(t, want, after, "after a restart")
	assert.Zero(t, s.Skipped())
}

// putRaw writes records as another version of m2hod (or damage) left
// them.
func putRaw(t *testing.T, s *Store, bucket []byte, records map[string]string) {
	t.Helper()
	require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
		for k, v := range records {
			if err := tx.Bucket(bucket).Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	}))
}

func TestLearntRecordVersions(t *testing.T) {
	tests := []struct {
		name        string
		bucket      []byte
		value       string
		wantReports []statemachine.ReportStats
		wantLeads   []statemachine.LeadStats
		wantT2      []statemachine.T2Stats
		wantSkipped int
	}{
		{name: "version 1 report counts load as counts of no network", bucket: reportsBucket,
			value: `{"v":1,"rat":"lte","band":"sub6","event":"A3","measured":"sub6","carrier":"intra_frequency","reports":9,"followed":7}`,
			wantReports: []statemachine.ReportStats{{RAT: diag.RATLTE, Band: diag.BandSub6, Event: diag.EventA3, Measured: diag.BandSub6,
				Carrier: statemachine.CarrierIntraFrequency, Reports: 9, Followed: 7}}},
		{name: "version 2 report counts name their network", bucket: reportsBucket,
			value: `{"v":2,"network":"001-01","cell":{"rat":"nr","band":"sub6","pci":7,"arfcn":632628},"rat":"nr","band":"sub6","event":"A2","reports":3,"followed":1}`,
			wantReports: []statemachine.ReportStats{{Network: "001-01", Cell: nrSub6, RAT: diag.RATNR, Band: diag.BandSub6, Event: diag.EventA2,
				Reports: 3, Followed: 1}}},
		{name: "a version 1 report record cannot name a network", bucket: reportsBucket,
			value: `{"v":1,"network":"001-01","rat":"lte","band":"sub6","event":"A3","reports":1}`, wantSkipped: 1},
		{name: "a report record of a later version", bucket: reportsBucket,
			value: `{"v":3,"rat":"lte","band":"sub6","event":"A3","reports":1}`, wantSkipped: 1},
		{name: "a report record that is not JSON", bucket: reportsBucket, value: "\x00\xff", wantSkipped: 1},
		{name: "intervals", bucket: leadsBucket, value: `{"v":1,"network":"001-01","band":"sub6","samples_us":[60000,310500]}`,
			wantLeads: []statemachine.LeadStats{{Network: "001-01", Band: diag.BandSub6,
				Samples: []time.Duration{60 * time.Millisecond, 310500 * time.Microsecond}}}},
		{name: "intervals of a later version", bucket: leadsBucket, value: `{"v":2,"band":"sub6","samples_us":[60000]}`, wantSkipped: 1},
		{name: "intervals that are not numbers", bucket: leadsBucket, value: `{"v":1,"band":"sub6","samples_us":["soon"]}`, wantSkipped: 1},
		{name: "far more intervals than any machine keeps", bucket: leadsBucket,
			value: `{"v":1,"band":"sub6","samples_us":[` + strings.Repeat("1000,", maxLeadSamples) + `1000]}`, wantSkipped: 1},
		{name: "intervals that are not JSON", bucket: leadsBucket, value: "{", wantSkipped: 1},
		{name: "a mean T2", bucket: t2Bucket, value: `{"v":1,"network":"001-01","band":"sub6","mean_us":183500,"samples":12}`,
			wantT2: []statemachine.T2Stats{{Network: "001-01", Band: diag.BandSub6, Mean: 183500 * time.Microsecond, Samples: 12}}},
		{name: "a mean T2 of a later version", bucket: t2Bucket, value: `{"v":2,"band":"sub6","mean_us":183500,"samples":12}`, wantSkipped: 1},
		{name: "a mean T2 that is not a number", bucket: t2Bucket, value: `{"v":1,"band":"sub6","mean_us":"long"}`, wantSkipped: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t, t.TempDir())
			defer func() { require.NoError(t, s.Close()) }()
			putRaw(t, s, tt.bucket, map[string]string{"k": tt.value})
			reports, err := s.LoadReportStats()
			require.NoError(t, err)
			leads, err := s.LoadLeadStats()
			require.NoError(t, err)
			t2, err := s.LoadT2Stats()
			require.NoError(t, err)
			assert.Equal(t, tt.wantReports, nilIfEmpty(reports))
			assert.Equal(t, tt.wantLeads, nilIfEmpty(leads))
			assert.Equal(t, tt.wantT2, nilIfEmpty(t2))
			assert.Equal(t, tt.wantSkipped, s.Skipped())
		})
	}
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// TestLegacyCountsGoOn: counts of no network saved now replace the
// version 1 record of their kind rather than being kept beside it, and
// the same kind in a network is a record of its own.
func TestLegacyCountsGoOn(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer func() { require.NoError(t, s.Close()) }()
	legacy := statemachine.ReportStats{RAT: diag.RATLTE, Band: diag.BandSub6, Event: diag.EventA3, Reports: 9, Followed: 7}
	putRaw(t, s, reportsBucket, map[string]string{
		reportKey(legacy): `{"v":1,"rat":"lte","band":"sub6","event":"A3","reports":9,"followed":7}`,
	})
	next := legacy
	next.Reports, next.Followed = 10, 8
	inNetwork := legacy
	inNetwork.Network, inNetwork.Reports, inNetwork.Followed = "001-01", 1, 0
	require.NoError(t, s.SaveReportStats(next))
	require.NoError(t, s.SaveReportStats(inNetwork))
	require.NoError(t, s.Flush())
	got, err := s.LoadReportStats()
	require.NoError(t, err)
	assert.ElementsMatch(t, []statemachine.ReportStats{next, inNetwork}, got)
}

// TestLearntSurvivesARestart runs the learning predictor on the store,
// closes it, and starts another machine on the reopened store: the
// counts, the report-to-command intervals and the mean T2 of its network
// are back, another network's are not.
func TestLearntSurvivesARestart(t *testing.T) {
	newMachine := func(t *testing.T, s *Store, network string) *statemachine.Machine {
		t.Helper()
		est, err := estimator.New(estimator.DefaultConfig(), s, nil)
		require.NoError(t, err)
		m, err := statemachine.New(statemachine.DefaultConfig(), est, statemachine.DiscardActuator{}, nil)
		require.NoError(t, err)
		require.NoError(t, m.UseLearntStore(s, network))
		return m
	}
	serving := diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 1, ARFCN: 1850}
	neighbor := diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 2, ARFCN: 1850}
	start := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	s := openStore(t, dir)
	m := newMachine(t, s, "001-01")
	// The network answers eight A3 reports 400 ms later, each at the
	// serving cell and back.
	for i := range 8 {
		at := start.Add(time.Duration(i) * 2 * time.Second)
		from, to := serving, neighbor
		if i%2 == 1 {
			from, to = neighbor, serving
		}
		m.HandleEvent(diag.Event{Type: diag.TypeMeasReport, Time: at, Meas: diag.EventA3, Serving: from, Neighbor: to})
		m.HandleEvent(diag.Event{Type: diag.TypeHOCommand, Time: at.Add(400 * time.Millisecond), Kind: diag.HOPCell, Source: from, Target: to})
		m.HandleEvent(diag.Event{Type: diag.TypeHOComplete, Time: at.Add(420 * time.Millisecond), Cell: to})
	}
	learnt := m.Learnt()
	require.NotEmpty(t, learnt)
	window := m.Status().T2[0].WindowMillis
	assert.GreaterOrEqual(t, window, 400.0)
	require.NoError(t, s.Close())

	s = openStore(t, dir)
	defer func() { require.NoError(t, s.Close()) }()
	restarted := newMachine(t, s, "001-01")
	assert.Equal(t, learnt, restarted.Learnt())
	st := restarted.Status()
	require.Equal(t, diag.BandSub6, st.T2[0].Band)
	assert.InDelta(t, 400, st.T2[0].InUseMillis, 0.001, "the mean T2 learnt before")
	assert.InDelta(t, window, st.T2[0].WindowMillis, 0.001, "the window of before the restart: 2*T2, above the intervals' quantile")

	other := newMachine(t, s, "310-260")
	assert.Empty(t, other.Learnt())
	assert.InDelta(t, 292, other.Status().T2[0].WindowMillis, 0.001, "2*T2: nothing learnt in this network")
}

func TestCellRecordVersions(t *testing.T) {
	inNetwork := rec(lte, 150000, 10)
	inNetwork.Network = "001-01"
	tests := []struct {
		name        string
		value       string
		want        []estimator.CellRecord
		wantSkipped int
	}{
		{name: "a version 1 record loads as a cell of no network",
			value: `{"v":1,"rat":"lte","band":"sub6","pci":301,"arfcn":5110,"buffer_bytes":150000,"bursts":10,"updated":"2026-11-22T07:00:00.000150000Z"}`,
			want:  []estimator.CellRecord{rec(lte, 150000, 10)}},
		{name: "a version 2 record names its network",
			value: `{"v":2,"network":"001-01","rat":"lte","band":"sub6","pci":301,"arfcn":5110,"buffer_bytes":150000,"bursts":10,"updated":"2026-11-22T07:00:00.000150000Z"}`,
			want:  []estimator.CellRecord{inNetwork}},
		{name: "a version 1 record cannot name a network",
			value: `{"v":1,"network":"001-01","rat":"lte","pci":301,"arfcn":5110,"buffer_bytes":1}`, wantSkipped: 1},
		{name: "a record of a later version", value: `{"v":3,"rat":"lte","pci":301,"arfcn":5110,"buffer_bytes":1}`, wantSkipped: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t, t.TempDir())
			defer func() { require.NoError(t, s.Close()) }()
			putRaw(t, s, cellsBucket, map[string]string{"k": tt.value})
			cells, err := s.LoadCells()
			require.NoError(t, err)
			assertCells(t, tt.want, cells, tt.name)
			assert.Equal(t, tt.wantSkipped, s.Skipped())
		})
	}
}

// TestCellsSurviveARestartPerNetwork measures a cell's buffer in two
// networks on the store, over a record of the cell stored before
// networks were recorded, and restarts: each estimator looks up only the
// estimate of its network, and the store keeps all three.
func TestCellsSurviveARestartPerNetwork(t *testing.T) {
	start := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	measure := func(t *testing.T, s *Store, network string, bytes uint64) {
		t.Helper()
		est, err := estimator.New(estimator.DefaultConfig(), s, nil)
		require.NoError(t, err)
		est.UseNetwork(network)
		est.SetServing(lte, start)
		est.AddBurst(estimator.Burst{Start: start.Add(time.Second), End: start.Add(time.Second + 10*time.Millisecond), Bytes: bytes, Packets: bytes / 1400})
	}
	lookup := func(t *testing.T, s *Store, network string) (uint64, string) {
		t.Helper()
		est, err := estimator.New(estimator.DefaultConfig(), s, nil)
		require.NoError(t, err)
		est.UseNetwork(network)
		return est.TargetBuffer(lte)
	}
	dir := t.TempDir()
	s := openStore(t, dir)
	putRaw(t, s, cellsBucket, map[string]string{
		cellKey(lte): `{"v":1,"rat":"lte","band":"sub6","pci":301,"arfcn":5110,"buffer_bytes":500000,"bursts":4,"updated":"2026-11-21T07:00:00Z"}`,
	})
	bytes, source := lookup(t, s, "460-00")
	assert.Equal(t, estimator.SourceDefault, source, "the record of no network is not the network's")
	assert.Equal(t, estimator.DefaultConfig().DefaultBufferBytes, bytes)
	measure(t, s, "460-00", 300000)
	measure(t, s, "310-260", 700000)
	require.NoError(t, s.Close())

	s = openStore(t, dir)
	defer func() { require.NoError(t, s.Close()) }()
	cells, err := s.LoadCells()
	require.NoError(t, err)
	assert.Len(t, cells, 3, "one record per network, the legacy one kept")
	for _, tt := range []struct {
		network string
		want    uint64
	}{{"", 500000}, {"460-00", 300000}, {"310-260", 700000}} {
		bytes, source = lookup(t, s, tt.network)
		assert.Equal(t, estimator.SourceCell, source, tt.network)
		assert.Equal(t, tt.want, bytes, tt.network)
	}
	bytes, source = lookup(t, s, "001-01")
	assert.Equal(t, estimator.SourceDefault, source, "nothing measured in this network")
	assert.Equal(t, estimator.DefaultConfig().DefaultBufferBytes, bytes)
}
