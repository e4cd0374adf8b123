package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/datapath"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// openIdle opens a daemon on a fake datapath without running it, so that
// a test can call the loop's handlers itself.
func openIdle(t *testing.T) *Daemon {
	t.Helper()
	d, err := open(testConfig(t), nil, opener{
		datapath: func(datapath.Options) (datapathAPI, error) { return newFakeDatapath(), nil },
		source:   func(string, diagsrc.Options) (diag.Source, error) { return &chanSource{}, nil },
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, d.Close()) })
	return d
}

// TestRBAllocSizesSlotBursts: an rb_alloc event reaches the estimator
// with its first slot placed receipt minus its slots before receipt, on
// the clock of the byte samples. The byte counter below grows by 90 kB
// during the event's burst period, 20 to 9.5 ms before receipt, and is
// flat afterwards, so the cell's estimate is about 90 kB only if the
// slots are placed there (placed at receipt, they would count nothing).
func TestRBAllocSizesSlotBursts(t *testing.T) {
	d := openIdle(t)
	full, partial, empty := diag.Slot{Given: 100, Total: 106}, diag.Slot{Given: 20, Total: 106}, diag.Slot{Total: 106}
	slots := make([]diag.Slot, 40) // 20 ms of 0.5 ms slots
	for i := range 20 {
		slots[i] = full
	}
	slots[20] = partial
	for i := 21; i < len(slots); i++ {
		slots[i] = empty
	}
	before := time.Now()
	d.handleEvent(diag.Event{Type: diag.TypeRBAlloc, Cell: cellA, SlotDuration: 500 * time.Microsecond, Slots: slots})
	after := time.Now()
	// Each millisecond between the two costs the estimate 9 kB.
	require.Less(t, after.Sub(before), 2*time.Millisecond, "receipt known to within the margin")

	ms := func(t time.Time, n float64) time.Time { return t.Add(time.Duration(n * float64(time.Millisecond))) }
	d.est.AddBytes(ms(before, -40), 0)
	d.est.AddBytes(ms(before, -20), 0)
	d.est.AddBytes(ms(before, -10), 90_000)
	d.est.AddBytes(ms(after, 20), 90_000)

	var got uint64
	for _, c := range d.est.Cells() {
		if c.Cell == cellA {
			got = c.BufferBytes
		}
	}
	assert.InDelta(t, 90_000, float64(got), 20_000, "cell A's estimate from the slot burst")
}

// TestTickInterval: the loop ticks at pollInterval whenever a timer can
// be due or a policy needs renewing, and only idles in Stable with
// nothing in force.
func TestTickInterval(t *testing.T) {
	tests := []struct {
		name  string
		setup func(d *Daemon)
		state statemachine.State
		want  time.Duration
	}{
		{name: "stable, nothing in force", state: statemachine.Stable, want: idleInterval},
		{
			name:  "stable with a clamp in force",
			setup: func(d *Daemon) { require.NoError(t, d.act.SetClamp(100_000, time.Now().Add(time.Minute))) },
			state: statemachine.Stable, want: pollInterval,
		},
		{
			name:  "stable with a clamp past its deadline",
			setup: func(d *Daemon) { require.NoError(t, d.act.SetClamp(100_000, time.Now().Add(-time.Second))) },
			state: statemachine.Stable, want: idleInterval,
		},
		{
			name:  "preparation",
			setup: func(d *Daemon) { d.handleEvent(a3(cellA, cellB)) },
			state: statemachine.Preparation, want: pollInterval,
		},
		{
			name: "smoothing",
			setup: func(d *Daemon) {
				d.handleEvent(a3(cellA, cellB))
				d.handleEvent(diag.Event{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: cellA, Target: cellB})
				d.handleEvent(diag.Event{Type: diag.TypeHOComplete, Cell: cellB})
			},
			state: statemachine.Smoothing, want: pollInterval,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := openIdle(t)
			if tc.setup != nil {
				tc.setup(d)
			}
			require.Equal(t, tc.state, d.machine.State())
			assert.Equal(t, tc.want, d.tickInterval(time.Now()))
		})
	}
}

// TestLoopAsksForFineSamples: the loop asks the sampler for byte samples
// every pollInterval while a handover is under way (Eq. 2 needs them),
// and lets it slow down otherwise, slot allocations included (they get a
// sample each, see TestSlotAllocationTakesASample).
func TestLoopAsksForFineSamples(t *testing.T) {
	h := startHarness(t, testConfig(t))
	fast := func() bool { return h.d.sampleFast.Load() }
	steps := []struct {
		name string
		ev   diag.Event
		want bool
	}{
		{"a prediction", a3(cellA, cellB), true},
		{"its cancellation, nothing in force", diag.Event{Type: diag.TypeMeasReport, Meas: diag.EventA1, Serving: cellA}, false},
		{"a slot allocation", diag.Event{Type: diag.TypeRBAlloc, Cell: cellA, SlotDuration: 500 * time.Microsecond,
			Slots: []diag.Slot{{Given: 10, Total: 106}}}, false},
	}
	for _, step := range steps {
		h.src.events <- step.ev
		if step.want {
			assert.Eventually(t, fast, time.Second, time.Millisecond, step.name)
		} else {
			assert.Eventually(t, func() bool { return !fast() }, time.Second, time.Millisecond, step.name)
		}
	}
}

// TestSlotAllocationTakesASample: each slot allocation has the sampler
// read the byte counter at once, on a link so quiet that its own pace is a
// second, so that the estimator can size the event's slot bursts.
func TestSlotAllocationTakesASample(t *testing.T) {
	dp := &countingDatapath{fakeDatapath: newFakeDatapath()}
	src := &chanSource{events: make(chan diag.Event)}
	d, err := open(testConfig(t), nil, opener{
		datapath: func(datapath.Options) (datapathAPI, error) { return dp, nil },
		source:   func(string, diagsrc.Options) (diag.Source, error) { return src, nil },
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	// the link is silent: the sampler settles at quietInterval
	time.Sleep(quietAfter + 2*idleInterval)
	for i := range 5 {
		before := dp.reads.Load()
		src.events <- diag.Event{Type: diag.TypeRBAlloc, Cell: cellA, SlotDuration: 500 * time.Microsecond,
			Slots: []diag.Slot{{Given: 106, Total: 106}}}
		require.Eventually(t, func() bool { return dp.reads.Load() > before }, quietInterval/4, time.Millisecond,
			"slot allocation %d sampled", i)
		assert.False(t, d.sampleFast.Load(), "no fine pace for it")
	}
}
