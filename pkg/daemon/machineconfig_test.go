package daemon

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/m2ho/m2ho/pkg/config"
)

// TestMachineConfigAblations: each --ablate component switches off its
// own part of the state machine and nothing else.
func TestMachineConfigAblations(t *testing.T) {
	tests := []struct {
		ablate                                        []config.Component
		prediction, suppression, bandwidthClamp, ramp bool
	}{
		{nil, true, true, true, true},
		{[]config.Component{config.ComponentPrediction}, false, true, true, true},
		{[]config.Component{config.ComponentSuppression}, true, false, true, true},
		{[]config.Component{config.ComponentBandwidthClamp}, true, true, false, true},
		{[]config.Component{config.ComponentRamp}, true, true, true, false},
	}
	for _, tt := range tests {
		c := machineConfig(config.Config{Policy: config.PolicyM2HO, Ablate: tt.ablate})
		assert.Equal(t, tt.prediction, c.Prediction, "prediction, ablate %v", tt.ablate)
		assert.Equal(t, tt.suppression, c.Suppression, "suppression, ablate %v", tt.ablate)
		assert.Equal(t, tt.bandwidthClamp, c.BandwidthClamp, "bandwidth clamp, ablate %v", tt.ablate)
		assert.Equal(t, tt.ramp, c.Ramp, "ramp, ablate %v", tt.ablate)
	}
}
