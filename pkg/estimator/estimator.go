// Package estimator keeps the two estimates M2HO acts on (paper sections
// 4.3 and 4.5): the buffer size of each cell, learnt from downlink bursts
// and the queues the cell held, and the available bandwidth, learnt from
// byte counts and RTT samples.
//
// An Estimator is safe for concurrent use: the daemon feeds it from its
// datapath readers while the state machine queries it and /status reads it.
// It does no I/O of its own apart from the Store it is given.
package estimator

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
)

// Burst is one downlink burst: a packet train seen by the datapath, or a
// run of scheduling slots found in rb_alloc events.
type Burst struct {
	Start, End     time.Time
	Bytes, Packets uint64
}

// CellRecord is what is known about one cell. BufferBytes is the largest
// burst, or standing queue, seen in the cell, a lower bound of its buffer
// size, unless an overflow showed less (CeilingBytes). CeilingBytes is
// the queue the cell held when it last dropped the senders' data (see
// Estimator.AddRetransmitted), 0 when none was seen: bursts do not raise
// the estimate above it, queues held over two rounds lift it. Network is
// the mobile network it was measured in, empty when the estimator was
// given none: cell identities repeat across operators.
type CellRecord struct {
	Network      string
	Cell         diag.Cell
	BufferBytes  uint64
	CeilingBytes uint64
	Bursts       uint64
	Updated      time.Time
}

// Store persists cell records across restarts. SaveCell is called from
// the goroutine that feeds bursts, every time a record changes, so it must
// not block on disk.
type Store interface {
	LoadCells() ([]CellRecord, error)
	SaveCell(CellRecord) error
}

// Sources of a TargetBuffer answer, in the order the lookup tries them.
const (
	// SourceCell: the target cell's own estimate.
	SourceCell = "cell"
	// SourceFleet: the target is unknown here; what other hosts measured
	// of it, shared through the fleet store, within Config.MinClampBytes
	// and Config.FleetMaxBufferBytes.
	SourceFleet = "fleet"
	// SourceBandMin: the target is unknown; the smallest estimate among
	// known cells of its band.
	SourceBandMin = "band_min"
	// SourceSub6Min: the target is a mmWave cell, whose bursts cannot be
	// trusted (paper section 4.3); the smallest sub-6 estimate.
	SourceSub6Min = "sub6_min"
	// SourceDefault: nothing usable is known; Config.DefaultBufferBytes.
	SourceDefault = "default"
)

// Fleet is what other hosts learnt of cells, shared through a fleet
// store. Both methods are called with the estimator's lock held, from the
// goroutines that feed bursts and look up targets: they must answer from
// memory and never wait for the network.
type Fleet interface {
	// Lookup returns the buffer estimate other hosts report for cell.
	Lookup(cell diag.Cell) (bufferBytes uint64, ok bool)
	// Publish offers a changed record of this host, with the delivery
	// rate in bytes per second seen in the cell (0 when unknown).
	Publish(r CellRecord, rateBytesPerSecond float64)
}

// Config tunes an Estimator. Zero fields take the value of DefaultConfig.
type Config struct {
	// DefaultBufferBytes answers TargetBuffer when no cell is known.
	DefaultBufferBytes uint64
	// MinClampBytes is the floor of every answer of TargetBuffer and
	// BandwidthClamp: a tiny burst or an idle link must not shrink the
	// window below what keeps a link busy.
	MinClampBytes uint64
	// FleetMaxBufferBytes caps a fleet answer of TargetBuffer: a wrong or
	// hostile peer must not open the window beyond what a sub-6 cell
	// holds (the fleet answers only for cells that are not mmWave).
	FleetMaxBufferBytes uint64
	// Lambda is the probing factor of Eq. 2.
	Lambda float64
	// MaxBurstDuration rejects longer bursts: a cell drains a UE's buffer
	// in milliseconds, so a longer train is a sender-limited stream, not
	// one buffer's worth of data.
	MaxBurstDuration time.Duration
	// RTTMinWindow is how long a minimum RTT stays valid (RTT_min of
	// Eq. 2) before a probe measures it again; it also restarts when the
	// serving cell changes.
	RTTMinWindow time.Duration
	// BandwidthMaxAge is how old the last per-RTT byte count may be for
	// BandwidthClamp to answer, beyond the smoothed RTT the next one
	// takes.
	BandwidthMaxAge time.Duration
	// PeakWindow is how far back BandwidthClamp looks for the peak
	// delivery rate.
	PeakWindow time.Duration
}

