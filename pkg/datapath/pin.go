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

// pinFormat is bumped whenever the meaning of the pinned values changes
// while their layout stays: a program must not read pins whose values it
// would misread.
const pinFormat = 2

// flowLayout identifies the format and the layout of the pinned maps' keys
// and values.
var flowLayout = layoutDigest(pinFormat, m2hoFlowKey{}, m2hoFlowBucket{}, m2hoPolicy{})

// layoutDigest hashes the format and the names, offsets and types of the
// values' fields, recursively.
func layoutDigest(format int, values ...any) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "format %d;", format)
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
		describe(reflect.TypeOf(v))
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

// pinDir is a pin directory this process holds. The lock keeps a second
// datapath off the same directory: it would take the first one's flows for
// its own, and whichever closed first would unpin them under the other.
// The kernel drops the lock with the process, however it ends.
type pinDir struct {
	path string
	lock *os.File
}

// openPinDir makes and locks the pin directory. Pinning only carries flows
// over a restart, and the datapath works all the same without it, so a
// directory that cannot be made, opened or locked, or lies off a BPF
// filesystem, leaves everything unpinned (nil) with a warning. A directory
// another process holds is an error.
func openPinDir(path string, logger *slog.Logger) (*pinDir, error) {
	if path == "" {
		return nil, nil
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		logger.Warn("cannot create the pin directory: "+unpinnedConsequence, "dir", path, "err", err)
		return nil, nil
	}
	if bpffs, err := isBPFFS(path); err != nil || !bpffs {
		logger.Warn("pin directory is not on a BPF filesystem: "+unpinnedConsequence, "dir", path, "err", err)
		return nil, nil
	}
	lock, err := os.Open(path)
	if err != nil {
		logger.Warn("cannot open the pin directory: "+unpinnedConsequence, "dir", path, "err", err)
		return nil, nil
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrPinDirInUse, path)
		}
		logger.Warn("cannot lock the pin directory: "+unpinnedConsequence, "dir", path, "err", err)
		return nil, nil
	}
	return &pinDir{path: path, lock: lock}, nil
}

// unpinnedConsequence ends every warning about a datapath left unpinned.
const unpinnedConsequence = "flows will not survive a restart"

// prepare sets spec up to load its flow state pinned in the directory: it
// takes over a complete set of pins of the same layout, giving the
// programs the seed the flows were placed with, and otherwise removes
// whatever is there so that the load pins a fresh set. It says whether it
// takes over.
func (p *pinDir) prepare(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions, logger *slog.Logger) (takeover bool, err error) {
	for _, name := range pinnedMaps {
		spec.Maps[name].Pinning = ebpf.PinByName
	}
	opts.Maps.PinPath = p.path
	meta, err := readPinMeta(p.path)
	switch {
	case err == nil && meta.Layout == flowLayout:
		if err := spec.Variables[m2hoVarCfgFlowHashSeed].Set(meta.HashSeed); err != nil {
			return false, fmt.Errorf("datapath: set %s: %w", m2hoVarCfgFlowHashSeed, err)
		}
		return true, nil
	case err == nil:
		logger.Info("pinned flows have another layout: starting afresh", "dir", p.path)
	case !errors.Is(err, os.ErrNotExist):
		logger.Warn("pinned flows unreadable: starting afresh", "dir", p.path, "err", err)
	}
	return false, removePins(p.path)
}

// release lets go of the directory. With unpin, as when the datapath
// closes normally, the pins go too, and the directory once it is empty, so
// that no flow state outlives the datapath. Without, as when a load fails,
// they stay for the next process: a set without its description, pinned
// last, is replaced.
func (p *pinDir) release(unpin bool) error {
	if p == nil {
		return nil
	}
	var err error
	if unpin {
		err = removePins(p.path)
		if rmErr := os.Remove(p.path); err == nil && rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) && !errors.Is(rmErr, unix.ENOTEMPTY) {
			err = fmt.Errorf("datapath: remove pin directory: %w", rmErr)
		}
	}
	return errors.Join(err, p.lock.Close())
}

// readPinMeta reads the pinned set's description.
func readPinMeta(dir string) (pinMeta, error) {
	var meta pinMeta
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinMetaName), nil)
	if err != nil {
		return meta, err
	}
	defer m.Close()
	if err := m.Lookup(uint32(0), &meta); err != nil {
		return meta, fmt.Errorf("read %s: %w", pinMetaName, err)
	}
	return meta, nil
}

// pinMetaOf pins the description of a freshly pinned set, last: until it
// exists, the next load starts afresh.
func pinMetaOf(dir string, spec *ebpf.CollectionSpec) error {
	meta := pinMeta{Layout: flowLayout}
	if err := spec.Variables[m2hoVarCfgFlowHashSeed].Get(&meta.HashSeed); err != nil {
		return fmt.Errorf("datapath: read %s: %w", m2hoVarCfgFlowHashSeed, err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: pinMetaName, Type: ebpf.Array, KeySize: 4, ValueSize: uint32(binary.Size(meta)), MaxEntries: 1,
	})
	if err != nil {
		return fmt.Errorf("datapath: create %s: %w", pinMetaName, err)
	}
	defer m.Close()
	if err := m.Update(uint32(0), meta, ebpf.UpdateAny); err != nil {
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
