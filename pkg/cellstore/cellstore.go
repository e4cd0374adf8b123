// Package cellstore persists the per-cell buffer estimates of m2hod, and
// what its state machine learnt of each mobile network (which
// measurement reports it follows with a handover command, how long
// after them, and the mean T2), in an embedded bbolt database in the
// state directory, so that what was learnt about a cell survives
// restarts. Every record belongs to a mobile network, or to none. It
// implements estimator.Store and statemachine.LearntStore.
//
// Writes are coalesced per cell and committed in the background: the
// estimator calls SaveCell from the goroutine that drives the datapath,
// which must never wait for an fsync. A crash loses at most one flush
// interval of updates, which only makes the next estimate more
// conservative for a while.
//
// A store that cannot be read (not a bbolt file, truncated, failing its
// consistency check) is moved aside under a timestamped name with a
// warning, and a fresh one is created: losing the history is far better
// than a daemon that does not start.
package cellstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// FileName is the database file inside the state directory.
const FileName = "cells.db"

// DefaultFlushInterval bounds how long an update waits before it is on disk.
const DefaultFlushInterval = time.Second

// lockTimeout is how long Open waits for the file lock held by another
// m2hod before it gives up.
const lockTimeout = time.Second

// recordVersion is written in every cell record so that a future format
// can tell old records apart (the learning predictor's records have
// their own, reports.go). A version 1 record names no network: it was
// written before cells were kept per network, and loads as a cell of no
// network.
const recordVersion = 2

var cellsBucket = []byte("cells")

// ErrClosed is returned by SaveCell after Close.
var ErrClosed = errors.New("cell store closed")

// Options tune a Store.
type Options struct {
	// FlushInterval is the longest an update stays in memory; 0 means
	// DefaultFlushInterval.
	FlushInterval time.Duration
	Logger        *slog.Logger
	// Now stamps the name of a quarantined file; nil means time.Now.
	Now func() time.Time
}

// Store is the bbolt-backed cell store. Its methods are safe for
// concurrent use.
type Store struct {
	db     *bolt.DB
	logger *slog.Logger

	mu sync.Mutex
	// pending are the cell records to write, by network and identity:
	// the estimator saves a record at every burst, so the database key
	// is only formatted when the record is written.
	pending map[pendingCell]estimator.CellRecord
	// pendingReports, pendingLeads and pendingT2 are the learning
	// predictor's counts and intervals, and the mean T2, to write.
	pendingReports map[string]statemachine.ReportStats
	pendingLeads   map[string]statemachine.LeadStats
	pendingT2      map[string]statemachine.T2Stats
	closed         bool

	wake      chan struct{}
	stop      chan struct{}
	flusherWG sync.WaitGroup
	interval  time.Duration

	// skipped counts stored records that could not be decoded.
	skipped int
}

// Open opens (creating if needed) the store in dir. A corrupt database is
// moved aside and replaced by an empty one; the error is returned only when
// the directory is unusable or another process holds the store.
func Open(dir string, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("cell store: state directory: %w", err)
	}
	path := filepath.Join(dir, FileName)
	db, err := openChecked(path)
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("cell store %s: locked by another process (is another m2hod running?)", path)
		}
		var pathErr *os.PathError
		if errors.As(err, &pathErr) {
			return nil, fmt.Errorf("cell store: %w", err)
		}
		aside := fmt.Sprintf("%s.corrupt-%s", path, opts.Now().UTC().Format("20060102T150405.000000000Z"))
		if renameErr := os.Rename(path, aside); renameErr != nil {
			return nil, fmt.Errorf("cell store %s is corrupt (%v) and cannot be moved aside: %w", path, err, renameErr)
		}
		opts.Logger.Warn("cell store corrupt, moved aside and rebuilt; cell history is lost",
			"path", path, "moved_to", aside, "err", err)
		if db, err = openChecked(path); err != nil {
			return nil, fmt.Errorf("cell store: create %s: %w", path, err)
		}
	}
	s := &Store{
		db:      db,
		logger:  opts.Logger,
		pending: make(map[pendingCell]estimator.CellRecord),

		pendingReports: make(map[string]statemachine.ReportStats),
		pendingLeads:   make(map[string]statemachine.LeadStats),
		pendingT2:      make(map[string]statemachine.T2Stats),
		wake:           make(chan struct{}, 1),
		stop:           make(chan struct{}),
		interval:       opts.FlushInterval,
	}
	s.flusherWG.Add(1)
	go s.flushLoop()
	return s, nil
}

