package datapath

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"regexp"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestEveryCounterHasAName: each entry of the counter enum has a name of
// its own, the enum's, which /status and the metrics use.
func TestEveryCounterHasAName(t *testing.T) {
	var c Counters
	for id := range c {
		c[id] = uint64(id) + 1
	}
	valid := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	seen := map[string]bool{}
	for name, v := range c.All() {
		id := int(v - 1)
		assert.Regexp(t, valid, name, "counter %d", id)
		assert.False(t, seen[name], "counter %d shares the name %s", id, name)
		seen[name] = true
		assert.Equal(t, name, CounterName(id))
	}
	assert.Len(t, seen, int(m2hoCounterIdCNT_MAX), "every counter, CNT_MAX excluded")
	assert.Equal(t, "clamp_applied", CounterName(int(m2hoCounterIdCNT_CLAMP_APPLIED)))
	assert.Equal(t, "ingress_bytes", CounterName(int(m2hoCounterIdCNT_INGRESS_BYTES)))
	assert.Equal(t, uint64(m2hoCounterIdCNT_INGRESS_BYTES)+1, c[IngressBytes])

	data, err := json.Marshal(c)
	require.NoError(t, err)
	var byName map[string]uint64
	require.NoError(t, json.Unmarshal(data, &byName))
	assert.Len(t, byName, len(c))
	assert.Equal(t, uint64(m2hoCounterIdCNT_DUPACK_SUPPRESSED)+1, byName["dupack_suppressed"])
}

// TestFlowTableMemory pins the flow table's memory per flow, which the
// documentation of MaxFlowsLimit and deploy/m2hod.yaml quote: a change of
// the entry layout must update them.
func TestFlowTableMemory(t *testing.T) {
	tableBytes := func(maxFlows uint32) uint64 {
		return uint64(flowTableBuckets(maxFlows)) * uint64(unsafe.Sizeof(m2hoFlowBucket{}))
	}
	assert.Equal(t, uint64(3*64), uint64(unsafe.Sizeof(m2hoFlowEntry{})), "three cache lines per entry")
	assert.Equal(t, uint64(400*DefaultMaxFlows), tableBytes(DefaultMaxFlows), "25 MiB by default")
	assert.Equal(t, uint64(6.25*(1<<30)), tableBytes(MaxFlowsLimit), "6.25 GiB at the limit")
}

func TestMonotonicConversion(t *testing.T) {
	tests := []struct {
		name   string
		offset time.Duration
	}{
		{"now", 0},
		{"in a minute", time.Minute},
		{"a second ago", -time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wall := time.Now().Add(tc.offset)
			assert.WithinDuration(t, wall, fromMonotonic(toMonotonic(wall)), time.Millisecond)
		})
	}
	assert.Zero(t, toMonotonic(time.Unix(0, 0)), "instants before boot map to 0")
}

// TestDecodeBurst: the hand decoder reads the record the BPF header
// defines, and a record of another size is an error.
func TestDecodeBurst(t *testing.T) {
	want := m2hoBurstEvent{StartNs: 1, EndNs: 2 << 40, Bytes: 3 << 20, Packets: 4}
	assert.Equal(t, uintptr(burstEventSize), unsafe.Sizeof(want))
	raw, err := binary.Append(nil, binary.NativeEndian, want)
	require.NoError(t, err)
	var got m2hoBurstEvent
	require.NoError(t, decodeBurst(raw, &got))
	assert.Equal(t, want, got)
	assert.Error(t, decodeBurst(raw[:burstEventSize-1], &got))
}

// TestMonotonicFollowsTheKernelClock: the readings derived from Go's clock
// stay on CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns, bracketed by
// two system-call readings.
func TestMonotonicFollowsTheKernelClock(t *testing.T) {
	kernel := func() uint64 {
		var ts unix.Timespec
		require.NoError(t, unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts))
		return uint64(ts.Nano())
	}
	// Slack for the pairing at start, off by half a system call.
	const slack = uint64(50 * time.Microsecond)
	for range 100 {
		before := kernel()
		derived := monotonicNow()
		after := kernel()
		assert.GreaterOrEqual(t, derived+slack, before)
		assert.LessOrEqual(t, derived, after+slack)
		time.Sleep(time.Millisecond)
	}
}

func TestLinkFraming(t *testing.T) {
	tests := []struct {
		name    string
		attrs   netlink.LinkAttrs
		rawIP   bool
		wantErr bool
	}{
		{"ethernet", netlink.LinkAttrs{EncapType: "ether", HardwareAddr: []byte{2, 0, 0, 0, 0, 1}}, false, false},
		{"loopback", netlink.LinkAttrs{EncapType: "loopback", HardwareAddr: make([]byte, 6)}, false, false},
		{"tun", netlink.LinkAttrs{EncapType: "none"}, true, false},
		{"rawip modem", netlink.LinkAttrs{EncapType: "unknown519"}, true, false},
		{"ppp", netlink.LinkAttrs{EncapType: "ppp"}, true, false},
		{"infiniband", netlink.LinkAttrs{EncapType: "infiniband", HardwareAddr: make([]byte, 20)}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := linkIsRawIP(&tc.attrs)
			if tc.wantErr {
				assert.ErrorIs(t, err, ErrUnsupported)
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, tc.rawIP, raw)
		})
	}
}

func TestLoadFailure(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"no privileges", fmt.Errorf("failed to set memlock rlimit: %w", unix.EPERM), ErrPermission},
		{"access denied", fmt.Errorf("map create: %w", unix.EACCES), ErrPermission},
		{"helper missing from the kernel", fmt.Errorf("program m2ho_ingress: %w", unix.EINVAL), ErrUnsupported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := loadFailure("load BPF objects", tc.err)
			assert.ErrorIs(t, err, tc.want)
			assert.ErrorIs(t, err, tc.err, "the cause stays wrapped")
		})
	}
}

// TestFlagSetsAreBarriers checks the compiled programs for the form of
// atomic OR that orders nothing on weakly ordered CPUs (arm64): clang
// emits it for an unused result. Setting a flow flag must be a full
// barrier (flow_set), or another CPU could see FLOW_RX_SEQ_VALID or
// FLOW_PEER_FIN before the sequence they announce.
func TestFlagSetsAreBarriers(t *testing.T) {
	spec, err := loadM2ho()
	require.NoError(t, err)
	for name, prog := range spec.Programs {
		for _, ins := range prog.Instructions {
			assert.NotEqual(t, asm.OrAtomic, ins.OpCode.AtomicOp(), "%s: %v: an atomic OR without fetch", name, ins)
		}
	}
}
