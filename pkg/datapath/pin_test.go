package datapath

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/nstest"
)

// bpffsDir is a directory, not yet made, on a BPF filesystem of the
// test's own, as m2hod pins in a directory per interface.
func bpffsDir(t *testing.T) string {
	t.Helper()
	nstest.RequireRoot(t)
	mount, err := nstest.MountBPFFS(t)
	if err != nil {
		t.Skip(err)
	}
	return filepath.Join(mount, "wwan0")
}

func loadPinned(t *testing.T, dir string, maxFlows uint32) *Datapath {
	t.Helper()
	d, err := tryLoadDetached(t, true, maxFlows, DefaultBurstGap, dir)
	require.NoError(t, err)
	return d
}

// abandon lets go of d as a killed process does: its descriptors and
// mappings go, its pins stay.
func (d *Datapath) abandon(t *testing.T) {
	t.Helper()
	d.closeOnce.Do(func() { require.NoError(t, errors.Join(d.table.unmap(), d.objs.Close(), d.pins.lock.Close())) })
}

// abandonedPins is a BPF filesystem directory holding the pins of a
// datapath with one flow that went away without closing.
func abandonedPins(t *testing.T) string {
	t.Helper()
	dir := bpffsDir(t)
	first := loadPinned(t, dir, 1024)
	handshake(t, first, freshPorts(segment{}), 7, 7)
	first.abandon(t)
	return dir
}

func pinNames() []string { return append([]string{pinMetaName}, pinnedMaps...) }

// takeOverOneFlow loads a datapath on the pins in dir, left by one that
// tracked one flow after a handshake with window scale 7, and returns it
// with that flow.
func takeOverOneFlow(t *testing.T, dir string, maxFlows uint32) (*Datapath, Flow) {
	t.Helper()
	for _, name := range pinNames() {
		assert.FileExists(t, filepath.Join(dir, name))
	}
	d := loadPinned(t, dir, maxFlows)
	flows, err := d.Flows()
	require.NoError(t, err)
	require.Len(t, flows, 1)
	assert.True(t, flows[0].WScaleKnown)
	assert.Equal(t, uint8(7), flows[0].WScale)
	return d, flows[0]
}

// TestPinnedFlowsSurviveAnUncleanExit takes over the flows of a datapath
// that went away without closing: a flow's window scale, learnt from its
// SYN before, still lets its ACKs be clamped, its packets find it where
// the earlier programs placed it, and handover epochs go on counting. A
// normal close then leaves no pin behind.
func TestPinnedFlowsSurviveAnUncleanExit(t *testing.T) {
	dir := bpffsDir(t)
	first := loadPinned(t, dir, 0)
	s := freshPorts(segment{})
	handshake(t, first, s, 7, 7)
	verdictOf(t, first, peerData(s, 0, 1000), false)
	epoch, err := first.StartSuppression(time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.NoError(t, first.StopSuppression())
	first.abandon(t)

	second, flow := takeOverOneFlow(t, dir, 0)
	assert.Equal(t, uint32(peerISN+1+1000), flow.HighestRxSeq)

	require.NoError(t, second.SetClamp(20000, time.Now().Add(time.Minute)))
	expectWindow(t, second, hostACK(s, 65535, 0), expectedClamp(65535, 7, 20000))
	c, err := second.Counters()
	require.NoError(t, err)
	assert.Zero(t, c[m2hoCounterIdCNT_FLOW_CREATED], "the ACK found the flow where the earlier programs placed it")
	next, err := second.StartSuppression(time.Now().Add(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, epoch+1, next, "epochs go on")

	require.NoError(t, second.Close())
	for _, name := range pinNames() {
		assert.NoFileExists(t, filepath.Join(dir, name))
	}
	assert.NoDirExists(t, dir)
}

// TestCloseKeepingFlows closes a pinned datapath for a restart: the
// programs go, the pins stay, and the next datapath takes the flow over
// with its window scale, which it then removes at a normal close. Without
// pins, it closes as Close does.
func TestCloseKeepingFlows(t *testing.T) {
	dir := bpffsDir(t)
	first := loadPinned(t, dir, 1024)
	s := freshPorts(segment{})
	handshake(t, first, s, 7, 7)
	require.NoError(t, first.CloseKeepingFlows())
	require.NoError(t, first.Close(), "the first close counts")

	second, _ := takeOverOneFlow(t, dir, 1024)
	require.NoError(t, second.Close())
	assert.NoDirExists(t, dir)

	unpinned := loadDetached(t, true, 1024)
	assert.NoError(t, unpinned.CloseKeepingFlows())
}

// TestPinnedFlowsReplaced starts afresh when the pins cannot be read as
// this build's flow table.
func TestPinnedFlowsReplaced(t *testing.T) {
	tests := []struct {
		name     string
		maxFlows uint32
		spoil    func(t *testing.T, dir string)
	}{
		{"another max_flows", 4096, func(*testing.T, string) {}},
		{"another layout", 1024, func(t *testing.T, dir string) {
			m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinMetaName), nil)
			require.NoError(t, err)
			defer m.Close()
			require.NoError(t, m.Update(uint32(0), pinMeta{Layout: flowLayout + 1}, ebpf.UpdateAny))
		}},
		{"no description", 1024, func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, pinMetaName)))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := abandonedPins(t)
			tt.spoil(t, dir)

			second := loadPinned(t, dir, tt.maxFlows)
			flows, err := second.Flows()
			require.NoError(t, err)
			assert.Empty(t, flows)
			handshake(t, second, freshPorts(segment{}), 7, 7)
			flows, err = second.Flows()
			require.NoError(t, err)
			assert.Len(t, flows, 1)
			for _, name := range pinNames() {
				assert.FileExists(t, filepath.Join(dir, name))
			}
		})
	}
}

