package datapath

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/m2ho/m2ho/internal/nsexec"
)

// A modem that resets, crashes or is re-enumerated on its bus takes its
// interface with it, and the programs go with the interface; the one that
// comes back under the same name is a new interface. followLink keeps the
// programs on the interface of that name: it watches the namespace's
// links, forgets the attachment of an interface that is gone, and attaches
// again, as Open did, to the interface that takes its name. The maps, and
// with them the flows and the policy in force, stay as they were.
//
// Its goroutine runs until the datapath closes. It works in the network
// namespace Open ran in, whichever thread runs it.
type linkFollower struct {
	d  *Datapath
	ns netns.NsHandle
	// nl is bound to ns.
	nl *netlink.Handle
	// done closes when the datapath closes.
	done chan struct{}
}

// resubscribeDelay spaces out subscriptions after the kernel dropped one
// (its socket buffer overflowed under a burst of link messages).
const resubscribeDelay = time.Second

// followLink starts following the interface. It is called in the network
// namespace of the interface, right after the first attach.
func (d *Datapath) followLink(mode string) error {
	ns, err := netns.Get()
	if err != nil {
		return fmt.Errorf("datapath: current network namespace: %w", err)
	}
	// sockets made here are in this thread's namespace, without setns
	h, err := netlink.NewHandle()
	if err != nil {
		ns.Close()
		return fmt.Errorf("datapath: netlink: %w", err)
	}
	f := &linkFollower{d: d, ns: ns, nl: h, done: make(chan struct{})}
	updates, unsubscribe, err := f.subscribe()
	if err != nil {
		h.Close()
		ns.Close()
		return err
	}
	// Close runs its hooks before it takes attachMu to detach: a
	// reconcile that found done open has attached by then, and Close
	// detaches that; one after finds done closed and attaches nothing.
	d.onClose(func() { close(f.done) })
	go f.run(mode, updates, unsubscribe)
	return nil
}

// subscribe subscribes to the link messages of the calling thread's
// namespace. The channel closes when the subscription ends: at
// unsubscribe, when the datapath closes, or on an error.
func (f *linkFollower) subscribe() (updates <-chan netlink.LinkUpdate, unsubscribe func(), err error) {
	stop := make(chan struct{})
	var once sync.Once
	unsubscribe = func() { once.Do(func() { close(stop) }) }
	go func() {
		select {
		case <-f.done:
			unsubscribe()
		case <-stop:
		}
	}()
	ch := make(chan netlink.LinkUpdate, 64)
	err = netlink.LinkSubscribeWithOptions(ch, stop, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) { f.d.log.Debug("link messages", "err", err) },
	})
	if err != nil {
		unsubscribe()
		return nil, nil, fmt.Errorf("datapath: watch the links of the namespace: %w", err)
	}
	return ch, unsubscribe, nil
}

func (f *linkFollower) run(mode string, updates <-chan netlink.LinkUpdate, unsubscribe func()) {
	defer f.ns.Close()
	defer f.nl.Close()
	for {
		// an interface that went or came between two subscriptions is
		// found by looking, not by its message
		f.reconcile(mode)
		for u := range updates {
			if u.Attrs().Name == f.d.iface || int32(u.Attrs().Index) == f.attachedIndex() {
				f.reconcile(mode)
			}
		}
		// the subscription ended: its socket goes now, not at Close
		unsubscribe()
		select {
		case <-f.done:
			return
		case <-time.After(resubscribeDelay):
		}
		err := nsexec.Run(f.ns, func() error {
			var err error
			updates, unsubscribe, err = f.subscribe()
			return err
		})
		if err != nil {
			f.d.log.Warn("cannot follow the interface: the programs stay where they are", "iface", f.d.iface, "err", err)
			<-f.done
			return
		}
	}
}

func (f *linkFollower) attachedIndex() int32 {
	f.d.attachMu.Lock()
	defer f.d.attachMu.Unlock()
	return int32(f.d.ifindex)
}

// reconcile brings the attachment in line with the namespace's links: the
// programs are on the interface that has the name, whenever one has it.
// It drops an attachment whose interface is gone or no longer has the
// name (a new interface may carry a name for a moment, until udev
// renames it), and attaches to the interface of that name when there is
// one and nothing is attached.
func (f *linkFollower) reconcile(mode string) {
	d := f.d
	d.attachMu.Lock()
	if f.closing() {
		d.attachMu.Unlock()
		return
	}
	named, err := f.nl.LinkByName(d.iface)
	var notFound netlink.LinkNotFoundError
	if err != nil && !errors.As(err, &notFound) {
		d.attachMu.Unlock()
		d.log.Warn("cannot look up the interface", "iface", d.iface, "err", err)
		return
	}
	if d.ifindex != 0 {
		if named != nil && named.Attrs().Index == d.ifindex {
			d.linkMTU = named.Attrs().MTU
			d.attachMu.Unlock()
			return
		}
		if _, err := f.nl.LinkByIndex(d.ifindex); errors.As(err, &notFound) {
			releaseErr := d.attachment.forget()
			d.log.Warn("the interface is gone: the programs wait for one of its name", "iface", d.iface,
				"ifindex", d.ifindex, "err", releaseErr)
		} else {
			detachErr := d.attachment.detach()
			d.log.Warn("the interface lost its name: the programs wait for one of that name", "iface", d.iface,
				"ifindex", d.ifindex, "err", detachErr)
		}
		d.recordDetached()
	}
	if named == nil {
		d.attachMu.Unlock()
		return
	}
	attachErr := f.attach(named, mode)
	d.attachMu.Unlock()
	if attachErr != nil {
		d.log.Error("cannot attach to the interface that took the name: the programs stay detached",
			"iface", d.iface, "ifindex", named.Attrs().Index, "err", attachErr)
		return
	}
	d.log.Info("datapath attached again", "iface", d.iface, "ifindex", named.Attrs().Index, "mode", d.AttachMode())
	// connections opened through the new interface before the attach
	if err := nsexec.Run(f.ns, func() error { d.adoptOpenConnections(); return nil }); err != nil {
		d.log.Warn("cannot look for the handshakes of open connections", "err", err)
	}
}

func (f *linkFollower) closing() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// attach hooks the programs to link, in the follower's namespace, with
// d.attachMu held.
func (f *linkFollower) attach(link netlink.Link, mode string) error {
	d := f.d
	rawIP, err := linkIsRawIP(link.Attrs())
	if err != nil {
		return err
	}
	if rawIP != d.rawIP {
		return fmt.Errorf("%w: the programs were loaded for %s frames, the interface carries %s",
			ErrUnsupported, framingName(d.rawIP), framingName(rawIP))
	}
	return nsexec.Run(f.ns, func() error { return d.attachTo(link, mode) })
}

func framingName(rawIP bool) string {
	if rawIP {
		return "raw IP"
	}
	return "Ethernet"
}
