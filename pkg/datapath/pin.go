package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Flow state that outlives the process when Options.PinDir is set: the
// flow table and its index, which hold every flow's window scale (learnt
// only from its SYN), and the policy, whose handover epoch the flows'
// snapshots refer to. A daemon that dies without closing leaves them pinned,
// and the next one with the same directory takes them over, so connections
// opened before the restart are still clamped. Close unpins them.
var pinnedMaps = []string{m2hoMapFlowTable, m2hoMapFlowIndex, m2hoMapPolicyMap}

// pinMetaName is the map, pinned last, that says the set is complete and
// how to read it: the layout of the pinned values and the flow hash seed
// the packet path placed the flows with.
const pinMetaName = "flow_meta"

// pinMeta is the value of the pinMetaName map.
type pinMeta struct {
	Layout   uint64
	HashSeed uint64
}

// flowLayout identifies the layout of the pinned maps' keys and values:
// a program built with another layout must not read them.
var flowLayout = layoutDigest(m2hoFlowKey{}, m2hoFlowBucket{}, m2hoPolicy{}, uint32(flowBucketSlots))

// layoutDigest hashes the names, offsets and types of the values' fields,
// recursively.
func layoutDigest(values ...any) uint64 {
	h := fnv.New64a()
	var describe func(reflect.Type)
	describe = func(t reflect.Type) {
		fmt.Fprintf(h, "%s/%d{", t.Kind(), t.Size())
		switch t.Kind() {
		case reflect.Struct:
			for i := range t.NumField() {
				f := t.Field(i)
				fmt.Fprintf(h, "%s@%d:", f.Name, f.Offset)
				describe(f.Type)
			}
		case reflect.Array:
			fmt.Fprintf(h, "%d*", t.Len())
			describe(t.Elem())
		}
		fmt.Fprint(h, "}")
	}
	for _, v := range values {
		switch v := v.(type) {
		case uint32:
			fmt.Fprintf(h, "=%d", v)
		default:
			describe(reflect.TypeOf(v))
		}
	}
	return h.Sum64()
}

// isBPFFS says whether dir lies on a BPF filesystem, where maps can be
// pinned.
func isBPFFS(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, err
	}
	return uint32(st.Type) == unix.BPF_FS_MAGIC, nil
}

// pinState is how one load treats the pinned flow state.
type pinState struct {
	// dir is the pin directory; empty when nothing is pinned.
	dir string
	// takeover says the load uses maps an earlier process pinned.
	takeover bool
}

// pinning prepares spec to load its flow state pinned in dir: it takes over
// a complete set of pins of the same layout, giving the programs the seed
// the flows were placed with, and otherwise removes whatever is there so
// that the load pins a fresh set. A directory that cannot be made, or lies
// off a BPF filesystem, leaves everything unpinned, with a warning.
func pinning(spec *ebpf.CollectionSpec, dir string, opts *ebpf.CollectionOptions, logger *slog.Logger) (pinState, error) {
	if dir == "" {
		return pinState{}, nil
	}
	// Pinning only carries flows over a restart: without it the datapath
	// works all the same, so a directory that cannot hold pins is no
	// reason to stop.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		logger.Warn("cannot create the pin directory: flows will not survive a restart", "dir", dir, "err", err)
		return pinState{}, nil
	}
	if bpffs, err := isBPFFS(dir); err != nil || !bpffs {
		logger.Warn("pin directory is not on a BPF filesystem: flows will not survive a restart", "dir", dir, "err", err)
		return pinState{}, nil
	}
	for _, name := range pinnedMaps {
		spec.Maps[name].Pinning = ebpf.PinByName
	}
	opts.Maps.PinPath = dir
	meta, err := readPinMeta(dir)
	switch {
	case err == nil && meta.Layout == flowLayout:
		if err := spec.Variables[m2hoVarCfgFlowHashSeed].Set(meta.HashSeed); err != nil {
			return pinState{}, fmt.Errorf("datapath: set %s: %w", m2hoVarCfgFlowHashSeed, err)
		}
		return pinState{dir: dir, takeover: true}, nil
	case err == nil:
		logger.Info("pinned flows have another layout: starting afresh", "dir", dir)
	case !errors.Is(err, os.ErrNotExist):
		logger.Warn("pinned flows unreadable: starting afresh", "dir", dir, "err", err)
	}
	return pinState{dir: dir}, removePins(dir)
}

// readPinMeta reads the pinned set's description.
func readPinMeta(dir string) (pinMeta, error) {
	var meta pinMeta
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinMetaName), nil)
	if err != nil {
		return meta, err
	}
	defer m.Close()
	var raw []byte
	if err := m.Lookup(uint32(0), &raw); err != nil {
		return meta, fmt.Errorf("read %s: %w", pinMetaName, err)
	}
	if len(raw) != binary.Size(meta) {
		return meta, fmt.Errorf("%s holds %d bytes, want %d", pinMetaName, len(raw), binary.Size(meta))
	}
	meta.Layout = binary.NativeEndian.Uint64(raw)
	meta.HashSeed = binary.NativeEndian.Uint64(raw[8:])
	return meta, nil
}

// pinMetaOf pins the description of a freshly pinned set, last: until it
// exists, the next load starts afresh.
func pinMetaOf(dir string, spec *ebpf.CollectionSpec) error {
	var seed uint64
	if err := spec.Variables[m2hoVarCfgFlowHashSeed].Get(&seed); err != nil {
		return fmt.Errorf("datapath: read %s: %w", m2hoVarCfgFlowHashSeed, err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: pinMetaName, Type: ebpf.Array, KeySize: 4, ValueSize: uint32(binary.Size(pinMeta{})), MaxEntries: 1,
	})
	if err != nil {
		return fmt.Errorf("datapath: create %s: %w", pinMetaName, err)
	}
	defer m.Close()
	raw := binary.NativeEndian.AppendUint64(binary.NativeEndian.AppendUint64(nil, flowLayout), seed)
	if err := m.Update(uint32(0), raw, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("datapath: write %s: %w", pinMetaName, err)
	}
	if err := m.Pin(filepath.Join(dir, pinMetaName)); err != nil {
		return fmt.Errorf("datapath: pin %s: %w", pinMetaName, err)
	}
	return nil
}

// removePins removes the pins this package makes in dir, the description
// first, and nothing else.
func removePins(dir string) error {
	var errs []error
	for _, name := range append([]string{pinMetaName}, pinnedMaps...) {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("datapath: remove pins: %w", err)
	}
	return nil
}

// unpin removes the pins of a datapath that closes normally, so that no
// flow state outlives it, and the directory once it is empty.
func unpin(dir string) error {
	if dir == "" {
		return nil
	}
	if err := removePins(dir); err != nil {
		return err
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
		return fmt.Errorf("datapath: remove pin directory: %w", err)
	}
	return nil
}
