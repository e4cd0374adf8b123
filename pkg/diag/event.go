// Package diag defines the modem diagnostic event model shared by every
// input (JSON, Qualcomm DIAG, GSMTAP) and every consumer (state machine,
// estimator, tools), and the version-1 JSON encoding of DESIGN.md.
package diag

import (
	"fmt"
	"strings"
	"time"
)

// RAT is the radio access technology of a cell.
type RAT string

// Radio access technologies.
const (
	RATLTE RAT = "lte"
	RATNR  RAT = "nr"
)

// Band is the frequency range class of a cell.
type Band string

// Band classes. The split at FR2 is what matters to M2HO: mmWave cells
// have an order of magnitude more capacity than sub-6 GHz ones.
const (
	BandSub6   Band = "sub6"
	BandMmWave Band = "mmwave"
)

// FR2MinNRARFCN is the first NR-ARFCN of frequency range 2 (24.25 GHz,
// 3GPP TS 38.104 table 5.4.2.1-1).
const FR2MinNRARFCN = 2016667

// BandOf derives the band class of a cell from its RAT and carrier.
func BandOf(rat RAT, arfcn uint32) Band {
	if rat == RATNR && arfcn >= FR2MinNRARFCN {
		return BandMmWave
	}
	return BandSub6
}

// Cell identifies a cell. Its key is RAT + ARFCN + PCI.
type Cell struct {
	RAT   RAT    `json:"rat"`
	Band  Band   `json:"band,omitempty"`
	PCI   uint16 `json:"pci"`
	ARFCN uint32 `json:"arfcn"`
}

// Carrier is a radio carrier: a RAT and the ARFCN of its downlink
// (EARFCN for LTE, the NR-ARFCN of the SSB for NR, as a Cell's).
type Carrier struct {
	RAT   RAT    `json:"rat"`
	ARFCN uint32 `json:"arfcn"`
}

// IsZero reports whether the carrier is unset.
func (c Carrier) IsZero() bool { return c == Carrier{} }

// Carrier returns the carrier the cell is on.
func (c Cell) Carrier() Carrier { return Carrier{RAT: c.RAT, ARFCN: c.ARFCN} }

// CellKey is the identity of a cell, usable as a map key.
type CellKey struct {
	RAT   RAT
	ARFCN uint32
	PCI   uint16
}

// Key returns the identity of the cell.
func (c Cell) Key() CellKey { return CellKey{RAT: c.RAT, ARFCN: c.ARFCN, PCI: c.PCI} }

// IsZero reports whether the cell is unset.
func (c Cell) IsZero() bool { return c == Cell{} }

// Normalized fills the band from the carrier when it is absent.
func (c Cell) Normalized() Cell {
	if c.Band == "" && c.RAT != "" {
		c.Band = BandOf(c.RAT, c.ARFCN)
	}
	return c
}

// String renders a cell as rat/band/arfcn/pci for logs and labels.
func (c Cell) String() string {
	return fmt.Sprintf("%s/%s/%d/%d", c.RAT, c.Band, c.ARFCN, c.PCI)
}

// Type is the kind of a diag event.
type Type string

// Event types of the JSON v1 contract.
const (
	TypeMeasReport Type = "meas_report"
	TypeHOCommand  Type = "ho_command"
	TypeHOComplete Type = "ho_complete"
	TypeHOFailure  Type = "ho_failure"
	TypeRBAlloc    Type = "rb_alloc"
	// TypeCHOConfig: the conditional handover configurations (Rel-16
	// CHO) the UE stores changed. The network prepared the candidate
	// cells and the UE hands over by itself, without a further command,
	// once a candidate's execution condition holds: the configuration is
	// the command, known ahead of the handover.
	TypeCHOConfig Type = "cho_config"
	// TypeNetwork: the mobile network (PLMN) the modem is in, from the
	// serving cell's system information or the network it registered
	// with at connection setup. Sent when it changes.
	TypeNetwork Type = "network"
	// TypeRRCRelease: the network released the RRC connection (TS 36.331
	// and 38.331 5.3.8), or suspended it (an NR RRCRelease with
	// suspendConfig, RRC_INACTIVE). The UE left RRC_CONNECTED: its radio
	// bearers are released or suspended, every procedure under way ends
	// with them, and no data flows until it connects (or resumes) again.
	// The release may redirect the UE to a carrier.
	TypeRRCRelease Type = "rrc_release"
)

// Types returns every event type of the JSON v1 contract.
func Types() []Type {
	return []Type{TypeMeasReport, TypeHOCommand, TypeHOComplete, TypeHOFailure, TypeRBAlloc, TypeCHOConfig, TypeNetwork, TypeRRCRelease}
}

