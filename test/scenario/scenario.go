// Package scenario is the testbed's scenario format: the cells a UE moves
// through, the timeline of handovers, radio link failures and measurement
// reports, and the traffic to run. docs/testbed.md documents the YAML.
package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/m2ho/m2ho/pkg/diag"
)

// Slot durations of the numerologies the testbed emulates: 30 kHz
// subcarriers in sub-6 GHz, 120 kHz in mmWave.
const (
	SlotSub6   = 500 * time.Microsecond
	SlotMmWave = 125 * time.Microsecond
)

// Resource blocks of the emulated carriers: 40 MHz at 30 kHz (106 RBs, as
// in the paper's sub-6 cells) and 100 MHz at 120 kHz (66 RBs).
const (
	CarrierRBsSub6   = 106
	CarrierRBsMmWave = 66
)

// PacketBytes is the largest IP packet the emulated link carries (the
// MTU): a buffer smaller than this, after scaling, holds nothing.
const PacketBytes = 1500

// ScaledBytes is a buffer size as the emulator applies it: multiplied by
// the scenario's scale factor and rounded to a byte.
func ScaledBytes(bytes int, scale float64) int {
	return int(math.Round(float64(bytes) * scale))
}

// Event types of a timeline.
const (
	TypeHandover = "handover"
	TypeRLF      = "rlf"
	TypeReport   = "report"
)

// Receivers of the traffic.
const (
	ReceiverUE  = "ue"
	ReceiverLAN = "lan"
)

// Scenario is one emulated drive or walk.
type Scenario struct {
	Name        string        `yaml:"name"`
	Description string        `yaml:"description,omitempty"`
	Duration    time.Duration `yaml:"duration"`
	// Scale multiplies every capacity and buffer size, so that a machine
	// that cannot move full 5G rates still sees the same bandwidth-delay
	// ratios. Delays are not scaled. Zero means 1.
	Scale       float64 `yaml:"scale,omitempty"`
	Cells       []Cell  `yaml:"cells"`
	InitialCell string  `yaml:"initial_cell"`
	Timeline    []Event `yaml:"timeline"`
	Traffic     Traffic `yaml:"traffic"`

	// Dir is where relative trace paths are resolved from (the scenario
	// file's directory).
	Dir string `yaml:"-"`
}

// Cell is one emulated cell.
type Cell struct {
	Name     string       `yaml:"name"`
	RAT      diag.RAT     `yaml:"rat"`
	Band     diag.Band    `yaml:"band,omitempty"`
	PCI      uint16       `yaml:"pci"`
	ARFCN    uint32       `yaml:"arfcn"`
	Capacity CapacitySpec `yaml:"capacity"`
	// BufferBytes is the droptail buffer the cell keeps for this UE.
	BufferBytes int `yaml:"buffer_bytes"`
	// DelayDown and DelayUp are the one-way delays server to UE and back.
	DelayDown time.Duration `yaml:"delay_down"`
	DelayUp   time.Duration `yaml:"delay_up"`
	// Slot overrides the band's slot duration.
	Slot time.Duration `yaml:"slot,omitempty"`
	// CarrierRBs overrides the band's resource blocks per slot.
	CarrierRBs int `yaml:"carrier_rbs,omitempty"`
	// BackgroundShare is the fraction of each slot other UEs take.
	BackgroundShare float64 `yaml:"background_share,omitempty"`
}

// CapacitySpec selects exactly one capacity source.
type CapacitySpec struct {
	ConstantMbps float64 `yaml:"constant_mbps,omitempty"`
	Steps        []Step  `yaml:"steps,omitempty"`
	// Mahimahi and Lumos5G are trace file paths, relative to the scenario.
	Mahimahi string `yaml:"mahimahi,omitempty"`
	Lumos5G  string `yaml:"lumos5g,omitempty"`
	// Origin says where a profile was cut from (a generated cell's trace
	// and seconds); it changes nothing.
	Origin string `yaml:"origin,omitempty"`
}

// Step is one stretch of a synthetic capacity profile (the profile loops).
type Step struct {
	Duration time.Duration `yaml:"duration"`
	Mbps     float64       `yaml:"mbps"`
}

