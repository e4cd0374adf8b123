// Package datapath loads and drives the m2ho BPF programs on the modem-side
// interface: tc egress clamps the receive window and suppresses duplicate
// ACKs, tc ingress measures per-flow bytes, sequence numbers, RTT and
// downlink bursts. See bpf/m2ho.c for the packet-level behaviour.
//
// All methods are safe for concurrent use, Close included: the others
// then return ErrClosed.
package datapath

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netlink"

	"github.com/m2ho/m2ho/pkg/datapath/limits"
)

var (
	// ErrNoInterface reports that the interface given in Options does not exist.
	ErrNoInterface = errors.New("datapath: no such interface")
	// ErrUnsupported reports that the kernel cannot load or attach the
	// programs, or that the interface's link type is not handled.
	ErrUnsupported = errors.New("datapath: not supported")
	// ErrPermission reports that the kernel refused to load or attach the
	// programs for want of privileges: root, or CAP_BPF, CAP_PERFMON and
	// CAP_NET_ADMIN.
	ErrPermission = errors.New("datapath: not permitted (needs root, or CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN)")
	// ErrDeadline reports a policy deadline that is not in the future.
	ErrDeadline = errors.New("datapath: deadline not in the future")
	// ErrPinDirInUse reports that another process holds Options.PinDir.
	ErrPinDirInUse = errors.New("datapath: pin directory in use by another process")
)

// DefaultBurstGap ends a downlink burst after 1 ms without packets. 5G
// schedules in slots of 0.5 ms (sub-6 GHz, 30 kHz spacing) down to
// 0.125 ms (mmWave): the paper's burst ends with a partially allocated slot
// followed by an empty one, so two sub-6 slots of silence mark the end of a
// burst while modem and USB batching jitter, well below 1 ms, does not
// split one.
const DefaultBurstGap = time.Millisecond

// DefaultMaxFlows bounds the tracked flows when Options.MaxFlows is 0.
const DefaultMaxFlows = 65536

// MaxFlowsLimit is the largest Options.MaxFlows (limits.MaxFlows).
const MaxFlowsLimit = limits.MaxFlows

// AttachMode names how the programs are hooked to the interface.
const (
	AttachTCX    = "tcx"
	AttachClsact = "clsact"
	// AttachNone: the programs are loaded but attached nowhere, as while
	// the interface is gone.
	AttachNone = "none"
)

// Options configures Open.
type Options struct {
	// Iface is the modem-side interface, in the caller's network namespace.
	Iface string
	// BurstGap is the idle time that ends a downlink burst; 0 means
	// DefaultBurstGap.
	BurstGap time.Duration
	// MaxFlows bounds the number of tracked flows, at most MaxFlowsLimit;
	// 0 means DefaultMaxFlows.
	MaxFlows uint32
	// Logger receives attach and detach messages; nil means slog.Default().
	Logger *slog.Logger
	// Attach forces AttachTCX or AttachClsact; empty tries TCX first and
	// falls back to clsact on kernels without TCX.
	Attach string
	// PinDir, on a BPF filesystem, keeps the flow state pinned while the
	// datapath is open (see pinnedMaps): if the process dies without
	// Close, the next Open with the same directory takes the flows over.
	// Empty pins nothing.
	PinDir string
}

// Datapath is the loaded and attached set of programs on one interface.
type Datapath struct {
	objs  m2hoObjects
	table flowTable
	log   *slog.Logger
	iface string
	// rawIP is how the programs were loaded: for links without a
	// link-layer header.
	rawIP bool

	// attachMu guards the attachment, which the link follower replaces
	// when the interface goes and comes back (see followLink).
	attachMu   sync.Mutex
	attachment attachment
	// ifindex is the index of the interface the programs are attached
	// to; 0 when detached.
	ifindex int
	// linkMTU is that interface's MTU; 0 when detached.
	linkMTU int
	// pins is the directory holding the pinned flow state; nil when
	// nothing is pinned.
	pins *pinDir

	// policyMu serialises the read-modify-write of the policy map.
	policyMu sync.Mutex
	// deleteMu serialises flow deletions.
	deleteMu sync.Mutex
	// readMu allows one ReadBursts at a time.
	readMu sync.Mutex
	// ingressReads is the buffer of IngressBytes.
	ingressReads ingressReader
	// bursts is the running ReadBursts, for FlushBursts.
	bursts atomic.Pointer[burstReader]

	// maps lets Close wait for the methods using the maps.
	maps mapGuard

	// hooksMu guards closeHooks, run by Close before the maps go away.
	hooksMu    sync.Mutex
	closeHooks map[int]func()
	nextHook   int
	closed     bool

	closeOnce sync.Once
	closeErr  error
}

