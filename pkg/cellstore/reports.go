package cellstore

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// reportsBucket holds what the learning predictor learnt: which kinds of
// measurement report the network follows with a handover command.
var reportsBucket = []byte("reports")

var _ statemachine.LearntStore = (*Store)(nil)

// reportRecord is the stored form of a statemachine.ReportStats.
type reportRecord struct {
	Version  int            `json:"v"`
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
	rec := reportRecord{Version: recordVersion, RAT: r.RAT, Band: r.Band, Event: r.Event, Measured: r.Measured,
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
	s := statemachine.ReportStats{RAT: r.RAT, Band: r.Band, Event: r.Event, Measured: r.Measured, Carrier: r.Carrier,
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
// trigger.
func reportKey(r statemachine.ReportStats) string {
	return fmt.Sprintf("%s/%s/%s/%s/%s/%s/%s", r.RAT, r.Band, r.Event, r.Measured, r.Carrier, cellKey(r.Cell), cellKey(r.Neighbor))
}

// LoadReportStats returns what the learning predictor stored, including
// updates not yet flushed, ordered by key. Records that cannot be
// decoded are logged and skipped (the machine validates the rest).
func (s *Store) LoadReportStats() ([]statemachine.ReportStats, error) {
	byKey := make(map[string]statemachine.ReportStats)
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(reportsBucket).ForEach(func(k, v []byte) error {
			var r reportRecord
			err := json.Unmarshal(v, &r)
			if err == nil && r.Version != recordVersion {
				err = fmt.Errorf("unknown record version %d", r.Version)
			}
			if err != nil {
				s.mu.Lock()
				s.skipped++
				s.mu.Unlock()
				s.logger.Warn("cell store: skipping unreadable report record", "key", string(k), "err", err)
				return nil
			}
			byKey[string(k)] = r.stats()
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("cell store: load reports: %w", err)
	}
	s.mu.Lock()
	maps.Copy(byKey, s.pendingReports)
	s.mu.Unlock()
	out := make([]statemachine.ReportStats, 0, len(byKey))
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		out = append(out, byKey[k])
	}
	return out, nil
}

// SaveReportStats records the latest counts of a kind of report. Like
// SaveCell it never blocks on disk.
func (s *Store) SaveReportStats(r statemachine.ReportStats) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.pendingReports[reportKey(r)] = r
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

func putReports(tx *bolt.Tx, reports map[string]statemachine.ReportStats) error {
	b := tx.Bucket(reportsBucket)
	for k, r := range reports {
		v, err := json.Marshal(toReportRecord(r))
		if err != nil {
			return fmt.Errorf("encode %s: %w", k, err)
		}
		if err := b.Put([]byte(k), v); err != nil {
			return fmt.Errorf("put %s: %w", k, err)
		}
	}
	return nil
}
