package rrc

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

// The conditional handover vectors (nr_reconf_cho_*, lte_reconf_cho in
// testdata/crafted.txt) are encoded by tools/rrc-oracle/make_vectors.py
// with pycrate 0.8.1 from the Rel-18 ASN.1 of TS 38.331 and TS 36.331 it
// compiles: ConditionalReconfiguration-r16 in RRCReconfiguration-v1610-IEs
// (38.331 6.2.2, 6.3.2; the fourth nonCriticalExtension of
// RRCReconfiguration-IEs) and in RRCConnectionReconfiguration-v1610-IEs
// (36.331 6.2.2, 6.3.4; the tenth of rrcConnectionReconfiguration-r8),
// each candidate a complete (NR)RRC(Connection)Reconfiguration in its
// OCTET STRING. TestOracle checks the native decoding of each against
// pycrate's when the oracle's virtualenv is there.

// TestSummarizeConditional decodes the conditional configurations of the
// vectors: candidates with the target of their stored reconfiguration,
// removals.
func TestSummarizeConditional(t *testing.T) {
	lteHO := vectorByName(t, "lte_reconf_ho")
	stored, err := Summarize(lteHO.RAT, lteHO.Channel, lteHO.PDU)
	require.NoError(t, err)
	require.NotNil(t, stored.Sync)
	tests := []struct {
		vector string
		want   *CondReconfig
	}{
		{"nr_reconf_cho_two", &CondReconfig{Added: []CondCandidate{
			{ID: 1, Target: &SyncTarget{PCI: 401, HasPCI: true, Carrier: 632628}},
			{ID: 2, Target: &SyncTarget{PCI: 402, HasPCI: true, Carrier: 632628}}}}},
		{"nr_reconf_cho_remove_one", &CondReconfig{Removed: []int{1}}},
		{"lte_reconf_cho", &CondReconfig{Added: []CondCandidate{{ID: 1, Target: stored.Sync}}}},
		{"nr_dl_reconf_pcell_mmwave", nil},
		{"lte_reconf_ho", nil},
	}
	for _, tt := range tests {
		t.Run(tt.vector, func(t *testing.T) {
			msg := vectorByName(t, tt.vector)
			s, err := Summarize(msg.RAT, msg.Channel, msg.PDU)
			require.NoError(t, err)
			assert.Equal(t, tt.want, s.Conditional)
		})
	}
}

// choStep is one vector (or summary) from a cell, and the events it must
// yield.
type choStep struct {
	vector  string
	summary *Summary
	// from is the cell the transport names; zero: it names none.
	from diag.Cell
	want []diag.Event
}

// TestConditionalHandover follows conditional handovers through the
// decoder: the configuration is a cho_config naming the candidates, the
// UE's complete towards a candidate is the command and its execution,
// and removals, releases and network-ordered handovers end them.
func TestConditionalHandover(t *testing.T) {
	nrServing, cand1, cand2 := nrCell(433, 640704), nrCell(401, 632628), nrCell(402, 632628)
	lteHO := vectorByName(t, "lte_reconf_ho")
	stored, err := Summarize(lteHO.RAT, lteHO.Channel, lteHO.PDU)
	require.NoError(t, err)
	lteServing := lteCell(10, 1300)
	lteCand := syncCell(diag.RATLTE, stored.Sync, lteServing)
	config := func(serving diag.Cell, cands ...diag.Cell) diag.Event {
		return diag.Event{Type: diag.TypeCHOConfig, Serving: serving, Candidates: cands}
	}
	execution := func(source, target diag.Cell) []diag.Event {
		return []diag.Event{
			{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: source, Target: target, Conditional: true},
			{Type: diag.TypeHOComplete, Cell: target}}
	}
	nrComplete := "nr_rrc_reconfiguration_complete"
	tests := []struct {
		name  string
		steps []choStep
	}{
		{"NR: configured, one removed, executed towards the other", []choStep{
			{vector: "nr_reconf_cho_two", from: nrServing, want: []diag.Event{config(nrServing, cand1, cand2)}},
			{vector: nrComplete, from: nrServing},
			{vector: "nr_reconf_cho_remove_one", from: nrServing, want: []diag.Event{config(nrServing, cand2)}},
			{vector: nrComplete, from: nrServing},
			{vector: nrComplete, from: cand2, want: execution(nrServing, cand2)},
			{vector: nrComplete, from: cand2},
		}},
		{"NR: a complete naming no cell executes the only candidate, unless a reconfiguration awaited it", []choStep{
			{vector: "nr_reconf_cho_two", from: nrServing, want: []diag.Event{config(nrServing, cand1, cand2)}},
			{vector: "nr_reconf_cho_remove_one", from: nrServing, want: []diag.Event{config(nrServing, cand2)}},
			{vector: nrComplete},
			{vector: nrComplete, want: execution(nrServing, cand2)},
		}},
		{"NR: a complete from a cell that is no candidate executes nothing", []choStep{
			{vector: "nr_reconf_cho_two", from: nrServing, want: []diag.Event{config(nrServing, cand1, cand2)}},
			{vector: nrComplete, from: nrCell(403, 632628)},
		}},
		{"NR: a handover the network orders releases the candidates", []choStep{
			{vector: "nr_reconf_cho_two", from: nrServing, want: []diag.Event{config(nrServing, cand1, cand2)}},
			{vector: "nr_dl_reconf_pcell_mmwave", from: nrServing, want: []diag.Event{
				{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: nrServing, Target: nrCell(77, 2079167)}}},
			{vector: nrComplete, from: nrCell(77, 2079167), want: []diag.Event{{Type: diag.TypeHOComplete, Cell: nrCell(77, 2079167)}}},
			{vector: nrComplete, from: cand1},
		}},
		{"NR: a release ends them", []choStep{
			{vector: "nr_reconf_cho_two", from: nrServing, want: []diag.Event{config(nrServing, cand1, cand2)}},
			{summary: &Summary{Message: "rrcRelease"}, from: nrServing, want: []diag.Event{config(nrServing),
				{Type: diag.TypeRRCRelease, Cell: nrServing}}},
			{vector: nrComplete, from: cand1},
		}},
		{"LTE: the stored handover command executes", []choStep{
			{vector: "lte_reconf_cho", from: lteServing, want: []diag.Event{config(lteServing, lteCand)}},
			{vector: "lte_reconf_complete", from: lteServing},
			{vector: "lte_reconf_complete", from: lteCand, want: execution(lteServing, lteCand)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { decodeSteps(t, tt.steps) })
	}
}

// decodeSteps feeds the steps to a fresh decoder, 10 ms apart, and
// checks the events of each.
func decodeSteps(t *testing.T, steps []choStep) {
	t.Helper()
	d := NewDecoder(slog.New(slog.DiscardHandler))
	for i, st := range steps {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		var events []diag.Event
		var err error
		if st.summary != nil {
			msg := diag.RRCMessage{Time: at, RAT: st.from.RAT, Channel: diag.ChannelDLDCCH, PCI: st.from.PCI, ARFCN: st.from.ARFCN}
			s := *st.summary
			events, err = d.handle(msg, &s)
		} else {
			msg := vectorByName(t, st.vector)
			msg.Time, msg.PCI, msg.ARFCN = at, st.from.PCI, st.from.ARFCN
			events, err = d.Decode(msg)
		}
		require.NoError(t, err, "step %d", i)
		for j := range st.want {
			st.want[j].Time = at
		}
		assert.Equal(t, st.want, events, "step %d (%s)", i, st.vector)
	}
}