// Open loads the programs for opts.Iface and attaches them to its tc
// ingress and egress hooks. From then on they follow the name: should the
// interface go, they attach to the next interface of that name (see
// followLink). Open then adopts the handshakes of the connections already
// open in the caller's network namespace (see adoptOpenConnections), so
// that a clamp acts on them too.
func Open(opts Options) (*Datapath, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if opts.BurstGap == 0 {
		opts.BurstGap = DefaultBurstGap
	}
	if opts.BurstGap < 0 {
		return nil, fmt.Errorf("datapath: negative burst gap %v", opts.BurstGap)
	}
	if opts.MaxFlows == 0 {
		opts.MaxFlows = DefaultMaxFlows
	}
	if opts.MaxFlows > MaxFlowsLimit {
		return nil, fmt.Errorf("datapath: max flows %d above %d", opts.MaxFlows, MaxFlowsLimit)
	}
	switch opts.Attach {
	case "", AttachTCX, AttachClsact:
	default:
		return nil, fmt.Errorf("datapath: unknown attach mode %q", opts.Attach)
	}

	if opts.Iface == "" {
		return nil, fmt.Errorf("%w: no interface name given", ErrNoInterface)
	}
	link, err := netlink.LinkByName(opts.Iface)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil, fmt.Errorf("%w: %s", ErrNoInterface, opts.Iface)
		}
		return nil, fmt.Errorf("datapath: look up %s: %w", opts.Iface, err)
	}
	rawIP, err := linkIsRawIP(link.Attrs())
	if err != nil {
		return nil, err
	}

	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, loadFailure("memlock limit", err)
	}
	d, err := loadDatapath(rawIP, opts.BurstGap, opts.MaxFlows, opts.PinDir, logger, opts.Iface)
	if err != nil {
		return nil, err
	}
	if err := d.attachTo(link, opts.Attach); err != nil {
		_ = d.Close()
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("%w: attach to %s: %w", ErrPermission, opts.Iface, err)
		}
		return nil, fmt.Errorf("datapath: attach to %s: %w", opts.Iface, err)
	}
	logger.Info("datapath attached", "iface", opts.Iface, "mode", d.attachment.mode(), "raw_ip", rawIP,
		"burst_gap", opts.BurstGap, "max_flows", opts.MaxFlows, "pinned", d.pins != nil)
	if err := d.followLink(d.attachment.mode()); err != nil {
		logger.Warn("the programs stay on this interface even if it goes and another takes its name", "iface", opts.Iface, "err", err)
	}
	d.adoptOpenConnections()
	return d, nil
}

// attachTo hooks the programs to link, in the calling thread's network
// namespace, and records where they are. Callers other than Open hold
// attachMu.
func (d *Datapath) attachTo(link netlink.Link, mode string) error {
	att, err := attach(link.Attrs().Index, mode, d.objs.M2hoIngress, d.objs.M2hoEgress)
	if err != nil {
		return err
	}
	d.attachment, d.ifindex, d.linkMTU = att, link.Attrs().Index, link.Attrs().MTU
	return nil
}

// recordDetached records that the programs are on no interface, as
// attachTo records where they are. Callers hold attachMu.
func (d *Datapath) recordDetached() {
	d.attachment, d.ifindex, d.linkMTU = detached{}, 0, 0
}

// linkIsRawIP tells whether frames on the link start with the IP header.
// Ethernet (and loopback, which carries an Ethernet header) is framed;
// links without a hardware address (tun, ARPHRD_RAWIP modems such as rmnet
// and qmi_wwan in raw-IP mode, PPP) carry bare IP packets.
func linkIsRawIP(attrs *netlink.LinkAttrs) (bool, error) {
	switch attrs.EncapType {
	case "ether", "loopback":
		return false, nil
	}
	if len(attrs.HardwareAddr) == 0 {
		return true, nil
	}
	return false, fmt.Errorf("%w: link type %s of %s", ErrUnsupported, attrs.EncapType, attrs.Name)
}

