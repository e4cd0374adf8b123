package report

import "github.com/m2ho/m2ho/test/emu"

// Why a handover was not loss-free (Handover.LossCause), from the
// emulator's ground truth, tested in the order of LossCauses.
const (
	// LossRLF: a radio link failure, which loses what the failed cell
	// held.
	LossRLF = "rlf"
	// LossSourceDiscard: the source discarded the packets its context
	// release held back (a scenario's discard option).
	LossSourceDiscard = "source_discard"
	// LossOverflow: the target's buffer overflowed while the handover
	// completed (the flight and the forwarded data).
	LossOverflow = "overflow"
	// LossAfter: the target's buffer overflowed within
	// emu.PostHandoverWindow of the completion.
	LossAfter = "after"
	// LossReordering: no packet was lost in the handover, and the
	// context release's reordering made the sender retransmit.
	LossReordering = "reordering"
	// LossOther: none of these; the sender retransmitted what a cell
	// dropped outside the handover's buffers (the source's queue before
	// the execution, a fall in a cell's rate) or what a timer judged
	// lost.
	LossOther = "other"
)

// LossCauses returns the causes in the order LossCause tests them.
func LossCauses() []string {
	return []string{LossRLF, LossSourceDiscard, LossOverflow, LossAfter, LossReordering, LossOther}
}

// LossCause says why the handover was not loss-free, "" when it was.
func (h Handover) LossCause() string {
	switch {
	case h.LossFree:
		return ""
	case h.Procedure == emu.ProcedureRLF:
		return LossRLF
	case h.SourceDiscards > 0:
		return LossSourceDiscard
	case h.OverflowDrops > 0:
		return LossOverflow
	case h.DropsAfter > 0:
		return LossAfter
	case h.Reordered:
		return LossReordering
	default:
		return LossOther
	}
}
