package datapath

import (
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/tcptest"
)

// TestIngressBytes checks that the ingress byte counter adds the IP length
// of every downlink packet, whatever its protocol, without the link header
// (a packet that is not IP counts whole), and that uplink packets do not
// count.
func TestIngressBytes(t *testing.T) {
	for _, f := range framings {
		t.Run(f.name, func(t *testing.T) {
			d := datapathFor(t, f)
			s := freshPorts(segment{ipv6: f.ipv6, ethernet: f.ethernet, vlans: f.vlans})
			l3 := s.l3Offset()
			toUDP := func(b []byte) []byte {
				if f.ipv6 {
					b[l3+6] = 17 // next header
				} else {
					b[l3+9] = 17 // protocol
				}
				return b
			}
			toNotIP := func(b []byte) []byte {
				if f.ethernet {
					b[l3-2], b[l3-1] = 0x08, 0x06 // ARP EtherType
				} else {
					b[0] = 0x50 // IP version 5
				}
				return b
			}
			packets := []struct {
				seg     segment
				edit    func([]byte) []byte
				ingress bool
				whole   bool // counts with its link header
			}{
				{seg: peerData(s, 0, 1400), ingress: true},
				{seg: peerData(s, 1400, 1), ingress: true},
				{seg: peerData(s, 0, 600), edit: toUDP, ingress: true},
				{seg: peerData(s, 0, 100), edit: toNotIP, ingress: true, whole: true},
				{seg: hostACK(s, 1000, 0)},
				{seg: hostACK(s, 1000, 900)},
			}
			var want uint64
			for _, p := range packets {
				frame, _ := p.seg.build(t)
				if p.edit != nil {
					frame = p.edit(frame)
				}
				if !p.ingress {
					d.egress(t, frame)
					continue
				}
				want += uint64(len(frame))
				if !p.whole {
					want -= uint64(l3)
				}
				d.ingress(t, frame)
			}
			c, err := d.Counters()
			require.NoError(t, err)
			assert.Equal(t, want, c[IngressBytes])
			assert.Equal(t, uint64(4), c[m2hoCounterIdCNT_INGRESS_PACKETS])
			assert.Equal(t, uint64(2), c[m2hoCounterIdCNT_EGRESS_PACKETS])
			assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_NOT_IP])
			assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_NOT_TCP])
		})
	}
}

// TestCountersSumEveryCPU writes distinct values on every CPU and checks
// that each counter reads as their sum, under its own name, and so does
// the ingress byte counter read alone.
func TestCountersSumEveryCPU(t *testing.T) {
	d := loadDetached(t, true, 0)
	cpus, err := ebpf.PossibleCPU()
	require.NoError(t, err)
	perCPU := make([]m2hoCpuState, cpus)
	for cpu := range perCPU {
		for id := range perCPU[cpu].Counters {
			perCPU[cpu].Counters[id] = uint64(id+1) << (8 * cpu % 56)
		}
	}
	require.NoError(t, d.objs.CpuStateMap.Update(&onlyEntry, perCPU, ebpf.UpdateAny))

	c, err := d.Counters()
	require.NoError(t, err)
	for id := range m2hoCounterIdCNT_MAX {
		var want uint64
		for cpu := range perCPU {
			want += perCPU[cpu].Counters[id]
		}
		assert.Equal(t, want, c[id], "counter %d", id)
	}
	ingress, err := d.IngressBytes()
	require.NoError(t, err)
	assert.Equal(t, c[IngressBytes], ingress, "the ingress byte counter read alone")
}

// TestRTTHistogramSumsEveryCPU does the same for the RTT histogram.
func TestRTTHistogramSumsEveryCPU(t *testing.T) {
	d := loadDetached(t, true, 0)
	cpus, err := ebpf.PossibleCPU()
	require.NoError(t, err)
	perCPU := make([]m2hoRttHistogram, cpus)
	for cpu := range perCPU {
		for i := range perCPU[cpu].Buckets {
			perCPU[cpu].Buckets[i] = uint64(i*cpus + cpu + 1)
		}
	}
	require.NoError(t, d.objs.RttHist.Update(&onlyEntry, perCPU, ebpf.UpdateAny))

	hist, err := d.RTTHistogram()
	require.NoError(t, err)
	require.Len(t, hist, RTTBuckets)
	for i := range hist {
		var want uint64
		for cpu := range perCPU {
			want += perCPU[cpu].Buckets[i]
		}
		assert.Equal(t, want, hist[i], "bucket %d", i)
	}
}