// TestPinsUnusable runs unpinned, leaving the pins as they are, when the
// pinned set can neither be taken over nor replaced.
func TestPinsUnusable(t *testing.T) {
	// replaceByDirectory puts a directory that cannot be removed in the
	// place of one pin.
	replaceByDirectory := func(name string) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, name)))
			require.NoError(t, os.MkdirAll(filepath.Join(dir, name, "inside"), 0o700))
		}
	}
	tests := []struct {
		name  string
		spoil func(t *testing.T, dir string)
		kept  string
	}{
		{"description not a map", replaceByDirectory(pinMetaName), pinMetaName},
		{"flow index not a map", replaceByDirectory(m2hoMapFlowIndex), m2hoMapFlowIndex},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := abandonedPins(t)
			tt.spoil(t, dir)

			second := loadPinned(t, dir, 1024)
			assert.Nil(t, second.pins, "unpinned")
			handshake(t, second, freshPorts(segment{}), 7, 7)
			flows, err := second.Flows()
			require.NoError(t, err)
			assert.Len(t, flows, 1, "the datapath works, with a table of its own")
			assert.DirExists(t, filepath.Join(dir, tt.kept, "inside"), "what it could not use is left alone")
			require.NoError(t, second.Close())
		})
	}
}

// TestPinDirOffBPFFS runs unpinned, and pins nothing, when the directory
// cannot hold pins.
func TestPinDirOffBPFFS(t *testing.T) {
	nstest.RequireRoot(t)
	dir := t.TempDir()
	d := loadPinned(t, dir, 0)
	assert.Nil(t, d.pins)
	handshake(t, d, freshPorts(segment{}), 7, 7)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
}

// TestPinDirHeldByOneDatapath refuses a second datapath on a pin directory
// in use, and lets the next one in once the first has closed.
func TestPinDirHeldByOneDatapath(t *testing.T) {
	dir := bpffsDir(t)
	first := loadPinned(t, dir, 0)
	_, err := tryLoadDetached(t, true, 0, DefaultBurstGap, dir)
	require.ErrorIs(t, err, ErrPinDirInUse)
	require.NoError(t, first.Close())
	loadPinned(t, dir, 0)
}

// TestLayoutDigest tells layouts and formats apart.
func TestLayoutDigest(t *testing.T) {
	type a struct{ X, Y uint32 }
	type b struct{ X, Z uint32 }
	type c struct {
		X uint32
		Y uint64
	}
	base := layoutDigest(1, a{})
	assert.Equal(t, base, layoutDigest(1, a{}))
	assert.NotEqual(t, base, layoutDigest(2, a{}), "another format")
	assert.NotEqual(t, base, layoutDigest(1, b{}), "a renamed field")
	assert.NotEqual(t, base, layoutDigest(1, c{}), "a wider field")
	assert.NotEqual(t, layoutDigest(1, [2]a{}), layoutDigest(1, [3]a{}), "a longer array")
}