// Event is one timeline entry. At is the handover's execution (the start
// of the interruption), the failure's time, or a report's time.
type Event struct {
	At   time.Duration `yaml:"at"`
	Type string        `yaml:"type"`

	// Handover fields.
	Kind   diag.HOKind `yaml:"kind,omitempty"`
	Source string      `yaml:"source,omitempty"`
	Target string      `yaml:"target,omitempty"`
	// MeasEvent is the measurement report that precedes the command by
	// MeasLead (before execution).
	MeasEvent diag.MeasEvent `yaml:"meas_event,omitempty"`
	MeasLead  time.Duration  `yaml:"meas_lead,omitempty"`
	// Unreported: no measurement report precedes the command (no
	// MeasEvent; MeasLead is the command's), as before the handovers
	// Algorithm 1 missed in the paper's measurements: from mmWave, the UE
	// falls back to sub-6 after failed transmissions (section 6.3.1).
	Unreported bool `yaml:"unreported,omitempty"`
	// CommandLead is the time from the handover command to execution.
	// Left out or 0, either lead takes its default (DefaultMeasLead,
	// DefaultCommandLead): a command at the instant of execution is no
	// timing a network produces.
	CommandLead time.Duration `yaml:"command_lead,omitempty"`
	// Interruption is how long nothing is delivered (for rlf: the time to
	// re-establish).
	Interruption time.Duration `yaml:"interruption,omitempty"`
	// ContextRelease, when set, makes the UE release its link-layer
	// context with the source on the handover command: the first
	// HeldPackets the source has come later through the target (or
	// never, with Discard), the packets after them at once (out of
	// order).
	ContextRelease *ContextRelease `yaml:"context_release,omitempty"`
	// TargetBufferBytes, when set, is the buffer the target cell grants
	// while the handover completes (a small one overflows).
	TargetBufferBytes int `yaml:"target_buffer_bytes,omitempty"`

	// Report fields: a sequence of measurement reports that lead to no
	// handover (A2 then A1, an A3 the network ignores).
	Reports []Report `yaml:"reports,omitempty"`
}

// ContextRelease describes an out-of-order release of the source buffer.
type ContextRelease struct {
	HeldPackets int `yaml:"held_packets"`
	// Discard loses the held packets at the source instead of forwarding
	// them to the target. The paper says both: its finding 2 (section
	// 3.3), whose traces never show the missing packets, has the source
	// discard them; its section 4.4 has the target retransmit them.
	Discard bool `yaml:"discard,omitempty"`
}

// Report is one measurement report of a report event, After the event's At.
type Report struct {
	After    time.Duration  `yaml:"after"`
	Event    diag.MeasEvent `yaml:"event"`
	Neighbor string         `yaml:"neighbor,omitempty"`
}

// Traffic is what the testbed sends through the emulated link.
type Traffic struct {
	// Receiver is "ue" (the modem host itself) or "lan" (a client behind
	// it, forwarded traffic).
	Receiver string `yaml:"receiver,omitempty"`
	// Flows is the number of parallel bulk TCP flows (default 1).
	Flows int `yaml:"flows,omitempty"`
}

// Load reads, completes and validates a scenario file.
func Load(path string) (*Scenario, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading scenario: %w", err)
	}
	sc, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	sc.Dir = filepath.Dir(path)
	return sc, nil
}

// Parse decodes, completes and validates a scenario.
func Parse(raw []byte) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var sc Scenario
	if err := dec.Decode(&sc); err != nil {
		return nil, fmt.Errorf("decoding yaml: %w", err)
	}
	sc.applyDefaults()
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	return &sc, nil
}

// Marshal encodes the scenario as YAML.
func (s *Scenario) Marshal() ([]byte, error) {
	out, err := yaml.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encoding scenario: %w", err)
	}
	return out, nil
}

// Default timings of a handover when a scenario leaves them out, from the
// paper's measurements (data/handover-timing.md).
const (
	DefaultMeasLead     = 179 * time.Millisecond
	DefaultCommandLead  = 33 * time.Millisecond
	DefaultInterruption = 27 * time.Millisecond
	DefaultRLFRecovery  = 138 * time.Millisecond
)

func (s *Scenario) applyDefaults() {
	if s.Scale == 0 {
		s.Scale = 1
	}
	if s.Traffic.Receiver == "" {
		s.Traffic.Receiver = ReceiverUE
	}
	if s.Traffic.Flows == 0 {
		s.Traffic.Flows = 1
	}
	for i := range s.Cells {
		c := &s.Cells[i]
		if c.Band == "" {
			c.Band = diag.BandOf(c.RAT, c.ARFCN)
		}
		if c.Slot == 0 {
			c.Slot = SlotSub6
			if c.Band == diag.BandMmWave {
				c.Slot = SlotMmWave
			}
		}
		if c.CarrierRBs == 0 {
			c.CarrierRBs = CarrierRBsSub6
			if c.Band == diag.BandMmWave {
				c.CarrierRBs = CarrierRBsMmWave
			}
		}
	}
	for i := range s.Timeline {
		e := &s.Timeline[i]
		switch e.Type {
		case TypeHandover:
			if e.Kind == "" {
				e.Kind = diag.HOPCell
			}
			if e.CommandLead == 0 {
				e.CommandLead = DefaultCommandLead
			}
			switch {
			case e.Unreported:
				e.MeasLead = e.CommandLead
			case e.MeasLead == 0:
				e.MeasLead = DefaultMeasLead
			}
			if e.Interruption == 0 {
				e.Interruption = DefaultInterruption
			}
			if e.MeasEvent == "" && !e.Unreported {
				e.MeasEvent = diag.EventA3
			}
		case TypeRLF:
			if e.Interruption == 0 {
				e.Interruption = DefaultRLFRecovery
			}
		}
	}
}

