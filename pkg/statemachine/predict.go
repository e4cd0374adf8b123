package statemachine

import "github.com/m2ho/m2ho/pkg/diag"

// predictsHandover is Algorithm 1 of the paper (section 4.2). serving and
// measured are the cells of the report, with their bands filled in.
//
//   - A3 between cells of the same type: a horizontal handover (an SCG
//     change when both are NR cells of the secondary group).
//   - On sub-6, B1 (an LTE anchor reporting an NR cell: SCG addition), or
//     A5 towards mmWave: the network moves the UE up to mmWave whenever it
//     can.
//   - On mmWave, A2: the cell is failing and the UE goes down to sub-6 (an
//     SCG release in EN-DC).
//
// A4, B2 and A6 do not predict handovers in the paper's measurements.
//
// A cell of unknown band counts as sub-6 (bandKey): a serving cell is
// unknown until a report or handover names it, which on transports that
// carry no cell (GSMTAP v2) lasts until the first completed handover.
func predictsHandover(ev diag.MeasEvent, serving, measured diag.Cell) bool {
	if ev == diag.EventA3 && !measured.IsZero() && bandKey(serving.Band) == bandKey(measured.Band) {
		return true
	}
	switch bandKey(serving.Band) {
	case diag.BandMmWave:
		return ev == diag.EventA2
	default:
		return ev == diag.EventB1 || (ev == diag.EventA5 && measured.Band == diag.BandMmWave)
	}
}