// loadSpec reads the embedded objects and sets the load-time constants.
func loadSpec(rawIP bool, burstGap time.Duration, maxFlows uint32) (*ebpf.CollectionSpec, error) {
	spec, err := loadM2ho()
	if err != nil {
		return nil, fmt.Errorf("datapath: read embedded BPF objects: %w", err)
	}
	return configureSpec(spec, rawIP, burstGap, maxFlows)
}

// configureSpec sets the load-time constants and map sizes of spec.
func configureSpec(spec *ebpf.CollectionSpec, rawIP bool, burstGap time.Duration, maxFlows uint32) (*ebpf.CollectionSpec, error) {
	var raw uint8
	if rawIP {
		raw = 1
	}
	if err := spec.Variables[m2hoVarCfgRawIp].Set(raw); err != nil {
		return nil, fmt.Errorf("datapath: set %s: %w", m2hoVarCfgRawIp, err)
	}
	if err := spec.Variables[m2hoVarCfgBurstGapNs].Set(uint64(burstGap.Nanoseconds())); err != nil {
		return nil, fmt.Errorf("datapath: set %s: %w", m2hoVarCfgBurstGapNs, err)
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("datapath: count possible CPUs: %w", err)
	}
	if err := spec.Variables[m2hoVarCfgNrCpus].Set(uint32(cpus)); err != nil {
		return nil, fmt.Errorf("datapath: set %s: %w", m2hoVarCfgNrCpus, err)
	}
	buckets := flowTableBuckets(maxFlows)
	if err := spec.Variables[m2hoVarCfgFlowBucketMask].Set(buckets - 1); err != nil {
		return nil, fmt.Errorf("datapath: set %s: %w", m2hoVarCfgFlowBucketMask, err)
	}
	var seed [8]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("datapath: flow hash seed: %w", err)
	}
	if err := spec.Variables[m2hoVarCfgFlowHashSeed].Set(binary.NativeEndian.Uint64(seed[:])); err != nil {
		return nil, fmt.Errorf("datapath: set %s: %w", m2hoVarCfgFlowHashSeed, err)
	}
	spec.Maps[m2hoMapFlowIndex].MaxEntries = maxFlows
	spec.Maps[m2hoMapFlowTable].MaxEntries = buckets
	spec.Maps[m2hoMapHandshakeHints].MaxEntries = maxFlows + uint32(cpus)*lruLocalFreeTarget
	return spec, nil
}

// lruLocalFreeTarget is how many free entries each CPU of a BPF LRU hash
// takes from the map's common free list at once (kernel/bpf/bpf_lru_list.c,
// LOCAL_FREE_TARGET). Entries one CPU holds free are not free to another,
// so a map of n entries filled by a writer that moves between CPUs evicts
// before it holds n: storing the handshakes of 65,536 downloads in a map
// of as many lost 128 of them in about half the runs on two CPUs. The
// handshake hints get that much room per CPU beyond the flows they serve.
const lruLocalFreeTarget = 128

// loadDatapath loads the objects and maps the flow table, attached nowhere.
func loadDatapath(rawIP bool, burstGap time.Duration, maxFlows uint32, pinPath string, logger *slog.Logger, iface string) (*Datapath, error) {
	pins, err := openPinDir(pinPath, logger)
	if err != nil {
		return nil, err
	}
	objs, takeover, err := load(rawIP, burstGap, maxFlows, pins, logger)
	if err != nil && pins != nil {
		// Pins that cannot be taken over, removed or made must not cost
		// the datapath itself: load again without them. Whatever they
		// left stays for the next process, which replaces a set without
		// its description.
		logger.Warn("cannot use the pin directory: "+unpinnedConsequence, "dir", pins.path, "err", err)
		if releaseErr := pins.release(false); releaseErr != nil {
			logger.Warn("releasing the pin directory", "dir", pins.path, "err", releaseErr)
		}
		pins = nil
		objs, takeover, err = load(rawIP, burstGap, maxFlows, nil, logger)
	}
	if err != nil {
		return nil, err
	}
	table, err := mapFlowTable(objs.FlowTable)
	if err != nil {
		objs.Close()
		return nil, errors.Join(err, pins.release(false))
	}
	d := &Datapath{objs: objs, table: table, attachment: detached{}, log: logger, iface: iface, rawIP: rawIP, pins: pins}
	if takeover {
		d.releaseRetired()
		flows, err := d.Flows()
		logger.Info("took over pinned flows", "dir", pins.path, "flows", len(flows), "err", err)
	}
	return d, nil
}

