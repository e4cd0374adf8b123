//go:build bench

package datapath

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/handshakes"
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
		var perCPU []m2hoCpuState
		for range b.N {
			for range m2hoCounterIdCNT_MAX {
				require.NoError(b, d.objs.CpuStateMap.Lookup(&onlyEntry, &perCPU))
			}
		}
	})
}

// BenchmarkEvictIdle reports the cost of evicting every flow of a table
// (maps sized for 65,536), per evicted flow (ns/flow, timed around
// EvictIdle alone; ns/op includes refilling the table, and stopping the
// benchmark timer instead costs more than a small eviction): "closed"
// flows leave nothing behind, "open" ones (idle, not closed) leave their
// handshake in handshake_hints, all in one batch update; the difference
// is what keeping them costs.
func BenchmarkEvictIdle(b *testing.B) {
	nstest.RequireRoot(b)
	for _, live := range []int{1024, 65535} {
		for _, kind := range []string{"closed", "open"} {
			b.Run(fmt.Sprintf("%s/flows=%d", kind, live), func(b *testing.B) {
				d := loadDetached(b, true, DefaultMaxFlows)
				keys, states := syntheticFlows(live)
				if kind == "closed" {
					for i := range states {
						states[i].Flags |= uint32(m2hoFlowFlagsFLOW_CLOSED)
					}
				}
				var evicting time.Duration
				for range b.N {
					insertFlows(b, d, keys, states)
					start := time.Now()
					evicted, err := d.EvictIdle(0, 0)
					evicting += time.Since(start)
					require.NoError(b, err)
					require.Equal(b, live, evicted)
				}
				b.ReportMetric(float64(evicting.Nanoseconds())/float64(b.N*live), "ns/flow")
			})
		}
	}
}

// BenchmarkAdoptHandshakes stores 131,072 handshakes, both sides of each of
// 65,536 conntrack entries of a busy CPE router, in a store of the default
// size, through the batches that Open's scan also feeds.
func BenchmarkAdoptHandshakes(b *testing.B) {
	nstest.RequireRoot(b)
	d := loadDetached(b, true, DefaultMaxFlows)
	const entries = 65536
	hs := make([]handshakes.Handshake, 0, 2*entries)
	for i := range entries {
		lan := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)}), 5000)
		wan := netip.AddrPortFrom(netip.AddrFrom4([4]byte{100, 64, 0, 2}), uint16(10000+i%50000))
		peer := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 443)
		hs = append(hs, handshakes.Handshake{Local: wan, Remote: peer, WScale: 8, Source: handshakes.FromConntrack},
			handshakes.Handshake{Local: peer, Remote: lan, WScale: 7, Source: handshakes.FromConntrack})
	}
	b.ReportAllocs()
	for b.Loop() {
		stored, err := adoptAll(d, hs)
		require.NoError(b, err)
		require.Equal(b, len(hs), stored)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(hs)), "ns/handshake")
}

// BenchmarkAdoptOpenConnections reports what the adoption at attach costs
// on a router whose conntrack table holds 65,536 NATted downloads: the
// kernel's dump, reading it, and storing the handshakes. "link_side"
// stores only the side of each entry whose ACKs leave the modem interface,
// as Open does; "every_side" stores both, as if no interface were
// told apart. "useful_kept" is how many downloads find their handshake in
// the store afterwards.
func BenchmarkAdoptOpenConnections(b *testing.B) {
	r := newBusyRouter(b, DefaultMaxFlows)
	d := loadDetached(b, false, DefaultMaxFlows)
	ifindex := ifindexIn(b, r.ue, "veth0")
	scanners := map[string]*handshakes.Scanner{}
	require.NoError(b, r.ue.Do(func() error {
		onLink, err := linkSideOf(ifindex)
		if err != nil {
			return err
		}
		for name, filter := range map[string]func(handshakes.Ends) bool{"every_side": nil, "link_side": onLink} {
			if scanners[name], err = handshakes.NewScanner(filter); err != nil {
				return err
			}
			b.Cleanup(scanners[name].Close)
		}
		return nil
	}))
	for _, name := range []string{"every_side", "link_side"} {
		b.Run(name, func(b *testing.B) {
			var stored int
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				if keys := allHintKeys(b, d); len(keys) > 0 {
					_, err := d.objs.HandshakeHints.BatchDelete(keys, nil)
					require.NoError(b, err)
				}
				b.StartTimer()
				a := d.adoptScan(scanners[name], nil)
				require.NoError(b, a.scanErr)
				require.NoError(b, a.storeErr)
				stored = a.stored
			}
			b.StopTimer()
			kept := 0
			var hint m2hoHandshakeHint
			for _, ends := range r.linkSide {
				key := flowKeyOf(ends.Local, ends.Remote)
				if d.objs.HandshakeHints.Lookup(&key, &hint) == nil {
					kept++
				}
			}
			b.ReportMetric(float64(stored), "stored")
			b.ReportMetric(float64(kept), "useful_kept")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(r.linkSide)), "ns/entry")
		})
	}
}

// allHintKeys lists the keys in the handshake store.
func allHintKeys(tb testing.TB, d *Datapath) []m2hoFlowKey {
	tb.Helper()
	var (
		keys []m2hoFlowKey
		key  m2hoFlowKey
		hint m2hoHandshakeHint
	)
	iter := d.objs.HandshakeHints.Iterate()
	for iter.Next(&key, &hint) {
		keys = append(keys, key)
	}
	require.NoError(tb, iter.Err())
	return keys
}