// Cell returns the cell with the given name.
func (s *Scenario) Cell(name string) (Cell, bool) {
	for _, c := range s.Cells {
		if c.Name == name {
			return c, true
		}
	}
	return Cell{}, false
}

var measEvents = map[diag.MeasEvent]bool{
	diag.EventA1: true, diag.EventA2: true, diag.EventA3: true, diag.EventA4: true,
	diag.EventA5: true, diag.EventA6: true, diag.EventB1: true, diag.EventB2: true,
}

var hoKinds = map[diag.HOKind]bool{
	diag.HOPCell: true, diag.HOSCGAdd: true, diag.HOSCGRelease: true, diag.HOSCGChange: true,
}

// Validate checks the scenario for consistency: known cells, a timeline in
// order whose handovers start from the cell then serving, no overlap of
// one event's procedure with the next.
func (s *Scenario) Validate() error {
	if s.Duration <= 0 {
		return errors.New("duration must be positive")
	}
	if s.Scale <= 0 || s.Scale > 1 {
		return fmt.Errorf("scale %v must be in (0, 1]", s.Scale)
	}
	if len(s.Cells) == 0 {
		return errors.New("no cells")
	}
	names := map[string]bool{}
	for i, c := range s.Cells {
		if err := c.validate(s.Scale); err != nil {
			return fmt.Errorf("cell %d (%s): %w", i, c.Name, err)
		}
		if names[c.Name] {
			return fmt.Errorf("cell name %q used twice", c.Name)
		}
		names[c.Name] = true
	}
	if !names[s.InitialCell] {
		return fmt.Errorf("initial_cell %q is not a cell", s.InitialCell)
	}
	if s.Traffic.Receiver != ReceiverUE && s.Traffic.Receiver != ReceiverLAN {
		return fmt.Errorf("traffic.receiver %q is not ue or lan", s.Traffic.Receiver)
	}
	if s.Traffic.Flows < 1 || s.Traffic.Flows > 64 {
		return fmt.Errorf("traffic.flows %d is not in 1..64", s.Traffic.Flows)
	}
	if !sort.SliceIsSorted(s.Timeline, func(i, j int) bool { return s.Timeline[i].At < s.Timeline[j].At }) {
		return errors.New("timeline is not in time order")
	}
	serving := s.InitialCell
	var busyUntil time.Duration
	for i, e := range s.Timeline {
		begin, end, err := e.span()
		if err != nil {
			return fmt.Errorf("timeline %d (%s at %v): %w", i, e.Type, e.At, err)
		}
		if begin < 0 || end > s.Duration {
			return fmt.Errorf("timeline %d (%s at %v) does not fit in [0, %v]", i, e.Type, e.At, s.Duration)
		}
		if begin < busyUntil {
			return fmt.Errorf("timeline %d (%s at %v) starts at %v, before the previous event ends at %v", i, e.Type, e.At, begin, busyUntil)
		}
		busyUntil = end
		switch e.Type {
		case TypeHandover:
			if e.Source != serving {
				return fmt.Errorf("timeline %d: handover from %q but %q is serving", i, e.Source, serving)
			}
			if !names[e.Target] || e.Target == e.Source {
				return fmt.Errorf("timeline %d: target %q is not another cell", i, e.Target)
			}
			// The emulator applies the scaled size: below one packet, the
			// target would drop everything during the handover.
			if e.TargetBufferBytes > 0 {
				if err := checkBuffer("target_buffer_bytes", e.TargetBufferBytes, s.Scale); err != nil {
					return fmt.Errorf("timeline %d: %w", i, err)
				}
			}
			serving = e.Target
		case TypeRLF:
			if e.Target == "" {
				// Re-establishment on the cell that failed.
				s.Timeline[i].Target = serving
				e.Target = serving
			}
			if !names[e.Target] {
				return fmt.Errorf("timeline %d: target %q is not a cell", i, e.Target)
			}
			serving = e.Target
		case TypeReport:
			for _, r := range e.Reports {
				if r.Neighbor != "" && !names[r.Neighbor] {
					return fmt.Errorf("timeline %d: neighbor %q is not a cell", i, r.Neighbor)
				}
			}
		}
	}
	return nil
}