// releaseRetired frees the slots that a process retired and died before
// releasing (see deleteFlows).
func (d *Datapath) releaseRetired() {
	retired := d.table.retiredSlots()
	if len(retired) == 0 {
		return
	}
	waitForProgramRuns()
	for _, slot := range retired {
		d.table.release(slot)
	}
	d.log.Info("freed flow table slots whose release a process left unfinished", "slots", len(retired))
}

// loadFailure wraps a failure to load the programs: ErrPermission when
// the kernel refused it for want of privileges, ErrUnsupported otherwise.
func loadFailure(what string, err error) error {
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("%w: %s: %w", ErrPermission, what, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrUnsupported, what, err)
}

// load loads the objects, with their flow state pinned in pins when set.
// Pinned maps that no longer fit (another max_flows) are replaced. It says
// whether it took over pinned flows.
func load(rawIP bool, burstGap time.Duration, maxFlows uint32, pins *pinDir, logger *slog.Logger) (m2hoObjects, bool, error) {
	for {
		var objs m2hoObjects
		spec, err := loadSpec(rawIP, burstGap, maxFlows)
		if err != nil {
			return objs, false, err
		}
		var opts ebpf.CollectionOptions
		takeover := false
		if pins != nil {
			if takeover, err = pins.prepare(spec, &opts, logger); err != nil {
				return objs, false, err
			}
		}
		err = spec.LoadAndAssign(&objs, &opts)
		if takeover && errors.Is(err, ebpf.ErrMapIncompatible) {
			logger.Info("pinned flows do not fit this table: starting afresh", "dir", pins.path, "err", err)
			if err := removePins(pins.path); err != nil {
				return objs, false, err
			}
			continue
		}
		if err != nil {
			var verr *ebpf.VerifierError
			if errors.As(err, &verr) {
				return objs, false, fmt.Errorf("%w: verifier rejected the programs: %+v", ErrUnsupported, verr)
			}
			return objs, false, loadFailure("load BPF objects", err)
		}
		if pins != nil && !takeover {
			if err := pinMetaOf(pins.path, spec); err != nil {
				objs.Close()
				return objs, false, err
			}
		}
		return objs, takeover, nil
	}
}

// AttachMode returns AttachTCX or AttachClsact; AttachNone while the
// interface is gone.
func (d *Datapath) AttachMode() string {
	d.attachMu.Lock()
	defer d.attachMu.Unlock()
	return d.attachment.mode()
}

// Close detaches the programs (only what Open attached), removes the
// pinned flow state and frees the maps. It is idempotent, and so is
// CloseKeepingFlows: whichever comes first closes.
func (d *Datapath) Close() error { return d.close(true) }

// CloseKeepingFlows is Close for a restart: the pinned flow table, flow
// index and policy stay, for the next Open with the same PinDir to take
// over, as after a crash. Without pins it is Close.
func (d *Datapath) CloseKeepingFlows() error { return d.close(false) }

func (d *Datapath) close(unpin bool) error {
	d.closeOnce.Do(func() {
		d.hooksMu.Lock()
		for _, hook := range d.closeHooks {
			hook()
		}
		d.closeHooks = nil
		d.closed = true
		d.hooksMu.Unlock()
		d.attachMu.Lock()
		detachErr := d.attachment.detach()
		d.recordDetached()
		d.attachMu.Unlock()
		d.maps.close()
		d.closeErr = errors.Join(detachErr, d.table.unmap(), d.pins.release(unpin), d.objs.Close())
		d.log.Info("datapath detached", "iface", d.iface, "flows_kept_pinned", !unpin && d.pins != nil, "error", d.closeErr)
	})
	return d.closeErr
}

// onClose registers fn to run when the datapath closes; the returned
// function unregisters it.
func (d *Datapath) onClose(fn func()) (unregister func()) {
	d.hooksMu.Lock()
	defer d.hooksMu.Unlock()
	if d.closed {
		fn()
		return func() {}
	}
	if d.closeHooks == nil {
		d.closeHooks = map[int]func(){}
	}
	id := d.nextHook
	d.nextHook++
	d.closeHooks[id] = fn
	return func() {
		d.hooksMu.Lock()
		defer d.hooksMu.Unlock()
		delete(d.closeHooks, id)
	}
}
