package stats

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestLowerMedian(t *testing.T) {
	tests := []struct {
		name   string
		values []time.Duration
		want   time.Duration
	}{
		{name: "one", values: []time.Duration{7}, want: 7},
		{name: "odd count: the middle one", values: []time.Duration{30, 10, 20}, want: 20},
		{name: "even count: the lower of the middle two", values: []time.Duration{40, 10, 30, 20}, want: 20},
		{name: "an outlier does not move it", values: []time.Duration{10, 11, 12, 1000}, want: 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, LowerMedian(tt.values))
		})
	}
}
