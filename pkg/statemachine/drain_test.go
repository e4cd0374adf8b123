package statemachine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
)

// train is a datapath packet train of bytes over [startMs, endMs].
func train(startMs, endMs int, bytes uint64) step {
	return func(h *harness) {
		h.m.OnBurstEnd(estimator.Burst{Start: at(startMs), End: at(endMs), Bytes: bytes, Packets: bytes/1500 + 1})
	}
}

func pending(ms int) step { return func(h *harness) { h.m.OnFlowsPending(at(ms)) } }

// Slot shares of a 106-RB sub-6 carrier.
var (
	fullSlot    = diag.Slot{Given: 100, Total: 106}
	busySlot    = diag.Slot{Given: 60, Total: 106}
	partialSlot = diag.Slot{Given: 20, Total: 106}
	emptySlot   = diag.Slot{Given: 0, Total: 106}
)

// slotsOf is an rb_alloc event of cell whose first 0.5 ms slot starts at
// ms.
func slotsOf(ms int, cell diag.Cell, slots ...diag.Slot) step {
	return func(h *harness) {
		h.m.HandleEvent(diag.Event{Type: diag.TypeRBAlloc, Time: at(ms), Cell: cell, SlotDuration: 500 * time.Microsecond, Slots: slots})
	}
}

// TestSmoothingEndsOnTheTargetCellsDrain: Smoothing ends with the first
// burst period of the target cell after execution (paper section 4.4),
// which is a packet train of real size or slots that start with one of
// more than 90% of the RBs; no burst ends it while the datapath reports
// flows still waiting for forwarded data. handoverSteps executes at 130.
func TestSmoothingEndsOnTheTargetCellsDrain(t *testing.T) {
	const drainBytes = 16 << 10
	burstEnd := "smoothing>stable:burst_end"
	ignored := func(reason string, want uint64) func(t *testing.T, h *harness) {
		return func(t *testing.T, h *harness) {
			assert.Equal(t, want, h.m.Status().Counters.Ignored[reason], reason)
		}
	}
	cases := []machineCase{
		// Trains: the datapath reports every one, down to a lone packet.
		{
			name:        "a lone 52-byte packet does not end Smoothing",
			steps:       append(handoverSteps(), train(135, 135, 52), tick(140)),
			state:       Smoothing,
			transitions: []string{predicted, executed},
			check:       ignored("burst_too_small", 1),
		},
		{
			name:        "a train just short of the drain size does not",
			steps:       append(handoverSteps(), train(135, 140, drainBytes-1), tick(145)),
			state:       Smoothing,
			transitions: []string{predicted, executed},
		},
		{
			name:        "a train of the drain size does",
			steps:       append(handoverSteps(), train(135, 140, drainBytes)),
			state:       Stable,
			transitions: []string{predicted, executed, burstEnd},
		},
		{
			name:        "a train cut by the interruption carries the source cell's data",
			steps:       append(handoverSteps(), train(100, 125, 500_000), tick(140)),
			state:       Smoothing,
			transitions: []string{predicted, executed},
		},
		{
			name:        "while flows wait, their release decides",
			steps:       append(handoverSteps(), pending(135), train(135, 140, 500_000), tick(145), released(160)),
			state:       Stable,
			transitions: []string{predicted, executed, releasedFlows},
			check:       ignored("burst_flows_pending", 1),
		},
		{
			name:        "while flows wait, SmoothingMax decides",
			steps:       append(handoverSteps(), pending(135), train(135, 140, 500_000), tick(279), tick(280)),
			state:       Stable,
			transitions: []string{predicted, executed, "smoothing>stable:smoothing_max"},
		},
		{
			name: "pending flows of the previous Smoothing do not hold the next",
			steps: append(handoverSteps(), pending(135), tick(280),
				cmd(300, diag.HOPCell, lteB, lteA), done(330, lteA), train(335, 340, drainBytes)),
			state:       Stable,
			transitions: []string{predicted, executed, "smoothing>stable:smoothing_max", commanded, executed, burstEnd},
			handovers:   []string{"sub6_sub6", "sub6_sub6"},
		},
		// Slots: rb_alloc shows the burst periods themselves.
		{
			name:        "the target cell's first burst period ends Smoothing",
			steps:       append(handoverSteps(), slotsOf(135, lteB, emptySlot, fullSlot, busySlot, partialSlot, emptySlot)),
			state:       Stable,
			transitions: []string{predicted, executed, burstEnd},
		},
		{
			name:        "a rb_alloc without the cell is the serving cell's",
			steps:       append(handoverSteps(), slotsOf(135, diag.Cell{}, fullSlot, partialSlot, emptySlot)),
			state:       Stable,
			transitions: []string{predicted, executed, burstEnd},
		},
		{
			name:        "a burst period across two consecutive events",
			steps:       append(handoverSteps(), slotsOf(135, lteB, emptySlot, fullSlot), slotsOf(136, lteB, partialSlot, emptySlot)),
			state:       Stable,
			transitions: []string{predicted, executed, burstEnd},
		},
		{
			name:        "slots without a fully allocated one are no burst period",
			steps:       append(handoverSteps(), slotsOf(135, lteB, busySlot, partialSlot, emptySlot), tick(140)),
			state:       Smoothing,
			transitions: []string{predicted, executed},
		},
		{
			name:        "a burst period still under way does not",
			steps:       append(handoverSteps(), slotsOf(135, lteB, fullSlot, fullSlot, partialSlot), tick(140)),
			state:       Smoothing,
			transitions: []string{predicted, executed},
		},
		{
			name:        "lost slot logs break a burst period",
			steps:       append(handoverSteps(), slotsOf(135, lteB, fullSlot), slotsOf(140, lteB, partialSlot, emptySlot)),
			state:       Smoothing,
			transitions: []string{predicted, executed},
		},
		{
			name:        "the source cell's slots say nothing of the target's buffer",
			steps:       append(handoverSteps(), slotsOf(135, lteA, fullSlot, partialSlot, emptySlot)),
			state:       Smoothing,
			transitions: []string{predicted, executed},
		},
		{
			name:        "a burst period that ended before execution",
			steps:       append(handoverSteps(), slotsOf(125, lteB, fullSlot, partialSlot, emptySlot), tick(135)),
			state:       Smoothing,
			transitions: []string{predicted, executed},
		},
		{
			name:        "while flows wait, a burst period does not end Smoothing either",
			steps:       append(handoverSteps(), pending(134), slotsOf(135, lteB, fullSlot, partialSlot, emptySlot)),
			state:       Smoothing,
			transitions: []string{predicted, executed},
			check:       ignored("burst_flows_pending", 1),
		},
	}
	// Every case runs handoverSteps: one confirmed prediction, one
	// handover between sub-6 cells.
	for i := range cases {
		cases[i].predictions = []string{OutcomeConfirmed}
		if cases[i].handovers == nil {
			cases[i].handovers = []string{"sub6_sub6"}
		}
	}
	runMachineCases(t, cases)
}

func TestDrainBurstBytesMustBePositive(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DrainBurstBytes = 0
	assert.ErrorContains(t, cfg.Validate(), "drain burst bytes")
}
