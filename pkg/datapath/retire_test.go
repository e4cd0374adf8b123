package datapath

import (
	"sync/atomic"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRetiredSlotIsNeitherFoundNorTaken deletes a flow as an eviction
// does, up to the release of its slot, in the smallest table with every
// other slot taken. Until the release, a packet of the flow finds nothing
// to write into, and no new flow takes the slot: a packet still under way
// from before the deletion would write into it. After it, the slot holds
// the next flow.
func TestRetiredSlotIsNeitherFoundNorTaken(t *testing.T) {
	d := loadDetached(t, true, 4)
	require.Equal(t, uint32(2), flowTableBuckets(4), "two buckets")
	// leave the first slot of each bucket free
	for n := range 2 * flowBucketSlots {
		if n%flowBucketSlots != 0 {
			tag, _ := d.table.slot(n)
			atomic.StoreUint32(tag, uint32(m2hoFlowTagFLOW_TAG_CLAIMED))
		}
	}
	s := freshPorts(segment{timestamps: true})
	handshake(t, d, s, 7, 7)
	verdictOf(t, d, peerData(s, 0, 1000), false)
	key := fixtureFlowKey(s.localPort, s.remotePort)
	slot, entry := flowSlot(t, d, key)
	// and take the other one
	other, _ := d.table.slot(slot ^ flowBucketSlots)
	atomic.StoreUint32(other, uint32(m2hoFlowTagFLOW_TAG_CLAIMED))

	retired, err := d.retireFlows([]doomedFlow{{key: key, slot: slot, state: entry.State}})
	require.NoError(t, err)
	require.Len(t, retired, 1)
	assert.Equal(t, []uint32{slot}, d.table.retiredSlots())
	assert.ErrorIs(t, d.objs.FlowIndex.Lookup(&key, new(uint32)), ebpf.ErrKeyNotExist)

	verdictOf(t, d, peerData(s, 1000, 1000), false)
	verdictOf(t, d, ackOf(s, 2000), true)
	_, after := d.table.slot(slot)
	assert.Equal(t, uint64(1000), after.State.RxBytes, "no packet writes into a retired slot")
	c, err := d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_FLOW_CREATED])
	assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_MAP_FULL], "the host's ACK found no free slot")

	d.table.release(slot)
	assert.Empty(t, d.table.retiredSlots())
	verdictOf(t, d, ackOf(s, 2000), true)
	again, _ := flowSlot(t, d, key)
	assert.Equal(t, slot, again)
	c, err = d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(2), c[m2hoCounterIdCNT_FLOW_CREATED])
}

// TestUnfinishedDeletionRepairedAtTakeover kills a datapath with pinned
// flows in the middle of deleting a flow, and checks that the next one
// finishes the deletion: it frees the retired slot and removes an index
// entry left naming it. Left alone, such an entry would keep every packet
// of its key untracked: the packet path cannot enter the key's flow again
// while the index holds it.
func TestUnfinishedDeletionRepairedAtTakeover(t *testing.T) {
	tests := []struct {
		name string
		// indexDeleted: the process died after removing the index
		// entry, before freeing the slot
		indexDeleted bool
	}{
		{name: "died after retiring the slot", indexDeleted: false},
		{name: "died after removing the index entry", indexDeleted: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := bpffsDir(t)
			first := loadPinned(t, dir, 1024)
			s := freshPorts(segment{})
			handshake(t, first, s, 7, 7)
			key := fixtureFlowKey(s.localPort, s.remotePort)
			slot, _ := flowSlot(t, first, key)
			first.table.retire(slot)
			if tc.indexDeleted {
				require.NoError(t, first.objs.FlowIndex.Delete(&key))
			} else {
				verdictOf(t, first, ackOf(s, 0), true)
				c, err := first.Counters()
				require.NoError(t, err)
				require.Equal(t, uint64(1), c[m2hoCounterIdCNT_UNTRACKED], "the stray entry keeps the flow out")
			}
			first.abandon(t)

			second := loadPinned(t, dir, 1024)
			assert.Empty(t, second.table.retiredSlots(), "the slot is free again")
			assert.ErrorIs(t, second.objs.FlowIndex.Lookup(&key, new(uint32)), ebpf.ErrKeyNotExist)
			flows, err := second.Flows()
			require.NoError(t, err)
			assert.Empty(t, flows)

			verdictOf(t, second, ackOf(s, 0), true)
			flowSlot(t, second, key)
			c, err := second.Counters()
			require.NoError(t, err)
			assert.Equal(t, uint64(1), c[m2hoCounterIdCNT_FLOW_CREATED], "the flow is tracked afresh")
			assert.Zero(t, c[m2hoCounterIdCNT_UNTRACKED])
		})
	}
}

// TestRemoveStrays checks which index entries, found naming a slot that
// did not hold their flow, removeStrays deletes: those that still name
// that slot, which still does not hold the flow, and no other.
func TestRemoveStrays(t *testing.T) {
	tests := []struct {
		name string
		// now makes the state removeStrays finds, from the flow's key and
		// slot, and returns the entry as a walk had read it
		now         func(t *testing.T, d *Datapath, key m2hoFlowKey, slot uint32) indexEntry
		wantRemoved int
		wantEntry   bool
	}{
		{"the slot holds the flow: a creation that has finished since",
			func(t *testing.T, d *Datapath, key m2hoFlowKey, slot uint32) indexEntry {
				return indexEntry{key: key, slot: slot}
			}, 0, true},
		{"the slot is retired",
			func(t *testing.T, d *Datapath, key m2hoFlowKey, slot uint32) indexEntry {
				d.table.retire(slot)
				return indexEntry{key: key, slot: slot}
			}, 1, false},
		{"the slot is free",
			func(t *testing.T, d *Datapath, key m2hoFlowKey, slot uint32) indexEntry {
				d.table.retire(slot)
				d.table.release(slot)
				return indexEntry{key: key, slot: slot}
			}, 1, false},
		{"the entry names another slot now",
			func(t *testing.T, d *Datapath, key m2hoFlowKey, slot uint32) indexEntry {
				d.table.retire(slot)
				return indexEntry{key: key, slot: slot + 1}
			}, 0, true},
		{"the entry is gone",
			func(t *testing.T, d *Datapath, key m2hoFlowKey, slot uint32) indexEntry {
				d.table.retire(slot)
				require.NoError(t, d.objs.FlowIndex.Delete(&key))
				return indexEntry{key: key, slot: slot}
			}, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := loadDetached(t, true, 64)
			keys, states := syntheticFlows(1)
			insertFlows(t, d, keys, states)
			slot, _ := flowSlot(t, d, keys[0])
			stray := tc.now(t, d, keys[0], slot)
			removed, err := d.removeStrays([]indexEntry{stray})
			require.NoError(t, err)
			assert.Equal(t, tc.wantRemoved, removed)
			err = d.objs.FlowIndex.Lookup(&keys[0], new(uint32))
			if tc.wantEntry {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, ebpf.ErrKeyNotExist)
			}
		})
	}
}
