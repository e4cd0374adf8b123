package diag

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// JSONVersion is the version of the diag event JSON encoding (DESIGN.md).
const JSONVersion = 1

// Reasons carried by ParseError. They are stable tokens used as metric
// labels (m2hod_diag_errors_total{reason=...}).
const (
	ReasonJSONSyntax  = "json_syntax"
	ReasonJSONVersion = "json_version"
	ReasonJSONType    = "json_type"
	ReasonJSONTime    = "json_time"
	ReasonJSONCell    = "json_cell"
	ReasonJSONField   = "json_field"
)

// ParseError is a rejected input record. Reason is a short stable token
// suitable as a metric label; Err says what exactly was wrong.
type ParseError struct {
	Reason string
	Err    error
}

func (e *ParseError) Error() string { return e.Reason + ": " + e.Err.Error() }

func (e *ParseError) Unwrap() error { return e.Err }

func parseErrorf(reason, format string, args ...any) *ParseError {
	return &ParseError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ErrorReason returns the metric reason of err: the Reason of the
// ParseError it wraps, or fallback.
func ErrorReason(err error, fallback string) string {
	var pe *ParseError
	if errors.As(err, &pe) {
		return pe.Reason
	}
	return fallback
}

// Carrier and cell identity limits (TS 36.101 5.7.3, TS 38.101 5.4.2,
// TS 36.211 6.11, TS 38.211 7.4.2).
const (
	maxEARFCN  = 262143
	maxNRARFCN = 3279165
	maxLTEPCI  = 503
	maxNRPCI   = 1007
)

// wireCell is a cell as JSON carries it; integers are wide so that out of
// range values are reported as such rather than as type errors.
type wireCell struct {
	RAT   RAT    `json:"rat"`
	Band  Band   `json:"band,omitempty"`
	PCI   *int64 `json:"pci"`
	ARFCN *int64 `json:"arfcn"`
}

// wireCarrier is a carrier as JSON carries it (see wireCell).
type wireCarrier struct {
	RAT   RAT    `json:"rat"`
	ARFCN *int64 `json:"arfcn"`
}

type wireEvent struct {
	V        *int            `json:"v"`
	Type     Type            `json:"type"`
	T        json.RawMessage `json:"t,omitempty"`
	Event    MeasEvent       `json:"event,omitempty"`
	Serving  *wireCell       `json:"serving,omitempty"`
	Neighbor *wireCell       `json:"neighbor,omitempty"`
	Kind     HOKind          `json:"kind,omitempty"`
	Source   *wireCell       `json:"source,omitempty"`
	Target   *wireCell       `json:"target,omitempty"`
	// Conditional and Candidates: see Event.
	Conditional bool         `json:"conditional,omitempty"`
	Candidates  []wireCell   `json:"candidates,omitempty"`
	Cell        *wireCell    `json:"cell,omitempty"`
	Cause       FailureCause `json:"cause,omitempty"`
	PLMN        string       `json:"plmn,omitempty"`
	Redirect    *wireCarrier `json:"redirect,omitempty"`
	SlotUS      *int64       `json:"slot_us,omitempty"`
	Slots       [][]int64    `json:"slots,omitempty"`
}

// ParseJSON decodes one version-1 diag event (one line or datagram). The
// event's Time is zero when the record has no "t"; the caller then uses the
// receive time. Every rejection is a *ParseError.
func ParseJSON(line []byte) (Event, error) {
	// Room for the slots of an rb_alloc record of up to 64 of them (a
	// modem logs a few milliseconds per record); longer ones grow on the
	// heap.
	var room [2 * 64]int64
	w, pairs, ok := decodeRBAlloc(line, room[:0])
	if !ok {
		// Apart from w, which then stays off the heap for rb_alloc.
		decoded := new(wireEvent)
		if err := json.Unmarshal(line, decoded); err != nil {
			var typeErr *json.UnmarshalTypeError
			if errors.As(err, &typeErr) {
				return Event{}, &ParseError{Reason: ReasonJSONField, Err: err}
			}
			return Event{}, &ParseError{Reason: ReasonJSONSyntax, Err: err}
		}
		w = *decoded
	}
	if w.V == nil || *w.V != JSONVersion {
		return Event{}, parseErrorf(ReasonJSONVersion, "want \"v\":%d", JSONVersion)
	}
	ev := Event{Type: w.Type}
	var err error
	if ev.Time, err = parseJSONTime(w.T); err != nil {
		return Event{}, err
	}
	switch w.Type {
	case TypeMeasReport:
		err = w.measReport(&ev)
	case TypeHOCommand:
		err = w.hoCommand(&ev)
	case TypeHOComplete:
		if w.Cell != nil {
			ev.Cell, err = w.Cell.cell("cell")
		}
	case TypeHOFailure:
		ev.Cause = w.Cause
		switch w.Cause {
		case CauseRLF, CauseHOF, CauseReestablishment, CauseNASRecovery:
		default:
			err = parseErrorf(ReasonJSONField, "unknown cause %q", w.Cause)
		}
	case TypeRBAlloc:
		err = w.rbAlloc(&ev, pairs)
	case TypeCHOConfig:
		err = w.choConfig(&ev)
	case TypeNetwork:
		err = w.network(&ev)
	case TypeRRCRelease:
		err = w.rrcRelease(&ev)
	default:
		err = parseErrorf(ReasonJSONType, "unknown type %q", w.Type)
	}
	if err != nil {
		return Event{}, err
	}
	return ev, nil
}

// measReport reads a meas_report. Its minimum is a known measurement
// event: that alone is actionable (an A1 cancels a pending prediction
// whichever cell it names) and it is all a report reliably carries. Both
// cells are optional because the logs the decoders read do not always name
// them: a GSMTAP v2 header has no PCI and QCSuper writes ARFCN 0, so the
// serving cell stays unknown until a handover names it, and a report may
// list no neighbour of the measured object's RAT. Consumers use the serving
// cell they track when the report has none, and an event that needs a
// neighbour (A3 between cells of one type, A5 towards mmWave) predicts
// nothing without one. A cell that is present must still be a valid cell.
func (w *wireEvent) measReport(ev *Event) error {
	ev.Meas = w.Event
	if !w.Event.Known() {
		return parseErrorf(ReasonJSONField, "unknown measurement event %q", w.Event)
	}
	var err error
	if w.Serving != nil {
		if ev.Serving, err = w.Serving.cell("serving"); err != nil {
			return err
		}
	}
	if w.Neighbor != nil {
		if ev.Neighbor, err = w.Neighbor.cell("neighbor"); err != nil {
			return err
		}
	}
	return nil
}

func (w *wireEvent) hoCommand(ev *Event) error {
	ev.Kind, ev.Conditional = w.Kind, w.Conditional
	switch w.Kind {
	case HOPCell, HOSCGAdd, HOSCGRelease, HOSCGChange:
	default:
		return parseErrorf(ReasonJSONField, "unknown handover kind %q", w.Kind)
	}
	var err error
	if w.Source != nil {
		if ev.Source, err = w.Source.cell("source"); err != nil {
			return err
		}
	}
	if w.Target == nil {
		// An SCG release has no target cell: the secondary group goes away.
		if w.Kind == HOSCGRelease {
			return nil
		}
		return parseErrorf(ReasonJSONCell, "ho_command %s without target cell", w.Kind)
	}
	ev.Target, err = w.Target.cell("target")
	return err
}

// choConfig reads a cho_config: the candidates in force, none when the
// configurations were removed, and the serving cell when known.
func (w *wireEvent) choConfig(ev *Event) error {
	var err error
	if w.Serving != nil {
		if ev.Serving, err = w.Serving.cell("serving"); err != nil {
			return err
		}
	}
	for i := range w.Candidates {
		c, err := w.Candidates[i].cell(fmt.Sprintf("candidates[%d]", i))
		if err != nil {
			return err
		}
		ev.Candidates = append(ev.Candidates, c)
	}
	return nil
}

// network reads a network event: the PLMN, and the cell that named it
// when known.
func (w *wireEvent) network(ev *Event) error {
	if !ValidPLMN(w.PLMN) {
		return parseErrorf(ReasonJSONField, "plmn %q: want MCC-MNC, 3 and 2 or 3 digits", w.PLMN)
	}
	ev.PLMN = w.PLMN
	if w.Cell == nil {
		return nil
	}
	var err error
	ev.Cell, err = w.Cell.cell("cell")
	return err
}

// rrcRelease reads an rrc_release: the cell released from and the
// carrier it redirects to, each when known.
func (w *wireEvent) rrcRelease(ev *Event) error {
	var err error
	if w.Cell != nil {
		if ev.Cell, err = w.Cell.cell("cell"); err != nil {
			return err
		}
	}
	if w.Redirect != nil {
		ev.Redirect, err = w.Redirect.carrier("redirect")
	}
	return err
}

// rbAlloc reads an rb_alloc; pairs are its slots when the rb_alloc
// decoder took it (see decodeRBAlloc), nil when w.Slots are.
func (w *wireEvent) rbAlloc(ev *Event, pairs []int64) error {
	if w.Cell == nil {
		return parseErrorf(ReasonJSONCell, "rb_alloc without cell")
	}
	var err error
	if ev.Cell, err = w.Cell.cell("cell"); err != nil {
		return err
	}
	if w.SlotUS == nil || *w.SlotUS <= 0 || *w.SlotUS > 1000 {
		return parseErrorf(ReasonJSONField, "slot_us must be in 1..1000")
	}
	ev.SlotDuration = time.Duration(*w.SlotUS) * time.Microsecond
	n := len(w.Slots)
	if pairs != nil {
		n = len(pairs) / 2
	}
	if n == 0 {
		return parseErrorf(ReasonJSONField, "rb_alloc without slots")
	}
	ev.Slots = make([]Slot, n)
	for i := range n {
		var s []int64
		if pairs != nil {
			s = pairs[2*i : 2*i+2]
		} else {
			s = w.Slots[i]
		}
		if len(s) != 2 || s[1] <= 0 || s[1] > math.MaxUint16 || s[0] < 0 || s[0] > s[1] {
			return parseErrorf(ReasonJSONField, "slot %d: want [given, total] with 0 <= given <= total, total > 0", i)
		}
		ev.Slots[i] = Slot{Given: uint16(s[0]), Total: uint16(s[1])}
	}
	return nil
}

func (c *wireCell) cell(field string) (Cell, error) {
	maxPCI, maxARFCN, err := limits(field, c.RAT)
	if err != nil {
		return Cell{}, err
	}
	switch c.Band {
	case "", BandSub6, BandMmWave:
	default:
		return Cell{}, parseErrorf(ReasonJSONCell, "%s: unknown band %q", field, c.Band)
	}
	if c.PCI == nil || *c.PCI < 0 || *c.PCI > maxPCI {
		return Cell{}, parseErrorf(ReasonJSONCell, "%s: pci missing or outside 0..%d", field, maxPCI)
	}
	if c.ARFCN == nil || *c.ARFCN < 0 || *c.ARFCN > maxARFCN {
		return Cell{}, parseErrorf(ReasonJSONCell, "%s: arfcn missing or outside 0..%d", field, maxARFCN)
	}
	return Cell{RAT: c.RAT, Band: c.Band, PCI: uint16(*c.PCI), ARFCN: uint32(*c.ARFCN)}.Normalized(), nil
}

func (c *wireCarrier) carrier(field string) (Carrier, error) {
	_, maxARFCN, err := limits(field, c.RAT)
	if err != nil {
		return Carrier{}, err
	}
	if c.ARFCN == nil || *c.ARFCN < 0 || *c.ARFCN > maxARFCN {
		return Carrier{}, parseErrorf(ReasonJSONCell, "%s: arfcn missing or outside 0..%d", field, maxARFCN)
	}
	return Carrier{RAT: c.RAT, ARFCN: uint32(*c.ARFCN)}, nil
}

// limits are the largest PCI and ARFCN of rat.
func limits(field string, rat RAT) (maxPCI, maxARFCN int64, err error) {
	switch rat {
	case RATLTE:
		return maxLTEPCI, maxEARFCN, nil
	case RATNR:
		return maxNRPCI, maxNRARFCN, nil
	}
	return 0, 0, parseErrorf(ReasonJSONCell, "%s: unknown rat %q", field, rat)
}

// parseJSONTime accepts RFC 3339 strings and unix nanoseconds as a number.
func parseJSONTime(raw json.RawMessage) (time.Time, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return time.Time{}, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return time.Time{}, &ParseError{Reason: ReasonJSONTime, Err: err}
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return time.Time{}, &ParseError{Reason: ReasonJSONTime, Err: err}
		}
		return t.UTC(), nil
	}
	ns, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}, parseErrorf(ReasonJSONTime, "t: want RFC 3339 or positive unix nanoseconds, got %.40s", raw)
	}
	return time.Unix(0, ns).UTC(), nil
}

