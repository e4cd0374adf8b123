package daemon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/m2ho/m2ho/pkg/diag"
)

func TestEventTime(t *testing.T) {
	received := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	slots := make([]diag.Slot, 80)
	tests := []struct {
		name string
		ev   diag.Event
		want time.Time
	}{
		{
			name: "rb_alloc starts its slots before receipt",
			ev:   diag.Event{Type: diag.TypeRBAlloc, SlotDuration: 500 * time.Microsecond, Slots: slots[:20]},
			want: received.Add(-10 * time.Millisecond),
		},
		{
			name: "mmWave slots",
			ev:   diag.Event{Type: diag.TypeRBAlloc, SlotDuration: 125 * time.Microsecond, Slots: slots[:80]},
			want: received.Add(-10 * time.Millisecond),
		},
		{
			name: "rb_alloc without slot duration is left for the estimator to reject",
			ev:   diag.Event{Type: diag.TypeRBAlloc, Slots: slots},
			want: received,
		},
		{
			name: "other events happen at receipt, whatever they carry",
			ev:   diag.Event{Type: diag.TypeMeasReport, Time: received.Add(-time.Hour), SlotDuration: time.Millisecond, Slots: slots},
			want: received,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, eventTime(tc.ev, received))
		})
	}
}
