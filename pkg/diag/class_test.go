package diag

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHandoverClass(t *testing.T) {
	tests := []struct {
		source, target Band
		want, label    string
	}{
		{BandSub6, BandSub6, ClassSub6Sub6, "sub6-sub6"},
		{BandSub6, BandMmWave, ClassSub6MmWave, "sub6-mmW"},
		{BandMmWave, BandMmWave, ClassMmWaveMmWave, "mmW-mmW"},
		{BandMmWave, BandSub6, ClassMmWaveSub6, "mmW-sub6"},
		{"", BandMmWave, ClassSub6MmWave, "sub6-mmW"},
		{BandMmWave, "", ClassMmWaveSub6, "mmW-sub6"},
		{"", "", ClassSub6Sub6, "sub6-sub6"},
	}
	for _, tt := range tests {
		got := HandoverClass(tt.source, tt.target)
		assert.Equal(t, tt.want, got, "%q -> %q", tt.source, tt.target)
		assert.Equal(t, tt.label, ClassLabel(got))
	}
	assert.Equal(t, []string{"sub6_sub6", "sub6_mmwave", "mmwave_mmwave", "mmwave_sub6"}, HandoverClasses)
	assert.Equal(t, []string{"sub6_sub6", "sub6_mmwave", "mmwave_mmwave", "mmwave_sub6", "overall"}, ClassesWithAll())
	assert.Equal(t, "Overall", ClassLabel(AllClasses))
	assert.Equal(t, "no_handover", ClassLabel("no_handover"), "not a class: as it is")
}