// errCorrupt marks a database that opened but failed its checks.
var errCorrupt = errors.New("corrupt database")

// openChecked opens the database and verifies it end to end: bbolt trusts
// its pages and panics on some corruptions, so a damaged file must be
// caught here, under recover, rather than on a later read.
func openChecked(path string) (db *bolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				_ = db.Close()
			}
			db, err = nil, fmt.Errorf("%w: %v", errCorrupt, r)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for checkErr := range tx.Check() {
			if checkErr != nil {
				return fmt.Errorf("%w: %v", errCorrupt, checkErr)
			}
		}
		for _, name := range [][]byte{cellsBucket, reportsBucket, leadsBucket, t2Bucket} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// record is the stored form of an estimator.CellRecord, with its own
// stable field names.
type record struct {
	Version     int       `json:"v"`
	Network     string    `json:"network,omitempty"`
	RAT         diag.RAT  `json:"rat"`
	Band        diag.Band `json:"band"`
	PCI         uint16    `json:"pci"`
	ARFCN       uint32    `json:"arfcn"`
	BufferBytes uint64    `json:"buffer_bytes"`
	// CeilingBytes is left out when 0: a record without it has no
	// ceiling.
	CeilingBytes uint64    `json:"ceiling_bytes,omitempty"`
	Bursts       uint64    `json:"bursts"`
	Updated      time.Time `json:"updated"`
}

func toRecord(c estimator.CellRecord) record {
	return record{
		Version: recordVersion, Network: c.Network, RAT: c.Cell.RAT, Band: c.Cell.Band, PCI: c.Cell.PCI, ARFCN: c.Cell.ARFCN,
		BufferBytes: c.BufferBytes, CeilingBytes: c.CeilingBytes, Bursts: c.Bursts, Updated: c.Updated,
	}
}

func (r record) cellRecord() estimator.CellRecord {
	return estimator.CellRecord{
		Network:     r.Network,
		Cell:        diag.Cell{RAT: r.RAT, Band: r.Band, PCI: r.PCI, ARFCN: r.ARFCN}.Normalized(),
		BufferBytes: r.BufferBytes, CeilingBytes: r.CeilingBytes, Bursts: r.Bursts, Updated: r.Updated,
	}
}

// cellKey is the identity of a cell in database keys, RAT + ARFCN + PCI.
func cellKey(c diag.Cell) string {
	return fmt.Sprintf("%s/%d/%d", c.RAT, c.ARFCN, c.PCI)
}

// recordKey is the database key of a cell record: the cell's identity,
// and its network when it has one. A cell of no network keeps the key
// it had before networks were recorded, so that its estimate goes on
// from the version 1 record rather than beside it.
func recordKey(network string, c diag.Cell) string {
	k := cellKey(c)
	if network != "" {
		k += "/network:" + network
	}
	return k
}

// pendingCell identifies a pending cell record.
type pendingCell struct {
	network string
	cell    diag.CellKey
}

func validRecord(r record) error {
	switch {
	case r.Version == 1 && r.Network != "":
		return fmt.Errorf("a version 1 record with network %q", r.Network)
	case r.Version != 1 && r.Version != recordVersion:
		return fmt.Errorf("unknown record version %d", r.Version)
	case r.RAT != diag.RATLTE && r.RAT != diag.RATNR:
		return fmt.Errorf("unknown rat %q", r.RAT)
	case r.Band != "" && r.Band != diag.BandSub6 && r.Band != diag.BandMmWave:
		return fmt.Errorf("unknown band %q", r.Band)
	}
	return nil
}

