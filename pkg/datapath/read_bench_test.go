package datapath

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/nstest"
)

// liveFlowCounts are the flow table fills the read benchmarks run at: a
// quiet host, a busy one and a full table.
var liveFlowCounts = []int{16, 1024, 65535}

// BenchmarkFlows reports the cost of one snapshot of the flow table with
// the maps sized for 65,536 flows. "iterate" is the per-entry
// next-key/lookup walk over the flow index and the table, kept as the
// reference the batched read is measured against.
func BenchmarkFlows(b *testing.B) {
	nstest.RequireRoot(b)
	for _, live := range liveFlowCounts {
		d := loadDetached(b, true, DefaultMaxFlows)
		fillFlows(b, d, live)
		b.Run(fmt.Sprintf("batch/flows=%d", live), func(b *testing.B) {
			for range b.N {
				flows, err := d.Flows()
				require.NoError(b, err)
				require.Len(b, flows, live)
			}
		})
		b.Run(fmt.Sprintf("iterate/flows=%d", live), func(b *testing.B) {
			var (
				key   m2hoFlowKey
				slot  uint32
				entry m2hoFlowEntry
			)
			for range b.N {
				n := 0
				iter := d.objs.FlowIndex.Iterate()
				for iter.Next(&key, &slot) {
					if d.table.live(slot, &key, &entry) {
						n++
					}
				}
				require.NoError(b, iter.Err())
				require.Equal(b, live, n)
			}
		})
		require.NoError(b, d.Close())
	}
}

// BenchmarkCounters reports the cost of reading every counter. "single"
// is Counters, one lookup of the per-CPU value holding them all;
// "per_counter" repeats that lookup once per counter, the system call
// count of a map with one entry per counter, as the reference.
func BenchmarkCounters(b *testing.B) {
	nstest.RequireRoot(b)
	d := loadDetached(b, true, DefaultMaxFlows)
	b.Cleanup(func() { _ = d.Close() })
	b.Run("single", func(b *testing.B) {
		for range b.N {
			_, err := d.Counters()
			require.NoError(b, err)
		}
	})
	b.Run("per_counter", func(b *testing.B) {
		var perCPU []m2hoCounterValues
		for range b.N {
			for range m2hoCounterIdCNT_MAX {
				require.NoError(b, d.objs.Counters.Lookup(&onlyEntry, &perCPU))
			}
		}
	})
}
