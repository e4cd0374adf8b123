package datapath

import (
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestEveryCounterHasAField(t *testing.T) {
	var c Counters
	seen := map[*uint64]bool{}
	for id := range m2hoCounterIdCNT_MAX {
		f := c.field(id)
		if assert.NotNil(t, f, "counter %d has no field", id) {
			assert.False(t, seen[f], "counter %d shares a field", id)
			seen[f] = true
		}
	}
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
