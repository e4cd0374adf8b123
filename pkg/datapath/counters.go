package datapath

import (
	"encoding/json"
	"fmt"
	"iter"
	"strings"
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
