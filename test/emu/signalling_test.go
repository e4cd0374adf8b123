package emu

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/scenario"
)

// TestSignallingTruth: without traffic, the link still records every
// procedure of the timeline at its times and the signalling that
// announces them, the measurement reports that lead nowhere included.
func TestSignallingTruth(t *testing.T) {
	sc := handoverScenario(&scenario.ContextRelease{HeldPackets: 4}, 0)
	sc.Timeline = append(sc.Timeline,
		scenario.Event{At: 900 * ms, Type: scenario.TypeReport, Reports: []scenario.Report{{Event: diag.EventA2}, {After: 300 * ms, Event: diag.EventA1}}},
		scenario.Event{At: 1500 * ms, Type: scenario.TypeRLF, Target: "a", Interruption: 100 * ms})
	raw, err := sc.Marshal()
	require.NoError(t, err)
	sc, err = scenario.Parse(raw)
	require.NoError(t, err)
	epoch := time.Unix(1_700_000_000, 0)

	truth, err := SignallingTruth(sc, epoch)
	require.NoError(t, err)
	require.Len(t, truth.Handovers, 2)
	ho := truth.Handovers[0]
	assert.Equal(t, ProcedureHandover, ho.Procedure)
	assert.Equal(t, "sub6_sub6", ho.Class)
	assert.Equal(t, []time.Duration{320 * ms, 470 * ms, 500 * ms, 527 * ms}, []time.Duration{ho.MeasAt, ho.CommandAt, ho.ExecAt, ho.CompleteAt})
	assert.True(t, ho.Reordered, "the context release happened, with nothing to hold")
	assert.Empty(t, ho.Held)
	assert.Equal(t, ProcedureRLF, truth.Handovers[1].Procedure)
	assert.Equal(t, 1500*ms, truth.Handovers[1].ExecAt)

	var types []diag.Type
	for _, raw := range truth.Signalling {
		ev, err := diag.ParseJSON(raw)
		require.NoError(t, err)
		assert.False(t, ev.Time.Before(epoch))
		types = append(types, ev.Type)
	}
	assert.Equal(t, []diag.Type{
		diag.TypeMeasReport, diag.TypeHOCommand, diag.TypeHOComplete, // the handover
		diag.TypeMeasReport, diag.TypeMeasReport, // A2, A1
		diag.TypeHOFailure, // the radio link failure, and the re-establishment:
		diag.TypeHOComplete,
	}, types)
	assert.Equal(t, epoch, truth.Start)
	assert.Zero(t, truth.Totals.DeliveredPackets)
}

// TestSignallingTruthIsARunsSignalling: the signalling and handovers of a
// scenario run without traffic are those of a real run of it. The
// testdata are a scenario of the evaluation on m2hod ae0a3ad
// (docs/results/eval-ae0a3ad, driving seed 2, 13 procedures, 45 diag
// events) and the ground truth its scaled CUBIC + m2ho run recorded, its
// duplicate ACKs and held packets left out.
func TestSignallingTruthIsARunsSignalling(t *testing.T) {
	sc, err := scenario.Load("testdata/generated-driving-seed2.yaml")
	require.NoError(t, err)
	run, err := ReadGroundTruth("testdata/generated-driving-seed2-truth.json.gz")
	require.NoError(t, err)

	truth, err := SignallingTruth(sc, run.Start)
	require.NoError(t, err)
	require.Len(t, truth.Handovers, len(run.Handovers))
	for i, h := range truth.Handovers {
		want := run.Handovers[i]
		assert.Equal(t, []any{want.Procedure, want.Class, want.MeasEvent, want.MeasAt, want.CommandAt, want.ExecAt, want.CompleteAt},
			[]any{h.Procedure, h.Class, h.MeasEvent, h.MeasAt, h.CommandAt, h.ExecAt, h.CompleteAt}, "procedure %d", i)
	}
	require.Len(t, truth.Signalling, len(run.Signalling))
	for i := range truth.Signalling {
		got, err := diag.ParseJSON(truth.Signalling[i])
		require.NoError(t, err)
		want, err := diag.ParseJSON(run.Signalling[i])
		require.NoError(t, err)
		assert.Equal(t, want, got, "event %d", i)
	}
}

// TestUnreportedHandover: a handover no report announces sends its
// command and completion only, and begins at its command.
func TestUnreportedHandover(t *testing.T) {
	sc := handoverScenario(nil, 0)
	sc.Timeline[0].MeasEvent, sc.Timeline[0].MeasLead, sc.Timeline[0].Unreported = "", 0, true
	raw, err := sc.Marshal()
	require.NoError(t, err)
	sc, err = scenario.Parse(raw)
	require.NoError(t, err)
	truth, err := SignallingTruth(sc, time.Unix(1_700_000_000, 0))
	require.NoError(t, err)
	require.Len(t, truth.Handovers, 1)
	ho := truth.Handovers[0]
	assert.Empty(t, ho.MeasEvent)
	assert.Equal(t, 470*ms, ho.MeasAt)
	assert.Equal(t, ho.CommandAt, ho.MeasAt)
	var types []diag.Type
	for _, raw := range truth.Signalling {
		ev, err := diag.ParseJSON(raw)
		require.NoError(t, err)
		types = append(types, ev.Type)
	}
	assert.Equal(t, []diag.Type{diag.TypeHOCommand, diag.TypeHOComplete}, types)

	sc.Timeline[0].MeasEvent = diag.EventA3
	assert.ErrorContains(t, sc.Validate(), "unreported")
}