// LoadCells returns every stored cell of every network, including
// updates not yet flushed, ordered by key. Records that cannot be decoded are logged and
// skipped.
func (s *Store) LoadCells() ([]estimator.CellRecord, error) {
	byKey := make(map[string]estimator.CellRecord)
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(cellsBucket).ForEach(func(k, v []byte) error {
			var r record
			err := json.Unmarshal(v, &r)
			if err == nil {
				err = validRecord(r)
			}
			if err != nil {
				s.skip("cell", k, err)
				return nil
			}
			byKey[string(k)] = r.cellRecord()
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("cell store: load: %w", err)
	}
	s.mu.Lock()
	for _, c := range s.pending {
		byKey[recordKey(c.Network, c.Cell)] = c
	}
	s.mu.Unlock()
	cells := make([]estimator.CellRecord, 0, len(byKey))
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		cells = append(cells, byKey[k])
	}
	return cells, nil
}

// SaveCell records the latest estimate of a cell. It never blocks on disk;
// the record is committed within the flush interval, or by Close.
func (s *Store) SaveCell(c estimator.CellRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	c.Cell = c.Cell.Normalized()
	s.pending[pendingCell{network: c.Network, cell: c.Cell.Key()}] = c
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// skip counts and logs a stored record of kind that cannot be decoded.
func (s *Store) skip(kind string, key []byte, err error) {
	s.mu.Lock()
	s.skipped++
	s.mu.Unlock()
	s.logger.Warn("cell store: skipping unreadable "+kind+" record", "key", string(key), "err", err)
}

// Skipped returns how many stored records could not be decoded so far.
func (s *Store) Skipped() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.skipped
}

// flushLoop commits pending updates at most once per interval.
func (s *Store) flushLoop() {
	defer s.flusherWG.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
		}
		select {
		case <-s.stop:
			return
		case <-time.After(s.interval):
		}
		if err := s.Flush(); err != nil {
			s.logger.Warn("cell store: flush failed; will retry", "err", err)
		}
	}
}

// Flush commits every pending update now.
func (s *Store) Flush() error {
	s.mu.Lock()
	batch, reports, leads, t2 := s.pending, s.pendingReports, s.pendingLeads, s.pendingT2
	s.pending = make(map[pendingCell]estimator.CellRecord)
	s.pendingReports = make(map[string]statemachine.ReportStats)
	s.pendingLeads = make(map[string]statemachine.LeadStats)
	s.pendingT2 = make(map[string]statemachine.T2Stats)
	s.mu.Unlock()
	if len(batch) == 0 && len(reports) == 0 && len(leads) == 0 && len(t2) == 0 {
		return nil
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(cellsBucket)
		for _, c := range batch {
			k := recordKey(c.Network, c.Cell)
			v, err := json.Marshal(toRecord(c))
			if err != nil {
				return fmt.Errorf("encode %s: %w", k, err)
			}
			if err := b.Put([]byte(k), v); err != nil {
				return fmt.Errorf("put %s: %w", k, err)
			}
		}
		if err := putLearnt(tx, reportsBucket, reports, toReportRecord); err != nil {
			return err
		}
		if err := putLearnt(tx, leadsBucket, leads, toLeadRecord); err != nil {
			return err
		}
		return putLearnt(tx, t2Bucket, t2, toT2Record)
	})
	if err != nil {
		// Put the batch back unless a newer update replaced it meanwhile.
		s.mu.Lock()
		for k, c := range batch {
			if _, newer := s.pending[k]; !newer {
				s.pending[k] = c
			}
		}
		for k, r := range reports {
			if _, newer := s.pendingReports[k]; !newer {
				s.pendingReports[k] = r
			}
		}
		for k, l := range leads {
			if _, newer := s.pendingLeads[k]; !newer {
				s.pendingLeads[k] = l
			}
		}
		for k, v := range t2 {
			if _, newer := s.pendingT2[k]; !newer {
				s.pendingT2[k] = v
			}
		}
		s.mu.Unlock()
		return fmt.Errorf("cell store: flush: %w", err)
	}
	return nil
}

// Close commits pending updates and closes the database.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	s.flusherWG.Wait()
	flushErr := s.Flush()
	if err := s.db.Close(); err != nil {
		return errors.Join(flushErr, fmt.Errorf("cell store: close: %w", err))
	}
	return flushErr
}
