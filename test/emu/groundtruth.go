package emu

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/m2ho/m2ho/internal/jsonfile"
	"github.com/m2ho/m2ho/pkg/diag"
)

// GroundTruth is what the emulator did in one run: every handover and
// failure with its times and packet fates, the measurement reports that led
// to nothing, and the duplicate ACKs the UE sent with their cause. Times are
// offsets from Start.
type GroundTruth struct {
	Scenario  string           `json:"scenario"`
	Scale     float64          `json:"scale"`
	Start     time.Time        `json:"start"`
	Handovers []HandoverRecord `json:"handovers"`
	Reports   []ReportRecord   `json:"reports"`
	DupAcks   []DupAck         `json:"dupacks"`
	// DupAcksNotRecorded counts duplicate ACKs beyond MaxDupAcksRecorded.
	DupAcksNotRecorded int `json:"dupacks_not_recorded"`
	// GeneratedDupAcks are the duplicate ACKs the UE's TCP stack sent
	// before anything on the UE could drop them (receiverModel); At is
	// when the UE sent each.
	GeneratedDupAcks            []DupAck `json:"generated_dupacks"`
	GeneratedDupAcksNotRecorded int      `json:"generated_dupacks_not_recorded"`
	// GeneratedFrom says where GeneratedDupAcks come from: the
	// receiver model, or the receiver's own ACKs read on the LAN side
	// of the UE (exact).
	GeneratedFrom string `json:"generated_from"`
	// Signalling is every diag event the modem reported except resource
	// block allocations, in the diag JSON format: what a handover
	// predictor sees.
	Signalling []json.RawMessage `json:"signalling"`
	Totals     Totals            `json:"totals"`
}

// Sources of the generated duplicate ACKs.
const (
	GeneratedFromModel  = "receiver_model"
	GeneratedFromLANTap = "lan_tap"
)

// MaxDupAcksRecorded bounds the ground truth's duplicate ACK list.
const MaxDupAcksRecorded = 200000

// Procedure types of a HandoverRecord.
const (
	ProcedureHandover = "handover"
	ProcedureRLF      = "rlf"
)

// HandoverRecord is one handover or radio link failure.
type HandoverRecord struct {
	Index     int         `json:"index"`
	Procedure string      `json:"procedure"`
	Kind      diag.HOKind `json:"kind,omitempty"`
	// Class is sub6_sub6, sub6_mmwave, mmwave_mmwave or mmwave_sub6.
	Class  string `json:"class"`
	Source string `json:"source"`
	Target string `json:"target"`
	// MeasEvent is empty for a handover no report announced; its MeasAt
	// is then its CommandAt.
	MeasEvent diag.MeasEvent `json:"meas_event,omitempty"`
	// MeasAt and CommandAt are zero for a radio link failure.
	MeasAt    time.Duration `json:"meas_ns,omitempty"`
	CommandAt time.Duration `json:"command_ns,omitempty"`
	// ExecAt starts the interruption, CompleteAt ends it.
	ExecAt     time.Duration `json:"exec_ns"`
	CompleteAt time.Duration `json:"complete_ns"`

	// Reordered is set when the UE's context release on the handover
	// command delivered the source buffer out of order: Released packets
	// at once, Held later through the target, or never when the source
	// discarded them (then they are also counted in Discarded).
	Reordered bool         `json:"reordered"`
	Released  int          `json:"released_packets"`
	Held      []HeldPacket `json:"held,omitempty"`
	// Forwarded packets moved from the source buffer to the target's.
	Forwarded int `json:"forwarded_packets"`
	// OverflowDrops are packets the target buffer had no room for while
	// the handover completed.
	OverflowDrops int `json:"overflow_drops"`
	// DropsAfter are buffer drops in the PostHandoverWindow after
	// completion.
	DropsAfter int `json:"drops_after"`
	// Discarded packets were lost at the source: what its buffer held
	// when the link failed, or the held packets of a context release
	// whose source discards them.
	Discarded int `json:"discarded_packets"`
}

// PostHandoverWindow is how long after a handover buffer drops are still
// attributed to it.
const PostHandoverWindow = 2 * time.Second

// HeldPacket is a TCP segment a context release held back.
type HeldPacket struct {
	Flow FlowKey `json:"-"`
	Seq  uint32  `json:"seq"`
	Len  int     `json:"len"`
	// DeliveredAt is zero while (or if never) delivered.
	DeliveredAt time.Duration `json:"delivered_ns"`
	// Dropped is set when it never reaches the UE, because the source
	// discarded it or the target cell's buffer had no room for it: then
	// it is a loss like any other.
	Dropped bool `json:"dropped,omitempty"`
}

// ReportRecord is a measurement report that did not lead to a handover.
type ReportRecord struct {
	At       time.Duration  `json:"at_ns"`
	Event    diag.MeasEvent `json:"event"`
	Serving  string         `json:"serving"`
	Neighbor string         `json:"neighbor,omitempty"`
}

// Causes of duplicate ACKs.
const (
	DupAckReorder = "reorder" // a context release's out-of-order delivery
	DupAckLoss    = "loss"    // a packet the emulator dropped or discarded
)

// DupAck is one duplicate ACK the UE sent, as seen on the uplink (At is
// when the emulator read it) or as the UE generated it.
type DupAck struct {
	At    time.Duration `json:"at_ns"`
	Ack   uint32        `json:"ack"`
	Cause string        `json:"cause"`
	// Handover is the index of the handover whose held packets caused it,
	// or -1.
	Handover int `json:"handover"`
}

// Totals counts packets over the whole run.
type Totals struct {
	DownlinkPackets  uint64 `json:"downlink_packets"`
	DeliveredPackets uint64 `json:"delivered_packets"`
	DeliveredBytes   uint64 `json:"delivered_bytes"`
	BufferDrops      uint64 `json:"buffer_drops"`
	UplinkPackets    uint64 `json:"uplink_packets"`
	PassedNonIP      uint64 `json:"passed_non_ip"`
	DiagEvents       uint64 `json:"diag_events"`
	DiagSendErrors   uint64 `json:"diag_send_errors"`
}

// WriteFile stores the ground truth as indented JSON, gzipped when the
// name ends in ".gz".
func (g *GroundTruth) WriteFile(path string) error {
	if err := jsonfile.Write(path, g); err != nil {
		return fmt.Errorf("ground truth: %w", err)
	}
	return nil
}

// ReadGroundTruth loads a ground truth file.
func ReadGroundTruth(path string) (*GroundTruth, error) {
	var g GroundTruth
	if err := jsonfile.Read(path, &g); err != nil {
		return nil, fmt.Errorf("ground truth: %w", err)
	}
	return &g, nil
}