// MeasEvent is the 3GPP measurement event that triggered a report.
type MeasEvent string

// Measurement events (TS 36.331 / 38.331 section 5.5.4).
const (
	EventA1 MeasEvent = "A1"
	EventA2 MeasEvent = "A2"
	EventA3 MeasEvent = "A3"
	EventA4 MeasEvent = "A4"
	EventA5 MeasEvent = "A5"
	EventA6 MeasEvent = "A6"
	EventB1 MeasEvent = "B1"
	EventB2 MeasEvent = "B2"
)

// Known reports whether e is one of the measurement events above.
func (e MeasEvent) Known() bool {
	switch e {
	case EventA1, EventA2, EventA3, EventA4, EventA5, EventA6, EventB1, EventB2:
		return true
	}
	return false
}

// HOKind is the mobility procedure a handover command starts.
type HOKind string

// Handover kinds: a primary cell handover and the three EN-DC secondary
// cell group procedures.
const (
	HOPCell      HOKind = "pcell"
	HOSCGAdd     HOKind = "scg_add"
	HOSCGRelease HOKind = "scg_release"
	HOSCGChange  HOKind = "scg_change"
)

// FailureCause is why a connection was interrupted outside a normal handover.
type FailureCause string

// Failure causes (the HSR study's disconnection taxonomy).
const (
	CauseRLF             FailureCause = "rlf"
	CauseHOF             FailureCause = "hof"
	CauseReestablishment FailureCause = "reestablishment"
	CauseNASRecovery     FailureCause = "nas_recovery"
)

// Slot is one scheduling slot: resource blocks given to this UE and
// resource blocks in the carrier.
type Slot struct {
	Given uint16
	Total uint16
}

// Event is one diagnostic event. Which fields are set depends on Type:
//   - meas_report: Meas, Serving, Neighbor (either cell may be zero: unknown)
//   - ho_command:  Kind, Source (may be zero), Target, Conditional
//   - ho_complete: Cell (may be zero when the log does not say)
//   - ho_failure:  Cause
//   - rb_alloc:    Cell, SlotDuration, Slots
//   - cho_config:  Serving (may be zero), Candidates (empty: none left)
//   - network:     PLMN, Cell (may be zero)
//   - rrc_release: Cell (may be zero), Redirect (zero: none)
type Event struct {
	Type Type
	// Time is the modem's timestamp, or the receive time when the input
	// does not carry one for every message (live GSMTAP).
	Time time.Time

	Meas     MeasEvent
	Serving  Cell
	Neighbor Cell

	Kind   HOKind
	Source Cell
	Target Cell
	// Conditional: the UE executed a conditional handover configuration
	// it stored (cho_config) towards Target; the command came with the
	// configuration, and the handover completes with this event's
	// ho_complete.
	Conditional bool

	// Candidates are the target cells of the conditional handover
	// configurations in force, in the order of their identities.
	Candidates []Cell

	Cell Cell

	Cause FailureCause

	// PLMN is the network of a network event, "MCC-MNC" (ParsePLMN).
	PLMN string

	// Redirect is the carrier an rrc_release sends the UE to
	// (redirectedCarrierInfo), zero when it names none of LTE or NR.
	Redirect Carrier

	SlotDuration time.Duration
	Slots        []Slot
}

// PLMN identity limits (TS 23.003 2.2, 2.3): a mobile country code of
// three decimal digits and a mobile network code of two or three. A
// two-digit and a three-digit code are different networks ("01" is not
// "001"), so the digits are kept as given.
const (
	mccDigits    = 3
	minMNCDigits = 2
	maxMNCDigits = 3
)

// FormatPLMN writes a PLMN identity as "MCC-MNC" ("460-00", "310-410"),
// the form of the JSON "plmn" field and of the network m2hod keys what
// it learns by. It returns "" when the digits are not a PLMN identity.
func FormatPLMN(mcc, mnc []int) string {
	if len(mcc) != mccDigits || len(mnc) < minMNCDigits || len(mnc) > maxMNCDigits {
		return ""
	}
	b := make([]byte, 0, mccDigits+1+maxMNCDigits)
	for i, digits := range [][]int{mcc, mnc} {
		if i == 1 {
			b = append(b, '-')
		}
		for _, d := range digits {
			if d < 0 || d > 9 {
				return ""
			}
			b = append(b, byte('0'+d))
		}
	}
	return string(b)
}

// ValidPLMN reports whether s is a PLMN identity as FormatPLMN writes it.
func ValidPLMN(s string) bool {
	mcc, mnc, ok := strings.Cut(s, "-")
	if !ok || len(mcc) != mccDigits || len(mnc) < minMNCDigits || len(mnc) > maxMNCDigits {
		return false
	}
	for _, c := range mcc + mnc {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