// jsonTimeLayout is RFC 3339 with all nine fraction digits, so that every
// encoded time has the same width and sorts as text.
const jsonTimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// MarshalJSON encodes ev as one version-1 record (no trailing newline).
// Cells are written with their band; a zero (unknown) cell is left out, as
// is a zero Time ("t"). ParseJSON reads every record this writes for an
// event the decoders produce back into the same event, cells normalised.
func MarshalJSON(ev Event) ([]byte, error) {
	v := JSONVersion
	w := wireEvent{V: &v, Type: ev.Type}
	if !ev.Time.IsZero() {
		w.T = json.RawMessage(strconv.Quote(ev.Time.UTC().Format(jsonTimeLayout)))
	}
	switch ev.Type {
	case TypeMeasReport:
		w.Event = ev.Meas
		w.Serving = toWireCell(ev.Serving)
		w.Neighbor = toWireCell(ev.Neighbor)
	case TypeHOCommand:
		w.Kind = ev.Kind
		w.Source = toWireCell(ev.Source)
		w.Target = toWireCell(ev.Target)
		w.Conditional = ev.Conditional
	case TypeHOComplete:
		w.Cell = toWireCell(ev.Cell)
	case TypeHOFailure:
		w.Cause = ev.Cause
	case TypeRBAlloc:
		w.Cell = toWireCell(ev.Cell)
		us := ev.SlotDuration.Microseconds()
		w.SlotUS = &us
		w.Slots = make([][]int64, len(ev.Slots))
		for i, s := range ev.Slots {
			w.Slots[i] = []int64{int64(s.Given), int64(s.Total)}
		}
	case TypeCHOConfig:
		w.Serving = toWireCell(ev.Serving)
		for _, c := range ev.Candidates {
			if wc := toWireCell(c); wc != nil {
				w.Candidates = append(w.Candidates, *wc)
			}
		}
	case TypeNetwork:
		w.PLMN = ev.PLMN
		w.Cell = toWireCell(ev.Cell)
	case TypeRRCRelease:
		w.Cell = toWireCell(ev.Cell)
		if !ev.Redirect.IsZero() {
			arfcn := int64(ev.Redirect.ARFCN)
			w.Redirect = &wireCarrier{RAT: ev.Redirect.RAT, ARFCN: &arfcn}
		}
	default:
		return nil, fmt.Errorf("marshal diag event: unknown type %q", ev.Type)
	}
	out, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("marshal diag event: %w", err)
	}
	return out, nil
}

func toWireCell(c Cell) *wireCell {
	if c.IsZero() {
		return nil
	}
	c = c.Normalized()
	pci, arfcn := int64(c.PCI), int64(c.ARFCN)
	return &wireCell{RAT: c.RAT, Band: c.Band, PCI: &pci, ARFCN: &arfcn}
}
