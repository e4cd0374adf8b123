package cellstore

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// reportsBucket holds what the learning predictor learnt: which kinds of
// measurement report the network follows with a handover command.
var reportsBucket = []byte("reports")

// leadsBucket holds the learning predictor's report-to-command
// intervals, per network and band of serving cell.
var leadsBucket = []byte("leads")

// t2Bucket holds the machine's mean T2, per network and band of serving
// cell.
var t2Bucket = []byte("t2")

var _ statemachine.LearntStore = (*Store)(nil)

// Versions of the learning predictor's records. A version 1 report
// record names no network: it was written before counts were kept per
// network, and loads as counts of no network.
const (
	reportRecordVersion = 2
	leadRecordVersion   = 1
	t2RecordVersion     = 1
)

// reportRecord is the stored form of a statemachine.ReportStats.
type reportRecord struct {
	Version  int            `json:"v"`
	Network  string         `json:"network,omitempty"`
	Cell     *diag.Cell     `json:"cell,omitempty"`
	Neighbor *diag.Cell     `json:"neighbor,omitempty"`
	RAT      diag.RAT       `json:"rat"`
	Band     diag.Band      `json:"band"`
	Event    diag.MeasEvent `json:"event"`
	Measured diag.Band      `json:"measured,omitempty"`
	Carrier  string         `json:"carrier,omitempty"`
	Reports  uint32         `json:"reports"`
	Followed uint32         `json:"followed"`
}

func toReportRecord(r statemachine.ReportStats) reportRecord {
	rec := reportRecord{Version: reportRecordVersion, Network: r.Network, RAT: r.RAT, Band: r.Band, Event: r.Event, Measured: r.Measured,
		Carrier: r.Carrier, Reports: r.Reports, Followed: r.Followed}
	if !r.Cell.IsZero() {
		c := r.Cell
		rec.Cell = &c
	}
	if !r.Neighbor.IsZero() {
		n := r.Neighbor
		rec.Neighbor = &n
	}
	return rec
}

func (r reportRecord) stats() statemachine.ReportStats {
	s := statemachine.ReportStats{Network: r.Network, RAT: r.RAT, Band: r.Band, Event: r.Event, Measured: r.Measured, Carrier: r.Carrier,
		Reports: r.Reports, Followed: r.Followed}
	if r.Cell != nil {
		s.Cell = r.Cell.Normalized()
	}
	if r.Neighbor != nil {
		s.Neighbor = r.Neighbor.Normalized()
	}
	return s
}

// reportKey is the database key of a kind of report: its scope and
// trigger, and its network when it has one. Counts of no network keep
// the key they had before networks were recorded, so that they go on
// from the version 1 record rather than beside it.
func reportKey(r statemachine.ReportStats) string {
	k := fmt.Sprintf("%s/%s/%s/%s/%s/%s/%s", r.RAT, r.Band, r.Event, r.Measured, r.Carrier, cellKey(r.Cell), cellKey(r.Neighbor))
	if r.Network != "" {
		k += "/network:" + r.Network
	}
	return k
}

func (r reportRecord) check() error {
	switch {
	case r.Version == 1 && r.Network != "":
		return fmt.Errorf("a version 1 record with network %q", r.Network)
	case r.Version != 1 && r.Version != reportRecordVersion:
		return fmt.Errorf("unknown record version %d", r.Version)
	}
	return nil
}

// LoadReportStats returns what the learning predictor stored, including
// updates not yet flushed, ordered by key. Records that cannot be
// decoded are logged and skipped (the machine validates the rest).
func (s *Store) LoadReportStats() ([]statemachine.ReportStats, error) {
	return loadLearnt[statemachine.ReportStats, reportRecord](s, reportsBucket, "report", s.pendingReports)
}

// SaveReportStats records the latest counts of a kind of report. Like
// SaveCell it never blocks on disk.
func (s *Store) SaveReportStats(r statemachine.ReportStats) error {
	return saveLearnt(s, s.pendingReports, reportKey(r), r)
}

// leadRecord is the stored form of a statemachine.LeadStats.
type leadRecord struct {
	Version int       `json:"v"`
	Network string    `json:"network,omitempty"`
	Band    diag.Band `json:"band"`
	// SamplesMicros are the intervals in microseconds, oldest first.
	SamplesMicros []int64 `json:"samples_us"`
}

// maxLeadSamples bounds a stored record: the machine keeps 64 intervals
// per band, and a record far longer is damage, not history.
const maxLeadSamples = 1024

func toLeadRecord(l statemachine.LeadStats) leadRecord {
	rec := leadRecord{Version: leadRecordVersion, Network: l.Network, Band: l.Band, SamplesMicros: make([]int64, len(l.Samples))}
	for i, d := range l.Samples {
		rec.SamplesMicros[i] = d.Microseconds()
	}
	return rec
}