// TestFlowsAcrossBatches checks that a snapshot holds every flow exactly
// once, whether the table fits one batch or needs several, and that a
// batch smaller than a hash bucket grows instead of failing.
func TestFlowsAcrossBatches(t *testing.T) {
	tests := []struct {
		name     string
		maxFlows uint32
		flows    int
		batch    int
	}{
		{"empty", 1024, 0, flowBatch},
		{"one", 1024, 1, flowBatch},
		{"one batch", 1024, flowBatch, flowBatch},
		{"one more than a batch", 1024, flowBatch + 1, flowBatch},
		{"several batches", 4096, 3*flowBatch + 7, flowBatch},
		// 64 flows in 64 buckets: some bucket holds two or more, more
		// than a one-entry batch has room for
		{"buckets larger than the batch", 64, 64, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := loadDetached(t, true, tc.maxFlows)
			keys, states := syntheticFlows(tc.flows)
			insertFlows(t, d, keys, states)
			seen := make(map[uint16]int)
			deleted, err := d.walkFlows(tc.batch, func(k *m2hoFlowKey, _ *m2hoFlowState) bool {
				seen[k.LocalPort]++
				return false
			})
			require.NoError(t, err)
			assert.Empty(t, deleted)
			assert.Len(t, seen, tc.flows)
			for port, n := range seen {
				assert.Equal(t, 1, n, "flow with port %d", port)
			}

			flows, err := d.Flows()
			require.NoError(t, err)
			assert.Len(t, flows, tc.flows)
		})
	}
}

// TestEvictIdleAcrossBatches evicts, from a table larger than a batch,
// the open flows idle for longer than the idle time and the closed ones
// idle for longer than the shorter time for closed flows.
func TestEvictIdleAcrossBatches(t *testing.T) {
	const idle, closedIdle = 20 * time.Second, 5 * time.Second
	const oldest = 2 * idle
	// flows that received data, open or closed
	open, closed := uint32(m2hoFlowFlagsFLOW_RX_SEQ_VALID), uint32(m2hoFlowFlagsFLOW_RX_SEQ_VALID|m2hoFlowFlagsFLOW_CLOSED)
	kinds := []struct {
		flags   uint32
		age     time.Duration
		evicted bool
	}{
		{open, oldest, true},
		{open, idle / 2, false},
		{closed, idle / 2, true},
		{closed, closedIdle / 5, false},
	}
	d := loadDetached(t, true, 4096)
	keys, states := syntheticFlows(3*flowBatch + 1)
	// Flow times count from boot: the oldest age must not reach back
	// before it, or the last-seen times would wrap around.
	if uptime := time.Duration(monotonicNow()); uptime < oldest {
		t.Logf("waiting %v until the system has been up for %v", oldest-uptime, oldest)
		time.Sleep(oldest - uptime)
	}
	now := monotonicNow()
	wantEvicted := 0
	for i := range states {
		kind := kinds[i%len(kinds)]
		states[i].Flags |= kind.flags
		states[i].LastSeenNs = now - uint64(kind.age)
		if kind.evicted {
			wantEvicted++
		}
	}
	insertFlows(t, d, keys, states)

	evicted, err := d.EvictIdle(idle, closedIdle)
	require.NoError(t, err)
	assert.Equal(t, wantEvicted, evicted)
	assert.Empty(t, d.table.retiredSlots(), "every slot retired is free again")
	flows, err := d.Flows()
	require.NoError(t, err)
	require.Equal(t, len(keys)-wantEvicted, len(flows), "flows left")
	for _, f := range flows {
		kind := kinds[int(f.Local.Port())%len(kinds)]
		assert.False(t, kind.evicted, "flow %v should be evicted", f.Local)
		assert.Equal(t, kind.flags == closed, f.Closed, "flow %v", f.Local)
	}
}

