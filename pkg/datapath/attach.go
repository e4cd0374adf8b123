package datapath

import (
	"errors"
	"fmt"
	"math"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// attachment is how the programs are hooked to the interface.
type attachment interface {
	mode() string
	// detach removes exactly what the attachment added.
	detach() error
	// forget releases what the attachment holds once its interface is
	// gone, with the hooks on it.
	forget() error
}

// attach hooks ingress and egress with TCX, or with clsact + cls_bpf when
// TCX is not available (kernels before 6.6) or mode asks for it.
func attach(ifindex int, mode string, ingress, egress *ebpf.Program) (attachment, error) {
	if mode != AttachClsact {
		att, err := attachTCX(ifindex, ingress, egress)
		if err == nil {
			return att, nil
		}
		if mode == AttachTCX || !errors.Is(err, ebpf.ErrNotSupported) {
			return nil, err
		}
	}
	att, err := attachClsact(ifindex, ingress, egress)
	if err != nil {
		return nil, err
	}
	return att, nil
}

type tcxAttachment struct {
	links []link.Link
}

func attachTCX(ifindex int, ingress, egress *ebpf.Program) (*tcxAttachment, error) {
	att := &tcxAttachment{}
	for _, hook := range []struct {
		prog *ebpf.Program
		kind ebpf.AttachType
	}{{ingress, ebpf.AttachTCXIngress}, {egress, ebpf.AttachTCXEgress}} {
		l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: hook.prog, Attach: hook.kind})
		if err != nil {
			return nil, errors.Join(fmt.Errorf("tcx %s: %w", hook.kind, err), att.detach())
		}
		att.links = append(att.links, l)
	}
	return att, nil
}

func (a *tcxAttachment) mode() string { return AttachTCX }

// forget closes the links, which the kernel has already detached.
func (a *tcxAttachment) forget() error { return a.detach() }

func (a *tcxAttachment) detach() error {
	var errs []error
	for _, l := range a.links {
		errs = append(errs, l.Close())
	}
	a.links = nil
	return errors.Join(errs...)
}

// clsactAttachment remembers what it created so that detach removes only
// that: its two filters, and the clsact qdisc if it created it and no one
// else has added filters to it since.
type clsactAttachment struct {
	nl           *netlink.Handle
	ifindex      int
	filters      []*netlink.BpfFilter
	createdQdisc *netlink.GenericQdisc
	namespace    netns.NsHandle
}

// clsactFirstPriority is where the search for a free filter priority starts:
// high numbers run after the filters other tools install at low ones.
const clsactFirstPriority = 0xc000

func attachClsact(ifindex int, ingress, egress *ebpf.Program) (*clsactAttachment, error) {
	// Bind netlink to the current thread's namespace so that detach works
	// from any goroutine.
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("current network namespace: %w", err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("netlink: %w", err)
	}
	att := &clsactAttachment{nl: h, ifindex: ifindex, namespace: ns}
	if err := att.ensureQdisc(); err != nil {
		return nil, errors.Join(err, att.detach())
	}
	for _, hook := range []struct {
		prog   *ebpf.Program
		parent uint32
		name   string
	}{{ingress, netlink.HANDLE_MIN_INGRESS, "m2ho_ingress"}, {egress, netlink.HANDLE_MIN_EGRESS, "m2ho_egress"}} {
		prio, err := att.freePriority(hook.parent)
		if err != nil {
			return nil, errors.Join(err, att.detach())
		}
		filter := &netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{
				LinkIndex: ifindex,
				Parent:    hook.parent,
				Handle:    1,
				Protocol:  unix.ETH_P_ALL,
				Priority:  prio,
			},
			Fd:           hook.prog.FD(),
			Name:         hook.name,
			DirectAction: true,
		}
		if err := h.FilterAdd(filter); err != nil {
			return nil, errors.Join(fmt.Errorf("add cls_bpf filter %s: %w", hook.name, err), att.detach())
		}
		att.filters = append(att.filters, filter)
	}
	return att, nil
}

func (a *clsactAttachment) ensureQdisc() error {
	link, err := a.nl.LinkByIndex(a.ifindex)
	if err != nil {
		return fmt.Errorf("interface %d: %w", a.ifindex, err)
	}
	qdiscs, err := a.nl.QdiscList(link)
	if err != nil {
		return fmt.Errorf("list qdiscs: %w", err)
	}
	for _, q := range qdiscs {
		if q.Type() == "clsact" {
			return nil
		}
	}
	qdisc := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: a.ifindex,
			Handle:    netlink.MakeHandle(0xffff, 0),
			Parent:    netlink.HANDLE_CLSACT,
		},
		QdiscType: "clsact",
	}
	if err := a.nl.QdiscAdd(qdisc); err != nil {
		return fmt.Errorf("add clsact qdisc: %w", err)
	}
	a.createdQdisc = qdisc
	return nil
}

func (a *clsactAttachment) filtersAt(parent uint32) ([]netlink.Filter, error) {
	link, err := a.nl.LinkByIndex(a.ifindex)
	if err != nil {
		return nil, fmt.Errorf("interface %d: %w", a.ifindex, err)
	}
	filters, err := a.nl.FilterList(link, parent)
	if err != nil {
		return nil, fmt.Errorf("list filters: %w", err)
	}
	return filters, nil
}

func (a *clsactAttachment) freePriority(parent uint32) (uint16, error) {
	filters, err := a.filtersAt(parent)
	if err != nil {
		return 0, err
	}
	used := map[uint16]bool{}
	for _, f := range filters {
		used[f.Attrs().Priority] = true
	}
	for prio := clsactFirstPriority; prio <= math.MaxUint16; prio++ {
		if !used[uint16(prio)] {
			return uint16(prio), nil
		}
	}
	return 0, errors.New("no free tc filter priority")
}

func (a *clsactAttachment) mode() string { return AttachClsact }

// forget closes the netlink handle: the filters and the qdisc went with
// the interface.
func (a *clsactAttachment) forget() error {
	a.filters, a.createdQdisc = nil, nil
	return a.detach()
}

func (a *clsactAttachment) detach() error {
	var errs []error
	for _, f := range a.filters {
		if err := a.nl.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete filter %s: %w", f.Name, err))
		}
	}
	a.filters = nil
	if a.createdQdisc != nil {
		errs = append(errs, a.removeQdiscIfUnused())
		a.createdQdisc = nil
	}
	a.nl.Close()
	a.namespace.Close()
	return errors.Join(errs...)
}

// removeQdiscIfUnused deletes the clsact qdisc this attachment created,
// unless someone else's filters now live on it.
func (a *clsactAttachment) removeQdiscIfUnused() error {
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		filters, err := a.filtersAt(parent)
		if err != nil {
			return err
		}
		if len(filters) > 0 {
			return nil
		}
	}
	if err := a.nl.QdiscDel(a.createdQdisc); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete clsact qdisc: %w", err)
	}
	return nil
}

// detached is the attachment of a datapath not (or no longer) attached: loaded for BPF_PROG_RUN, or before Open attaches it.
type detached struct{}

func (detached) mode() string  { return AttachNone }
func (detached) detach() error { return nil }
func (detached) forget() error { return nil }