func (r leadRecord) stats() statemachine.LeadStats {
	l := statemachine.LeadStats{Network: r.Network, Band: r.Band, Samples: make([]time.Duration, len(r.SamplesMicros))}
	for i, us := range r.SamplesMicros {
		l.Samples[i] = time.Duration(us) * time.Microsecond
	}
	return l
}

func (r leadRecord) check() error {
	switch {
	case r.Version != leadRecordVersion:
		return fmt.Errorf("unknown record version %d", r.Version)
	case len(r.SamplesMicros) > maxLeadSamples:
		return fmt.Errorf("%d intervals", len(r.SamplesMicros))
	}
	return nil
}

// leadKey is the database key of the intervals of a network and band.
func leadKey(l statemachine.LeadStats) string {
	return l.Network + "/" + string(l.Band)
}

// LoadLeadStats returns the learning predictor's report-to-command
// intervals, including updates not yet flushed, ordered by key. Records
// that cannot be decoded are logged and skipped (the machine validates
// the intervals).
func (s *Store) LoadLeadStats() ([]statemachine.LeadStats, error) {
	return loadLearnt[statemachine.LeadStats, leadRecord](s, leadsBucket, "lead", s.pendingLeads)
}

// SaveLeadStats records the latest intervals of a network and band. Like
// SaveCell it never blocks on disk.
func (s *Store) SaveLeadStats(l statemachine.LeadStats) error {
	return saveLearnt(s, s.pendingLeads, leadKey(l), l)
}

// t2Record is the stored form of a statemachine.T2Stats.
type t2Record struct {
	Version int       `json:"v"`
	Network string    `json:"network,omitempty"`
	Band    diag.Band `json:"band"`
	// MeanMicros is the mean in microseconds.
	MeanMicros int64 `json:"mean_us"`
	Samples    int   `json:"samples"`
}

func toT2Record(t statemachine.T2Stats) t2Record {
	return t2Record{Version: t2RecordVersion, Network: t.Network, Band: t.Band, MeanMicros: t.Mean.Microseconds(), Samples: t.Samples}
}

func (r t2Record) stats() statemachine.T2Stats {
	return statemachine.T2Stats{Network: r.Network, Band: r.Band, Mean: time.Duration(r.MeanMicros) * time.Microsecond, Samples: r.Samples}
}

func (r t2Record) check() error {
	if r.Version != t2RecordVersion {
		return fmt.Errorf("unknown record version %d", r.Version)
	}
	return nil
}

// t2Key is the database key of the mean T2 of a network and band.
func t2Key(t statemachine.T2Stats) string {
	return t.Network + "/" + string(t.Band)
}

// LoadT2Stats returns the mean T2 of every network and band, including
// updates not yet flushed, ordered by key. Records that cannot be
// decoded are logged and skipped (the machine validates the means).
func (s *Store) LoadT2Stats() ([]statemachine.T2Stats, error) {
	return loadLearnt[statemachine.T2Stats, t2Record](s, t2Bucket, "t2", s.pendingT2)
}

// SaveT2Stats records the latest mean T2 of a network and band. Like
// SaveCell it never blocks on disk.
func (s *Store) SaveT2Stats(t statemachine.T2Stats) error {
	return saveLearnt(s, s.pendingT2, t2Key(t), t)
}

// storedRecord is the stored form Rec of a learnt statistic T.
type storedRecord[T, Rec any] interface {
	*Rec
	check() error
	stats() T
}

// loadLearnt returns the statistics of bucket, including the updates in
// pending not yet flushed, ordered by key. Records that cannot be decoded
// or fail their check are logged and skipped as what.
func loadLearnt[T, Rec any, R storedRecord[T, Rec]](s *Store, bucket []byte, what string, pending map[string]T) ([]T, error) {
	byKey := make(map[string]T)
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			r := R(new(Rec))
			err := json.Unmarshal(v, r)
			if err == nil {
				err = r.check()
			}
			if err != nil {
				s.skip(what, k, err)
				return nil
			}
			byKey[string(k)] = r.stats()
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("cell store: load %ss: %w", what, err)
	}
	s.mu.Lock()
	maps.Copy(byKey, pending)
	s.mu.Unlock()
	out := make([]T, 0, len(byKey))
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		out = append(out, byKey[k])
	}
	return out, nil
}

// saveLearnt queues v under key in pending for the flusher. Like SaveCell
// it never blocks on disk.
func saveLearnt[T any](s *Store, pending map[string]T, key string, v T) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	pending[key] = v
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// putLearnt writes the statistics of items into bucket in their stored
// form.
func putLearnt[T, Rec any](tx *bolt.Tx, bucket []byte, items map[string]T, stored func(T) Rec) error {
	b := tx.Bucket(bucket)
	for k, item := range items {
		v, err := json.Marshal(stored(item))
		if err != nil {
			return fmt.Errorf("encode %s: %w", k, err)
		}
		if err := b.Put([]byte(k), v); err != nil {
			return fmt.Errorf("put %s: %w", k, err)
		}
	}
	return nil
}