// DefaultConfig returns the defaults.
//
// DefaultBufferBytes is about one sub-6 bandwidth-delay product (121.5
// Mbit/s TCP throughput times the 69.7 ms mean RTT of the paper's section
// 3 is 1.06 MB): it keeps a sub-6 link busy while the handover is pending
// and bounds the data in flight to what such a cell holds. MinClampBytes is
// the largest unscaled TCP window, about 45 full-size segments. Lambda is the
// paper's 2. RTTMinWindow is the 10 s of BBR's min-RTT filter.
// FleetMaxBufferBytes is 4 MiB, between two and three times the largest
// sub-6 buffer the paper measured (about 1.5 MB, section 3.2).
// PeakWindow is 1 s: longer than BBR's bandwidth probing cycle at the
// testbed's 70 ms RTT (8 rounds, 560 ms), so the peak holds the rate of
// its last probe, and short against the seconds a cell's capacity takes
// to change much.
//
// MaxBurstDuration is 75 ms, below the time the paper's cells take to
// drain a full buffer at their peak rate (sub-6: 1.5 MB at 150 Mbit/s, 80
// ms; mmWave: 12 MB at 1 Gbit/s, 96 ms; section 3.2). A burst is only a
// lower bound of the buffer if the cell drained what it held when the
// burst began. A bulk sender keeps the cell busy, and its train then
// counts arrivals too; the train is at most duration x peak rate, so
// bounding the duration by the drain time keeps the bound below the
// buffer even then. With 250 ms, saturated sub-6 trains of the testbed
// raised the estimate to three times the real buffer, and the clamp no
// longer prevented the target overflow (docs/testbed.md, "Results").
func DefaultConfig() Config {
	return Config{
		DefaultBufferBytes:  1 << 20,
		MinClampBytes:       64 << 10,
		FleetMaxBufferBytes: 4 << 20,
		Lambda:              2,
		MaxBurstDuration:    75 * time.Millisecond,
		RTTMinWindow:        10 * time.Second,
		BandwidthMaxAge:     time.Second,
		PeakWindow:          time.Second,
	}
}

func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	if c.DefaultBufferBytes == 0 {
		c.DefaultBufferBytes = d.DefaultBufferBytes
	}
	if c.MinClampBytes == 0 {
		c.MinClampBytes = d.MinClampBytes
	}
	if c.FleetMaxBufferBytes == 0 {
		c.FleetMaxBufferBytes = d.FleetMaxBufferBytes
	}
	if c.Lambda == 0 {
		c.Lambda = d.Lambda
	}
	if c.MaxBurstDuration == 0 {
		c.MaxBurstDuration = d.MaxBurstDuration
	}
	if c.RTTMinWindow == 0 {
		c.RTTMinWindow = d.RTTMinWindow
	}
	if c.BandwidthMaxAge == 0 {
		c.BandwidthMaxAge = d.BandwidthMaxAge
	}
	if c.PeakWindow == 0 {
		c.PeakWindow = d.PeakWindow
	}
	switch {
	case math.IsNaN(c.Lambda) || math.IsInf(c.Lambda, 0) || c.Lambda < 0:
		return c, fmt.Errorf("estimator: lambda %v: must be a positive number", c.Lambda)
	case c.MinClampBytes > c.DefaultBufferBytes:
		return c, fmt.Errorf("estimator: minimum clamp %d bytes exceeds the default buffer %d bytes", c.MinClampBytes, c.DefaultBufferBytes)
	case c.FleetMaxBufferBytes < c.MinClampBytes:
		return c, fmt.Errorf("estimator: fleet maximum %d bytes is below the minimum clamp %d bytes", c.FleetMaxBufferBytes, c.MinClampBytes)
	case c.MaxBurstDuration < 0 || c.RTTMinWindow < 0 || c.BandwidthMaxAge < 0 || c.PeakWindow < 0:
		return c, errors.New("estimator: durations must be positive")
	}
	return c, nil
}

// Estimator holds the per-cell buffer estimates and the bandwidth
// estimate. Create it with New.
type Estimator struct {
	cfg    Config
	store  Store
	logger *slog.Logger
	fleet  Fleet

	mu sync.Mutex
	// network is the mobile network of cells (UseNetwork).
	network string
	serving diag.Cell
	// servingSince is when serving started to serve.
	servingSince time.Time
	// path counts the changes of serving cell: RTT samples read while
	// an older path was current belong to that path (see AddRTT).
	path  uint64
	cells map[diag.CellKey]*CellRecord
	// bandMin caches the smallest estimate per band; a band is absent
	// when it must be recomputed. Estimates mostly grow, so after the
	// first bursts of a cell lookups rarely scan.
	bandMin map[diag.Band]uint64
	slots   map[diag.CellKey]*SlotBursts
	pending []pendingBurst
	bytes   byteHistory
	bw      bandwidth
	loss    lossState
	skipped map[string]uint64
}

