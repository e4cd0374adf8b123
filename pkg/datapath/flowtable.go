package datapath

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"
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
// and frees slots without a system call, with one atomic operation on a
// slot's tag. Writing a whole bucket through the map would overwrite the
// packet path's concurrent updates of the bucket's other flows.
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

// retire takes slot n out of use: the packet path neither finds its flow
// (the tag is no longer live) nor claims the slot for another (it is not
// free), while a program run that found the flow before may still be
// writing into it. release frees it once no such run can remain.
func (t *flowTable) retire(n uint32) {
	if tag, _ := t.slot(n); tag != nil {
		atomic.StoreUint32(tag, uint32(m2hoFlowTagFLOW_TAG_DEAD))
	}
}

// release frees slot n if it is retired.
func (t *flowTable) release(n uint32) {
	if tag, _ := t.slot(n); tag != nil {
		atomic.CompareAndSwapUint32(tag, uint32(m2hoFlowTagFLOW_TAG_DEAD), uint32(m2hoFlowTagFLOW_TAG_FREE))
	}
}

// retiredSlots lists the retired slots: a process that died between
// retiring slots and releasing them leaves them so in a pinned table.
func (t *flowTable) retiredSlots() []uint32 {
	var retired []uint32
	for b := range t.buckets {
		for position := range t.buckets[b].Tags {
			if atomic.LoadUint32(&t.buckets[b].Tags[position]) == uint32(m2hoFlowTagFLOW_TAG_DEAD) {
				retired = append(retired, uint32(b)*flowBucketSlots+uint32(position))
			}
		}
	}
	return retired
}

// membarrierCmdGlobal is MEMBARRIER_CMD_GLOBAL of linux/membarrier.h.
const membarrierCmdGlobal = 1 << 0

// fallbackGrace is how long waitForProgramRuns sleeps where the kernel
// cannot wait for the programs: thousands of times longer than a run lasts.
const fallbackGrace = 100 * time.Millisecond

// waitForProgramRuns returns once every run of the programs that began
// before the call has ended. The kernel runs tc programs inside RCU
// read-side critical sections, and membarrier(MEMBARRIER_CMD_GLOBAL) waits
// for an RCU grace period (synchronize_rcu), which ends only after every
// such section that had begun. Kernels with nohz_full CPUs refuse that
// command, and those built without membarrier lack it: there it sleeps
// for fallbackGrace instead.
func waitForProgramRuns() {
	if _, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierCmdGlobal, 0, 0); errno != 0 {
		time.Sleep(fallbackGrace)
	}
}
