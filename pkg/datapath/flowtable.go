package datapath

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// flowBucketSlots is M2HO_FLOW_BUCKET_SLOTS.
const flowBucketSlots = uint32(len(m2hoFlowBucket{}.Tags))

// flowTableBuckets sizes the flow table for maxFlows flows, in buckets (the
// map's entries): a power of two holding at least twice as many slots, and
// two buckets at least.
func flowTableBuckets(maxFlows uint32) uint32 {
	slots := 2 * flowBucketSlots
	for slots < 2*maxFlows {
		slots <<= 1
	}
	return slots / flowBucketSlots
}

// flowTable is the flow table mapped into memory: user space reads flows
// and frees slots without a system call, and frees a slot with one atomic
// store to its tag. Writing a whole bucket through the map would overwrite
// the packet path's concurrent updates of the bucket's other flows.
type flowTable struct {
	mem     []byte
	buckets []m2hoFlowBucket
}

func mapFlowTable(m *ebpf.Map) (flowTable, error) {
	size := int(m.MaxEntries()) * int(unsafe.Sizeof(m2hoFlowBucket{}))
	if uintptr(m.ValueSize()) != unsafe.Sizeof(m2hoFlowBucket{}) {
		return flowTable{}, fmt.Errorf("%w: flow bucket of %d bytes, want %d", ErrUnsupported,
			m.ValueSize(), unsafe.Sizeof(m2hoFlowBucket{}))
	}
	page := os.Getpagesize()
	mem, err := unix.Mmap(m.FD(), 0, (size+page-1)/page*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return flowTable{}, fmt.Errorf("%w: map the flow table: %w", ErrUnsupported, err)
	}
	buckets := unsafe.Slice((*m2hoFlowBucket)(unsafe.Pointer(&mem[0])), m.MaxEntries())
	return flowTable{mem: mem, buckets: buckets}, nil
}

func (t *flowTable) unmap() error {
	if t.mem == nil {
		return nil
	}
	mem := t.mem
	t.mem, t.buckets = nil, nil
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("datapath: unmap the flow table: %w", err)
	}
	return nil
}

// slot returns the tag and entry of slot number n, or nil past the table.
func (t *flowTable) slot(n uint32) (*uint32, *m2hoFlowEntry) {
	bucket, position := n/flowBucketSlots, n%flowBucketSlots
	if int(bucket) >= len(t.buckets) {
		return nil, nil
	}
	b := &t.buckets[bucket]
	return &b.Tags[position], &b.Entries[position]
}

// live reads the entry in slot n if it holds key, a live flow.
func (t *flowTable) live(n uint32, key *m2hoFlowKey, entry *m2hoFlowEntry) bool {
	tag, e := t.slot(n)
	if tag == nil || atomic.LoadUint32(tag) < uint32(m2hoFlowTagFLOW_TAG_LIVE_MIN) {
		return false
	}
	*entry = *e
	return entry.Key == *key
}

// free frees slot n.
func (t *flowTable) free(n uint32) {
	if tag, _ := t.slot(n); tag != nil {
		atomic.StoreUint32(tag, uint32(m2hoFlowTagFLOW_TAG_FREE))
	}
}