// span is the time the event's procedure occupies.
func (e *Event) span() (begin, end time.Duration, err error) {
	switch e.Type {
	case TypeHandover:
		if !hoKinds[e.Kind] {
			return 0, 0, fmt.Errorf("kind %q is not pcell, scg_add, scg_release or scg_change", e.Kind)
		}
		switch {
		case e.Unreported && e.MeasEvent != "":
			return 0, 0, fmt.Errorf("an unreported handover has no meas_event (%q)", e.MeasEvent)
		case !e.Unreported && !measEvents[e.MeasEvent]:
			return 0, 0, fmt.Errorf("meas_event %q is not a 3GPP event", e.MeasEvent)
		}
		if e.MeasLead < e.CommandLead || e.CommandLead < 0 || e.Interruption <= 0 {
			return 0, 0, errors.New("need meas_lead >= command_lead >= 0 and a positive interruption")
		}
		if e.ContextRelease != nil && e.ContextRelease.HeldPackets < 1 {
			return 0, 0, errors.New("context_release.held_packets must be at least 1")
		}
		if e.TargetBufferBytes < 0 {
			return 0, 0, errors.New("target_buffer_bytes is negative")
		}
		return e.At - e.MeasLead, e.At + e.Interruption, nil
	case TypeRLF:
		if e.Interruption <= 0 {
			return 0, 0, errors.New("interruption must be positive")
		}
		return e.At, e.At + e.Interruption, nil
	case TypeReport:
		if len(e.Reports) == 0 {
			return 0, 0, errors.New("a report event needs reports")
		}
		var last time.Duration
		for _, r := range e.Reports {
			if !measEvents[r.Event] {
				return 0, 0, fmt.Errorf("report event %q is not a 3GPP event", r.Event)
			}
			if r.After < last {
				return 0, 0, errors.New("reports are not in time order")
			}
			last = r.After
		}
		return e.At, e.At + last, nil
	default:
		return 0, 0, fmt.Errorf("type %q is not handover, rlf or report", e.Type)
	}
}

// checkBuffer rejects a buffer that holds no packet once scaled as the
// emulator scales it.
func checkBuffer(field string, bytes int, scale float64) error {
	scaled := ScaledBytes(bytes, scale)
	if scaled >= PacketBytes {
		return nil
	}
	if scale == 1 {
		return fmt.Errorf("%s %d is smaller than one packet (%d bytes)", field, bytes, PacketBytes)
	}
	return fmt.Errorf("%s %d at scale %v is %d bytes, smaller than one packet (%d bytes)", field, bytes, scale, scaled, PacketBytes)
}

func (c *Cell) validate(scale float64) error {
	if c.Name == "" {
		return errors.New("no name")
	}
	if c.RAT != diag.RATLTE && c.RAT != diag.RATNR {
		return fmt.Errorf("rat %q is not lte or nr", c.RAT)
	}
	if c.Band != diag.BandSub6 && c.Band != diag.BandMmWave {
		return fmt.Errorf("band %q is not sub6 or mmwave", c.Band)
	}
	sources := 0
	if c.Capacity.ConstantMbps > 0 {
		sources++
	}
	if len(c.Capacity.Steps) > 0 {
		sources++
	}
	if c.Capacity.Mahimahi != "" {
		sources++
	}
	if c.Capacity.Lumos5G != "" {
		sources++
	}
	if sources != 1 {
		return fmt.Errorf("capacity needs exactly one of constant_mbps, steps, mahimahi, lumos5g (has %d)", sources)
	}
	if err := checkBuffer("buffer_bytes", c.BufferBytes, scale); err != nil {
		return err
	}
	if c.DelayDown < 0 || c.DelayUp < 0 {
		return errors.New("negative delay")
	}
	if c.Slot < 10*time.Microsecond || c.CarrierRBs < 1 {
		return errors.New("slot must be at least 10us and carrier_rbs at least 1")
	}
	if c.BackgroundShare < 0 || c.BackgroundShare >= 1 {
		return fmt.Errorf("background_share %v is not in [0, 1)", c.BackgroundShare)
	}
	return nil
}

// DiagCell is the cell as the diag events name it.
func (c Cell) DiagCell() diag.Cell {
	return diag.Cell{RAT: c.RAT, Band: c.Band, PCI: c.PCI, ARFCN: c.ARFCN}
}

// ResolvePath resolves a trace path of the scenario.
func (s *Scenario) ResolvePath(p string) string {
	if filepath.IsAbs(p) || s.Dir == "" {
		return p
	}
	return filepath.Join(s.Dir, p)
}