// New returns an Estimator seeded with the records of store (nil: no
// persistence) of no network, until UseNetwork names one. A store that
// fails to load is logged and ignored: the estimates are rebuilt from
// traffic.
func New(cfg Config, store Store, logger *slog.Logger) (*Estimator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &Estimator{
		cfg:     cfg,
		store:   store,
		logger:  logger,
		cells:   make(map[diag.CellKey]*CellRecord),
		bandMin: make(map[diag.Band]uint64),
		slots:   make(map[diag.CellKey]*SlotBursts),
		skipped: make(map[string]uint64, len(SkipReasons)),
	}
	for _, reason := range SkipReasons {
		e.skipped[reason] = 0
	}
	e.loadLocked()
	return e, nil
}

// loadLocked replaces the cells with the store's records of the
// estimator's network. A store that fails to load is logged and
// ignored: the estimates are rebuilt from traffic.
func (e *Estimator) loadLocked() {
	clear(e.cells)
	clear(e.bandMin)
	if e.store == nil {
		return
	}
	records, err := e.store.LoadCells()
	if err != nil {
		e.logger.Warn("cell store unreadable, starting without history", "err", err)
		return
	}
	for _, r := range records {
		if r.Network != e.network {
			continue
		}
		r.Cell = r.Cell.Normalized()
		if r.Cell.RAT == "" || r.BufferBytes == 0 {
			e.skipLocked("stored_record_invalid")
			continue
		}
		rec := r
		e.cells[r.Cell.Key()] = &rec
	}
	e.logger.Info("cell estimates loaded", "network", e.network, "cells", len(e.cells))
}

// UseNetwork makes network (empty: none) the mobile network of the
// cells the estimator measures and looks up, when it is not already:
// cell identities repeat across operators, so the estimates of another
// network's cells, and those measured before networks were recorded,
// stay in the store and out of the lookups. The estimator goes on from
// the store's records of network.
func (e *Estimator) UseNetwork(network string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if network == e.network {
		return
	}
	e.network = network
	e.loadLocked()
}

// UseFleet makes the estimator publish every changed record to f and ask
// f about targets it has not measured itself. Call it before the
// estimator is in use.
func (e *Estimator) UseFleet(f Fleet) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fleet = f
}

// SetServing names the cell that bursts reported by AddBurst belong to
// from at on; a burst that started before at is dropped, as it may hold
// the previous cell's data. A change of cell also restarts the bandwidth
// estimate: the new cell has its own capacity, and a rate measured on a
// mmWave cell held against a sub-6 cell lets the sender overflow it (a
// testbed run lost 1,086 packets that way right after a mmWave to sub-6
// handover, docs/testbed.md "Results"). The path's RTT_min carries over
// for a while (carriedRTTMin).
func (e *Estimator) SetServing(c diag.Cell, at time.Time) {
	c = c.Normalized()
	e.mu.Lock()
	defer e.mu.Unlock()
	if c.Key() != e.serving.Key() {
		e.bw.restart(at, e.cfg.RTTMinWindow)
		e.servingSince = at
		e.path++
	}
	e.serving = c
}

// Path returns a number that changes each time the serving cell does.
// A reader of RTT samples takes it before reading them and hands it to
// AddRTT, so that samples read on the previous path cannot reach the
// estimate that SetServing restarted for the new one.
func (e *Estimator) Path() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.path
}

// TargetBuffer returns the buffer estimate to clamp the window to before a
// handover to target, and which lookup rule gave it (a Source constant).
// A target with only a band (or only a RAT) set is an unknown cell of that
// band; a target without either is treated as sub-6, the smaller class.
func (e *Estimator) TargetBuffer(target diag.Cell) (bytes uint64, source string) {
	target = target.Normalized()
	e.mu.Lock()
	defer e.mu.Unlock()
	bytes, source = e.lookupLocked(target, true)
	return min(max(bytes, e.cfg.MinClampBytes), MaxWindowBytes), source
}

// lookupLocked answers TargetBuffer; askFleet says whether the fleet may
// answer for a cell not measured here.
func (e *Estimator) lookupLocked(target diag.Cell, askFleet bool) (uint64, string) {
	if target.Band == diag.BandMmWave {
		if b, ok := e.bandMinLocked(diag.BandSub6); ok {
			return b, SourceSub6Min
		}
		return e.cfg.DefaultBufferBytes, SourceDefault
	}
	if target.RAT != "" {
		if r, ok := e.cells[target.Key()]; ok {
			return r.BufferBytes, SourceCell
		}
		// What this host measured always wins; a peer's report only
		// stands in for a cell met here for the first time, capped so
		// that it cannot open the window beyond a sub-6 cell's buffer
		// (TargetBuffer raises it to the floor).
		if askFleet && e.fleet != nil {
			if b, ok := e.fleet.Lookup(target); ok {
				return min(b, e.cfg.FleetMaxBufferBytes), SourceFleet
			}
		}
	}
	if b, ok := e.bandMinLocked(diag.BandSub6); ok {
		return b, SourceBandMin
	}
	return e.cfg.DefaultBufferBytes, SourceDefault
}

