package testbed

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/daemon"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/scenario"
)

// TestHoldLearnsTheBufferItOverflowed runs CUBIC with m2ho for 30 s on a
// sub-6 cell with a 150 kB buffer whose rate falls from 20 to 4 Mbit/s
// for one second in three. The hold is sized on the peak rate: 20 Mbit/s
// over the 70 ms RTT_min is 175 kB before any buffer is added, more than
// the cell holds at 4 Mbit/s (35 kB in flight plus the buffer), so every
// fall overflows it, whatever the estimate was. At 4 Mbit/s the full
// buffer is 300 ms of queue, which the RTT samples see whole: m2hod takes
// that queue for the buffer, and the cell's estimate ends near its real
// size, under a ceiling.
func TestHoldLearnsTheBufferItOverflowed(t *testing.T) {
	nstest.RequireRoot(t)
	const buffer = 150_000
	sc := &scenario.Scenario{
		Name: "ci-hold", Duration: 30 * time.Second, Scale: 1, InitialCell: "a",
		Cells: []scenario.Cell{{
			Name: "a", RAT: diag.RATNR, PCI: 1, ARFCN: 627264,
			Capacity:    scenario.CapacitySpec{Steps: []scenario.Step{{Duration: 2 * time.Second, Mbps: 20}, {Duration: time.Second, Mbps: 4}}},
			BufferBytes: buffer, DelayDown: 35 * time.Millisecond, DelayUp: 35 * time.Millisecond,
		}},
		// A1 names the serving cell: the hold starts there.
		Timeline: []scenario.Event{{At: time.Second, Type: scenario.TypeReport, Reports: []scenario.Report{{Event: diag.EventA1}}}},
		Traffic:  scenario.Traffic{Receiver: scenario.ReceiverUE},
	}
	out := t.TempDir()
	res := runCubicWithM2ho(t, sc, out)

	rawStatus, err := os.ReadFile(filepath.Join(out, M2hodStatusFile))
	require.NoError(t, err)
	var st struct {
		Cells []daemon.CellStatus `json:"cells"`
	}
	require.NoError(t, json.Unmarshal(rawStatus, &st))
	var cell daemon.CellStatus
	for _, c := range st.Cells {
		if c.Cell.PCI == 1 {
			cell = c
		}
	}
	retransmitted := func(from, to time.Duration) uint32 {
		var first, last uint32
		seen := false
		for _, s := range res.Measurements.TCPInfo {
			if s.At < from || s.At > to {
				continue
			}
			if !seen {
				first, seen = s.Retrans, true
			}
			last = s.Retrans
		}
		return last - first
	}
	t.Logf("cell a: estimate %d bytes, ceiling %d bytes (buffer %d); retransmitted 5-15 s %d, 15-30 s %d",
		cell.BufferBytes, cell.CeilingBytes, buffer, retransmitted(5*time.Second, 15*time.Second), retransmitted(15*time.Second, 30*time.Second))
	assert.NotZero(t, cell.CeilingBytes, "an overflow set the ceiling")
	assert.LessOrEqual(t, cell.BufferBytes, cell.CeilingBytes, "the estimate is under its ceiling")
	assert.InDelta(t, float64(buffer), float64(cell.BufferBytes), buffer*0.2, "the estimate is the cell's buffer, give or take RTT noise")
	assert.LessOrEqual(t, cell.BufferBytes, uint64(buffer*1.1), "and not above it by more than RTT noise")
}

// runCubicWithM2ho completes sc as a scenario file would be, and runs
// the kernel's CUBIC across it with the m2hod of the tree under test,
// writing the run's files to out.
func runCubicWithM2ho(t *testing.T, sc *scenario.Scenario, out string) *Result {
	t.Helper()
	m2hod, err := nstest.BuildM2hod(t.TempDir())
	require.NoError(t, err)
	raw, err := sc.Marshal()
	require.NoError(t, err)
	sc, err = scenario.Parse(raw)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{Scenario: sc, Variant: Variant{CC: "cubic", M2HO: true}, OutDir: out, M2hod: m2hod})
	require.NoError(t, err)
	return res
}
