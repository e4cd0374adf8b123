package statemachine

import (
	"errors"
	"fmt"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
)

// Cells of the tests: an LTE anchor and a neighbour, two NR sub-6 cells
// and two mmWave cells.
var (
	lteA  = diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 1, ARFCN: 1850}
	lteB  = diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 2, ARFCN: 1850}
	nrA   = diag.Cell{RAT: diag.RATNR, Band: diag.BandSub6, PCI: 10, ARFCN: 632628}
	nrB   = diag.Cell{RAT: diag.RATNR, Band: diag.BandSub6, PCI: 11, ARFCN: 632628}
	mmA   = diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 100, ARFCN: 2079167}
	mmB   = diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 101, ARFCN: 2079167}
	cells = []diag.Cell{lteA, lteB, nrA, nrB, mmA, mmB}
)

// Buffer estimates the tests seed: every sub-6 cell but nrB is known.
const (
	lteABuffer = 300_000
	lteBBuffer = 400_000
	nrABuffer  = 200_000
	mmABuffer  = 5_000_000
)

// seededStore is an estimator.Store holding fixed records.
type seededStore struct{ records []estimator.CellRecord }

func (s *seededStore) LoadCells() ([]estimator.CellRecord, error) { return s.records, nil }
func (s *seededStore) SaveCell(estimator.CellRecord) error        { return nil }

func seededEstimator() (*estimator.Estimator, error) {
	store := &seededStore{records: []estimator.CellRecord{
		{Cell: lteA, BufferBytes: lteABuffer, Bursts: 1},
		{Cell: lteB, BufferBytes: lteBBuffer, Bursts: 1},
		{Cell: nrA, BufferBytes: nrABuffer, Bursts: 1},
		{Cell: mmA, BufferBytes: mmABuffer, Bursts: 1},
	}}
	return estimator.New(estimator.DefaultConfig(), store, nil)
}

// actCall is one Actuator call.
type actCall struct {
	op       string
	bytes    uint32
	deadline time.Time
}

func (c actCall) String() string {
	switch c.op {
	case OpSetClamp:
		return fmt.Sprintf("%s(%d)", c.op, c.bytes)
	default:
		return c.op
	}
}

var errDatapath = errors.New("datapath unavailable")

// fakeActuator records calls and keeps the policy the datapath would hold.
// Operations in failing return an error and change nothing.
type fakeActuator struct {
	calls   []actCall
	failing map[string]bool
	// failNext, when set, decides per call whether it fails.
	failNext func(op string) bool

	clampBytes       uint32
	freeze           bool
	clampDeadline    time.Time
	suppressing      bool
	suppressDeadline time.Time
	epoch            int
}

func (f *fakeActuator) record(c actCall) error {
	f.calls = append(f.calls, c)
	if f.failing[c.op] || (f.failNext != nil && f.failNext(c.op)) {
		return errDatapath
	}
	return nil
}

func (f *fakeActuator) SetClamp(bytes uint32, deadline time.Time) error {
	if err := f.record(actCall{op: OpSetClamp, bytes: bytes, deadline: deadline}); err != nil {
		return err
	}
	f.clampBytes, f.freeze, f.clampDeadline = bytes, false, deadline
	return nil
}

func (f *fakeActuator) SetFreeze(deadline time.Time) error {
	if err := f.record(actCall{op: OpSetFreeze, deadline: deadline}); err != nil {
		return err
	}
	f.clampBytes, f.freeze, f.clampDeadline = 0, true, deadline
	return nil
}

func (f *fakeActuator) ClearClamp() error {
	if err := f.record(actCall{op: OpClearClamp}); err != nil {
		return err
	}
	f.clampBytes, f.freeze, f.clampDeadline = 0, false, time.Time{}
	return nil
}

func (f *fakeActuator) PrepareSuppression(deadline time.Time) error {
	if err := f.record(actCall{op: OpPrepareSuppression, deadline: deadline}); err != nil {
		return err
	}
	f.suppressing, f.suppressDeadline = true, deadline
	return nil
}

func (f *fakeActuator) StartSuppression(deadline time.Time) error {
	if err := f.record(actCall{op: OpStartSuppression, deadline: deadline}); err != nil {
		return err
	}
	f.suppressing, f.suppressDeadline = true, deadline
	f.epoch++
	return nil
}

func (f *fakeActuator) StopSuppression() error {
	if err := f.record(actCall{op: OpStopSuppression}); err != nil {
		return err
	}
	f.suppressing, f.suppressDeadline = false, time.Time{}
	return nil
}

// ops lists the operations called, with clamp sizes.
func (f *fakeActuator) ops() []string {
	out := make([]string, len(f.calls))
	for i, c := range f.calls {
		out[i] = c.String()
	}
	return out
}

// recordingObserver keeps what the machine reported.
type recordingObserver struct {
	transitions []string
	handovers   []string
	predictions []string
}

func (o *recordingObserver) Transition(from, to State, reason string, _ time.Time) {
	o.transitions = append(o.transitions, fmt.Sprintf("%s>%s:%s", from, to, reason))
}
func (o *recordingObserver) Handover(kind string, _ time.Time) {
	o.handovers = append(o.handovers, kind)
}
func (o *recordingObserver) Prediction(outcome string, _ time.Time) {
	o.predictions = append(o.predictions, outcome)
}