// TestDeleteFlowsSkipsMissing checks that a flow deleted meanwhile (by a
// concurrent eviction) is skipped and does not stop the deletion of the
// others.
func TestDeleteFlowsSkipsMissing(t *testing.T) {
	tests := []struct {
		name    string
		missing []int // positions in the delete list of flows deleted before
	}{
		{"none missing", nil},
		{"first missing", []int{0}},
		{"middle missing", []int{3}},
		{"last missing", []int{9}},
		{"several missing", []int{0, 1, 5, 9}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := loadDetached(t, true, 64)
			keys, states := syntheticFlows(10)
			insertFlows(t, d, keys, states)
			doomed := make([]doomedFlow, len(keys))
			for i, key := range keys {
				slot, entry := flowSlot(t, d, key)
				doomed[i] = doomedFlow{key: key, slot: slot, state: entry.State}
			}
			for _, i := range tc.missing {
				_, err := d.deleteFlows(doomed[i:i+1], nil)
				require.NoError(t, err)
			}
			deleted, err := d.deleteFlows(doomed, nil)
			require.NoError(t, err)
			assert.Len(t, deleted, 10-len(tc.missing))
			flows, err := d.Flows()
			require.NoError(t, err)
			assert.Empty(t, flows)
		})
	}
}

// TestDeleteFlowsSkipsAFlowThatMoved checks that a flow chosen for
// deletion and then refreshed by a packet, or reset by a new connection
// on its ports, before the deletion reaches it, is kept.
func TestDeleteFlowsSkipsAFlowThatMoved(t *testing.T) {
	tests := []struct {
		name string
		move func(t *testing.T, d *Datapath, s segment)
	}{
		{"a packet of the flow", func(t *testing.T, d *Datapath, s segment) {
			verdictOf(t, d, ackOf(s, 0), true)
		}},
		{"a new connection on its ports", func(t *testing.T, d *Datapath, s segment) {
			handshake(t, d, s, 7, 7)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := loadDetached(t, true, 0)
			s := freshPorts(segment{})
			handshake(t, d, s, 7, 7)
			// Past the millisecond within which last-seen times stay,
			// as egress reads it: its coarse clock may lag the precise
			// one ingress stamped the handshake with by two ticks, 20 ms
			// at the lowest tick rate (100 Hz).
			time.Sleep(25 * time.Millisecond)
			deleted, err := d.walkFlows(flowBatch, func(*m2hoFlowKey, *m2hoFlowState) bool {
				tc.move(t, d, s)
				return true
			})
			require.NoError(t, err)
			assert.Empty(t, deleted)
			flows, err := d.Flows()
			require.NoError(t, err)
			assert.Len(t, flows, 1)
		})
	}
}

// TestConcurrentFlowCreation creates each flow from two CPUs at once, as
// when the first packets of both directions of a flow already under way
// meet, and checks that every flow gets exactly one slot.
func TestConcurrentFlowCreation(t *testing.T) {
	cpus := tcptest.AllowedCPUs(t)
	if len(cpus) < 2 {
		t.Skip("needs two CPUs")
	}
	cpus = cpus[:2]
	const flows = 2000
	d := loadDetached(t, true, 4096)
	frames := make([][]byte, flows)
	for i := range frames {
		frames[i], _ = segment{egress: true, ackFlag: true, localPort: uint16(1000 + i), remotePort: 443}.build(t)
	}
	var (
		ready sync.WaitGroup
		start = make(chan struct{})
		errs  = make(chan error, len(cpus))
	)
	for _, cpu := range cpus {
		ready.Add(1)
		go func() {
			err := tcptest.PinThread(cpu)
			ready.Done()
			if err != nil {
				errs <- err
				return
			}
			<-start
			for _, frame := range frames {
				if _, err := d.objs.M2hoEgress.Run(&ebpf.RunOptions{Data: frame}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	ready.Wait()
	close(start)
	for range cpus {
		require.NoError(t, <-errs)
	}

	got, err := d.Flows()
	require.NoError(t, err)
	assert.Len(t, got, flows)
	live := make(map[m2hoFlowKey]int)
	for b := range d.table.buckets {
		bucket := &d.table.buckets[b]
		for i, tag := range bucket.Tags {
			if tag >= uint32(m2hoFlowTagFLOW_TAG_LIVE_MIN) {
				live[bucket.Entries[i].Key]++
			}
		}
	}
	assert.Len(t, live, flows)
	for key, n := range live {
		assert.Equal(t, 1, n, "flow %d holds %d slots", key.LocalPort, n)
	}
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(flows), c[m2hoCounterIdCNT_FLOW_CREATED])
	assert.Zero(t, c[m2hoCounterIdCNT_MAP_FULL])
}
