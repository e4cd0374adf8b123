package estimator

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

// mapFleet answers from a map and records what is published.
type mapFleet struct {
	buffers   map[diag.CellKey]uint64
	lookups   []diag.Cell
	published []CellRecord
}

func (f *mapFleet) Lookup(c diag.Cell) (uint64, bool) {
	f.lookups = append(f.lookups, c)
	b, ok := f.buffers[c.Key()]
	return b, ok
}

func (f *mapFleet) Publish(r CellRecord, _ float64) { f.published = append(f.published, r) }

func TestTargetBufferFleet(t *testing.T) {
	cfg := DefaultConfig()
	tests := []struct {
		name       string
		local      map[diag.Cell]uint64
		fleet      map[diag.Cell]uint64
		target     diag.Cell
		wantBytes  uint64
		wantSource string
	}{
		{name: "fleet answers for a cell not measured here",
			fleet: map[diag.Cell]uint64{lteB: 700_000}, target: lteB, wantBytes: 700_000, wantSource: SourceFleet},
		{name: "local measurement wins over the fleet",
			local: map[diag.Cell]uint64{lteB: 300_000}, fleet: map[diag.Cell]uint64{lteB: 900_000},
			target: lteB, wantBytes: 300_000, wantSource: SourceCell},
		{name: "fleet wins over the band minimum",
			local: map[diag.Cell]uint64{lteA: 200_000}, fleet: map[diag.Cell]uint64{lteB: 900_000},
			target: lteB, wantBytes: 900_000, wantSource: SourceFleet},
		{name: "fleet capped at the sub-6 ceiling",
			fleet: map[diag.Cell]uint64{nrA: 500 << 20}, target: nrA, wantBytes: cfg.FleetMaxBufferBytes, wantSource: SourceFleet},
		{name: "fleet raised to the floor",
			fleet: map[diag.Cell]uint64{nrA: 1000}, target: nrA, wantBytes: cfg.MinClampBytes, wantSource: SourceFleet},
		{name: "a mmWave target never takes a fleet entry",
			fleet: map[diag.Cell]uint64{mmA: 9 << 20}, target: mmA, wantBytes: cfg.DefaultBufferBytes, wantSource: SourceDefault},
		{name: "fleet miss falls back to the default",
			fleet: map[diag.Cell]uint64{lteA: 500_000}, target: lteB, wantBytes: cfg.DefaultBufferBytes, wantSource: SourceDefault},
		{name: "a band-only target is not a cell to look up",
			fleet: map[diag.Cell]uint64{lteA: 500_000}, target: diag.Cell{Band: diag.BandSub6},
			wantBytes: cfg.DefaultBufferBytes, wantSource: SourceDefault},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var records []CellRecord
			for c, b := range tt.local {
				records = append(records, CellRecord{Cell: c, BufferBytes: b, Bursts: 1, Updated: t0})
			}
			e, err := New(cfg, &memStore{records: records}, nil)
			require.NoError(t, err)
			f := &mapFleet{buffers: map[diag.CellKey]uint64{}}
			for c, b := range tt.fleet {
				f.buffers[c.Key()] = b
			}
			e.UseFleet(f)
			bytes, source := e.TargetBuffer(tt.target)
			assert.Equal(t, tt.wantBytes, bytes)
			assert.Equal(t, tt.wantSource, source)
		})
	}
}

func TestFleetGetsEveryChangedRecord(t *testing.T) {
	e := newEstimator(t, nil)
	f := &mapFleet{}
	e.UseFleet(f)
	e.SetServing(lteA, at(0))
	e.AddBurst(Burst{Start: at(10), End: at(30), Bytes: 200_000, Packets: 140})
	e.AddBurst(Burst{Start: at(100), End: at(120), Bytes: 150_000, Packets: 100})
	require.Len(t, f.published, 2)
	assert.Equal(t, uint64(200_000), f.published[1].BufferBytes)
	assert.Equal(t, uint64(2), f.published[1].Bursts)
	assert.Equal(t, lteA.Key(), f.published[1].Cell.Key())
	// A rejected burst changes nothing and publishes nothing.
	e.AddBurst(Burst{Start: at(200), End: at(500), Bytes: 900_000})
	assert.Len(t, f.published, 2)
}

func TestFleetMaximumBelowFloorRejected(t *testing.T) {
	cfg := DefaultConfig()
	cfg.FleetMaxBufferBytes = cfg.MinClampBytes - 1
	_, err := New(cfg, nil, nil)
	assert.ErrorContains(t, err, "fleet maximum")
}
