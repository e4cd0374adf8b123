package datapath

import (
	"encoding/json"
	"fmt"
	"iter"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Counters are the programs' counts since load, summed over CPUs, indexed
// by the counter enum of bpf/m2ho.h (counter_id, m2hoCounterId here).
// Every entry is an event count but CNT_INGRESS_BYTES, the IP bytes of
// every ingress packet. A counter appended to the enum is read, named and
// exported (m2hod_datapath_events_total, /status) without a change here.
type Counters [m2hoCounterIdCNT_MAX]uint64

// CounterName is the name of enum entry id: lower case, without CNT_
// (CNT_CLAMP_APPLIED is clamp_applied). The names come from the enum
// through the String method stringer generates for it.
func CounterName(id int) string {
	return strings.ToLower(m2hoCounterId(id).String())
}

// All yields every counter by name, in enum order.
func (c *Counters) All() iter.Seq2[string, uint64] {
	return func(yield func(string, uint64) bool) {
		for id, v := range c {
			if !yield(CounterName(id), v) {
				return
			}
		}
	}
}

// IngressBytes is the index of the cumulative IP length of every packet
// received on the interface, whatever its protocol (link header excluded;
// a packet that is not IP counts whole). It comes from the programs' own
// counters, so it is right in whatever network namespace the caller runs.
const IngressBytes = m2hoCounterIdCNT_INGRESS_BYTES

// MarshalJSON writes the counters as an object keyed by CounterName.
func (c Counters) MarshalJSON() ([]byte, error) {
	m := make(map[string]uint64, len(c))
	for name, v := range c.All() {
		m[name] = v
	}
	return json.Marshal(m)
}

// onlyEntry is the key of the single entry of the counters and rtt_hist
// maps: one per-CPU value holds all the counters, or the whole histogram,
// so that a single lookup reads them.
var onlyEntry uint32

// Counters reads every counter, summed over CPUs, in one map lookup.
func (d *Datapath) Counters() (Counters, error) {
	var c Counters
	if err := d.maps.enter(); err != nil {
		return c, err
	}
	defer d.maps.leave()
	var perCPU []m2hoCpuState
	if err := d.objs.CpuStateMap.Lookup(&onlyEntry, &perCPU); err != nil {
		return c, fmt.Errorf("datapath: read counters: %w", err)
	}
	for cpu := range perCPU {
		for id, v := range perCPU[cpu].Counters {
			c[id] += v
		}
	}
	return c, nil
}

// ingressReader holds the buffer IngressBytes reads the counters into,
// one m2hoCpuState per possible CPU, allocated at the first read.
type ingressReader struct {
	mu     sync.Mutex
	perCPU []m2hoCpuState
}

// mapLookupAttr is the bpf(2) attribute of BPF_MAP_LOOKUP_ELEM.
type mapLookupAttr struct {
	mapFD uint32
	_     uint32
	key   uint64
	value uint64
	flags uint64
}

// IngressBytes reads the ingress byte counter (Counters()[IngressBytes])
// alone. It is the read the daemon makes at every slot allocation of a
// modem, hundreds of times a second, so it allocates nothing and enters
// the kernel as a raw system call: the lookup cannot block, and made as a
// system call to the runtime, the first one after the process slept
// wakes the runtime's monitor thread, which then polls every 20 µs until
// the process sleeps again, costing more than the lookup itself.
func (d *Datapath) IngressBytes() (uint64, error) {
	if err := d.maps.enter(); err != nil {
		return 0, err
	}
	defer d.maps.leave()
	r := &d.ingressReads
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.perCPU == nil {
		if uintptr(d.objs.CpuStateMap.ValueSize()) != unsafe.Sizeof(m2hoCpuState{}) {
			return 0, fmt.Errorf("datapath: cpu state of %d bytes, want %d", d.objs.CpuStateMap.ValueSize(), unsafe.Sizeof(m2hoCpuState{}))
		}
		cpus, err := ebpf.PossibleCPU()
		if err != nil {
			return 0, fmt.Errorf("datapath: read counters: %w", err)
		}
		r.perCPU = make([]m2hoCpuState, cpus)
	}
	// The kernel copies each CPU's value 8-byte aligned, which an
	// m2hoCpuState of 64-bit fields already is.
	attr := mapLookupAttr{
		mapFD: uint32(d.objs.CpuStateMap.FD()),
		key:   uint64(uintptr(unsafe.Pointer(&onlyEntry))),
		value: uint64(uintptr(unsafe.Pointer(&r.perCPU[0]))),
	}
	_, _, errno := unix.RawSyscall(unix.SYS_BPF, unix.BPF_MAP_LOOKUP_ELEM, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(r.perCPU)
	if errno != 0 {
		return 0, fmt.Errorf("datapath: read counters: %w", errno)
	}
	var sum uint64
	for cpu := range r.perCPU {
		sum += r.perCPU[cpu].Counters[IngressBytes]
	}
	return sum, nil
}