func (e *Estimator) bandMinLocked(band diag.Band) (uint64, bool) {
	if smallest, ok := e.bandMin[band]; ok {
		return smallest, true
	}
	var smallest uint64
	found := false
	for _, r := range e.cells {
		if r.Cell.Band == band && (!found || r.BufferBytes < smallest) {
			smallest, found = r.BufferBytes, true
		}
	}
	if found {
		e.bandMin[band] = smallest
	}
	return smallest, found
}

// Cells returns every cell record, ordered by band, RAT, ARFCN and PCI.
func (e *Estimator) Cells() []CellRecord {
	e.mu.Lock()
	out := make([]CellRecord, 0, len(e.cells))
	for _, r := range e.cells {
		out = append(out, *r)
	}
	e.mu.Unlock()
	slices.SortFunc(out, func(a, b CellRecord) int {
		return cmp.Or(
			cmp.Compare(a.Cell.Band, b.Cell.Band),
			cmp.Compare(a.Cell.RAT, b.Cell.RAT),
			cmp.Compare(a.Cell.ARFCN, b.Cell.ARFCN),
			cmp.Compare(a.Cell.PCI, b.Cell.PCI),
		)
	})
	return out
}

// SkipReasons are the reasons the estimator rejects an input for. Each is
// counted from the start, 0 until its first rejection, so that Skipped
// lists them all.
var SkipReasons = []string{
	"bytes_time_backwards", "bytes_duplicate_time", "bytes_counter_reset",
	"rtt_previous_cell", "rtt_not_positive", "rtt_implausible",
	"burst_no_serving_cell", "burst_too_long", "burst_empty", "slot_burst_no_bytes",
	"rb_alloc_no_cell", "rb_alloc_bad_slot_duration", "rb_alloc_no_slots", "rb_alloc_bad_slot",
	"stored_record_invalid", "store_save_failed",
}

// Skipped returns how many inputs were rejected, by reason, sorted by
// reason; every one of SkipReasons is there.
func (e *Estimator) Skipped() []diag.Counter {
	e.mu.Lock()
	out := make([]diag.Counter, 0, len(e.skipped))
	for reason, n := range e.skipped {
		out = append(out, diag.Counter{Label: reason, Value: n})
	}
	e.mu.Unlock()
	slices.SortFunc(out, func(a, b diag.Counter) int { return cmp.Compare(a.Label, b.Label) })
	return out
}

func (e *Estimator) skipLocked(reason string) { e.skipped[reason]++ }

// recordBurstLocked folds one burst of cell into its record and persists
// the record.
func (e *Estimator) recordBurstLocked(cell diag.Cell, b Burst) {
	r := e.recordLocked(cell)
	r.Bursts++
	r.Updated = b.End
	bytes := b.Bytes
	if r.CeilingBytes != 0 {
		bytes = min(bytes, r.CeilingBytes)
	}
	e.raiseLocked(r, bytes)
	e.saveLocked(r)
}

func (e *Estimator) recordLocked(cell diag.Cell) *CellRecord {
	key := cell.Key()
	r, ok := e.cells[key]
	if !ok {
		r = &CellRecord{Network: e.network, Cell: cell}
		e.cells[key] = r
	}
	return r
}

// raiseLocked raises the estimate of r to bytes if that is larger: every
// input is a lower bound of the buffer.
func (e *Estimator) raiseLocked(r *CellRecord, bytes uint64) {
	if bytes <= r.BufferBytes {
		return
	}
	r.BufferBytes = bytes
	delete(e.bandMin, r.Cell.Band)
	e.logger.Debug("buffer estimate raised", "cell", r.Cell, "bytes", bytes)
}

func (e *Estimator) saveLocked(r *CellRecord) {
	if e.fleet != nil {
		e.fleet.Publish(*r, e.servingRateLocked(r.Cell))
	}
	if e.store == nil {
		return
	}
	if err := e.store.SaveCell(*r); err != nil {
		e.skipLocked("store_save_failed")
		e.logger.Warn("saving cell estimate failed", "cell", r.Cell, "err", err)
	}
}
