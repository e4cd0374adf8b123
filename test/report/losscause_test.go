package report

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/emu"
)

func TestLossCauseTakesTheFirstThatApplies(t *testing.T) {
	handover := emu.ProcedureHandover
	for _, tc := range []struct {
		name string
		h    Handover
		want string
	}{
		{"loss-free, whatever the buffers did", Handover{Procedure: handover, LossFree: true, OverflowDrops: 3, Reordered: true}, ""},
		{"a radio link failure before all", Handover{Procedure: emu.ProcedureRLF, OverflowDrops: 3, DropsAfter: 2}, LossRLF},
		{"a source discard before the target's buffer", Handover{Procedure: handover, SourceDiscards: 4, OverflowDrops: 3}, LossSourceDiscard},
		{"the target overflowing during the handover before after it", Handover{Procedure: handover, OverflowDrops: 3, DropsAfter: 2, Reordered: true}, LossOverflow},
		{"the target overflowing after it before the reordering", Handover{Procedure: handover, DropsAfter: 2, Reordered: true}, LossAfter},
		{"reordering alone", Handover{Procedure: handover, Reordered: true}, LossReordering},
		{"nothing the ground truth names", Handover{Procedure: handover}, LossOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.h.LossCause())
		})
	}
}

func TestSummarizeCountsTheLossCauses(t *testing.T) {
	hs := []Handover{
		{Procedure: emu.ProcedureHandover, Class: "sub6_sub6", LossFree: true},
		{Procedure: emu.ProcedureHandover, Class: "sub6_sub6", DropsAfter: 5},
		{Procedure: emu.ProcedureHandover, Class: "mmwave_sub6", OverflowDrops: 7},
		{Procedure: emu.ProcedureHandover, Class: "mmwave_sub6", DropsAfter: 1},
	}
	byClass := map[string]Summary{}
	for _, s := range Summarize("v", hs) {
		byClass[s.Class] = s
	}
	assert.Equal(t, map[string]int{LossAfter: 1}, byClass["sub6_sub6"].LossCauses)
	assert.Equal(t, map[string]int{LossOverflow: 1, LossAfter: 1}, byClass["mmwave_sub6"].LossCauses)
	all := byClass[diag.AllClasses]
	assert.Equal(t, map[string]int{LossOverflow: 1, LossAfter: 2}, all.LossCauses)
	assert.Equal(t, 1, all.LossFree)
}
