package datapath

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/m2ho/m2ho/pkg/handshakes"
)

// adoption starts a batch of handshakes for the programs' store: those a
// scan found (adopt), on the link the programs are on, and those of
// evicted flows (add).
func (d *Datapath) adoption() *handshakeBatch {
	d.attachMu.Lock()
	mtu := d.linkMTU
	d.attachMu.Unlock()
	return &handshakeBatch{hints: d.objs.HandshakeHints, maps: &d.maps, linkMTU: mtu}
}

// Header lengths without options or extension headers.
const (
	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	tcpHeaderLen  = 20
)

// largestSegment is the payload of the largest TCP segment without
// options that a link of mtu carries, as an MSS; 0, which leaves the
// programs' default, when the MTU is unknown or cannot carry the headers.
func largestSegment(mtu int, ipv4 bool) uint16 {
	headers := ipv6HeaderLen + tcpHeaderLen
	if ipv4 {
		headers = ipv4HeaderLen + tcpHeaderLen
	}
	if mtu <= headers {
		return 0
	}
	return uint16(min(mtu-headers, 0xffff))
}

// handshakeBatchSize bounds the handshakes a handshakeBatch holds before
// it stores them.
const handshakeBatchSize = 4096

// handshakeBatch hands the programs what the handshakes of connections
// opened before they were attached settled (adopt), and those that idle
// flows leave behind when evicted (add), up to handshakeBatchSize in one
// system call, so that a scan's tens of thousands never sit in memory at
// once. The clamp of a flow whose own handshake went unseen takes the
// scale and MSS from the programs' store the first time it meets the flow
// (Counters.WScaleAdopted); without them it leaves the flow alone
// (Counters.NoWScale). A handshake that matches no flow on the link only
// takes room: the store holds as many as the flow table, and forgets the
// least recently stored to make room. Of several handshakes for one
// connection, the last stands.
type handshakeBatch struct {
	hints *ebpf.Map
	maps  *mapGuard
	// linkMTU gives the MSS of a handshake without one (see adopt).
	linkMTU int
	keys    []m2hoFlowKey
	values  []m2hoHandshakeHint
	// stored, adopted and err are the outcome so far: stored counts what
	// the store took, adopted what adopt was handed, by source.
	stored  int
	adopted map[handshakes.Source]int
	err     error
}

// adopt adds a handshake found by a scan.
//
// The MSS is the clamp's floor: the window never drops below one of the
// peer's segments. A handshake without one (conntrack keeps none) takes
// the largest segment the link carries, which bounds the peer's; the RFC
// default of 536 bytes would let a small clamp hold the window below one
// full segment and stall the sender.
func (b *handshakeBatch) adopt(h handshakes.Handshake) {
	mss := h.MSS
	if mss == 0 {
		mss = largestSegment(b.linkMTU, h.Remote.Addr().Is4())
	}
	if b.adopted == nil {
		b.adopted = map[handshakes.Source]int{}
	}
	b.adopted[h.Source]++
	key := flowKeyOf(h.Local, h.Remote)
	b.add(&key, mss, h.WScale)
}

// add adds a flow's handshake.
func (b *handshakeBatch) add(key *m2hoFlowKey, mss uint16, wscale uint8) {
	b.keys = append(b.keys, *key)
	b.values = append(b.values, m2hoHandshakeHint{Mss: mss, Wscale: wscale})
	if len(b.keys) == handshakeBatchSize {
		b.flush()
	}
}

func (b *handshakeBatch) flush() {
	if len(b.keys) == 0 {
		return
	}
	stored, err := b.store()
	b.stored += stored
	if err != nil && b.err == nil {
		b.err = fmt.Errorf("datapath: store %d handshakes: %w", len(b.keys), err)
	}
	b.keys, b.values = b.keys[:0], b.values[:0]
}

func (b *handshakeBatch) store() (int, error) {
	if err := b.maps.enter(); err != nil {
		return 0, err
	}
	defer b.maps.leave()
	return b.hints.BatchUpdate(b.keys, b.values, nil)
}

// done stores what is left and returns how many handshakes the store
// took, and the first error.
func (b *handshakeBatch) done() (int, error) {
	b.flush()
	return b.stored, b.err
}

// Handshakes under way at attach are looked for again after
// firstHandshakeRescan, then after twice as long each time, up to
// handshakeRescans times: 1 + 2 + ... + 64 s span the retransmissions of a
// SYN at Linux's defaults (tcp_syn_retries 6, a first timeout of 1 s).
const (
	firstHandshakeRescan = time.Second
	handshakeRescans     = 7
)

// adoptOpenConnections finds the connections already open when the
// programs were attached and adopts their handshakes. Connections opened
// from now on show their SYNs to the programs. A connection whose
// handshake was under way shows them its SYN or SYN-ACK only if it sends
// one again; one that completes without is found by a rescan (see
// handshakeRescan). What cannot be found or stored leaves those
// connections unclamped, nothing more, so it is logged and not returned.
func (d *Datapath) adoptOpenConnections() {
	onLink, err := d.linkSide()
	if err != nil {
		d.log.Warn("cannot tell which connections go through the modem interface: the handshakes of all are adopted", "err", err)
	}
	scanner, err := handshakes.NewScanner(onLink)
	if err != nil {
		d.log.Warn("cannot look for the handshakes of open connections", "err", err)
		return
	}
	a := d.adoptScan(scanner, nil)
	found := a.found
	level := slog.LevelInfo
	if a.scanErr != nil || a.storeErr != nil {
		level = slog.LevelWarn
	}
	d.log.Log(context.Background(), level, "adopted the handshakes of open connections", "stored", a.stored,
		"sockets", a.adopted[handshakes.FromSocket], "conntrack", a.adopted[handshakes.FromConntrack],
		"off_link", found.OffLink, "under_way", len(found.Pending), "unknown_scale", found.Unknown,
		"malformed", found.Malformed, "scan_err", a.scanErr, "store_err", a.storeErr)
	if len(found.Pending) == 0 {
		scanner.Close()
		return
	}
	d.startHandshakeRescan(scanner, found.Pending)
}

// startHandshakeRescan looks for the pending handshakes again with scanner,
// which it closes when done.
func (d *Datapath) startHandshakeRescan(scanner *handshakes.Scanner, pending []handshakes.Ends) *handshakeRescan {
	r := &handshakeRescan{d: d, scanner: scanner, pending: endsSet(pending), delay: firstHandshakeRescan}
	// A datapath closed in the meantime stops the rescan here, before its
	// timer exists; one closed later stops it through the hook.
	r.unregister = d.onClose(r.stop)
	r.mu.Lock()
	if !r.stopped {
		r.timer = time.AfterFunc(r.delay, r.run)
	}
	r.mu.Unlock()
	return r
}

// scanAdoption is the outcome of a scan and its store.
type scanAdoption struct {
	found  handshakes.Found
	stored int
	// adopted counts the handshakes handed to the store, by source.
	adopted           map[handshakes.Source]int
	scanErr, storeErr error
}

// adoptScan scans with scanner and adopts the settled handshakes of the
// connections want accepts, or of all when want is nil, in batches as the
// scan reads them.
func (d *Datapath) adoptScan(scanner *handshakes.Scanner, want func(handshakes.Ends) bool) scanAdoption {
	batch := d.adoption()
	found, scanErr := scanner.ScanEach(func(h handshakes.Handshake) {
		if want == nil || want(h.Ends()) {
			batch.adopt(h)
		}
	})
	stored, storeErr := batch.done()
	return scanAdoption{found: found, stored: stored, adopted: batch.adopted, scanErr: scanErr, storeErr: storeErr}
}

// handshakeRescan looks again for the handshakes that were under way when
// the programs were attached, and adopts those that have settled, until
// none is left under way or its rounds run out. It scans the network
// namespace the datapath was opened in, whichever thread its timer runs
// on.
type handshakeRescan struct {
	d       *Datapath
	scanner *handshakes.Scanner

	// unregister removes the close hook of a rescan that has finished, so
	// that a modem reset after another does not pile them up. It takes
	// the datapath's hook lock, which Close holds while it waits for mu
	// in stop: it is called with mu released.
	unregister func()

	mu      sync.Mutex
	timer   *time.Timer
	pending map[handshakes.Ends]bool
	delay   time.Duration
	rounds  int
	stopped bool
}

func endsSet(ends []handshakes.Ends) map[handshakes.Ends]bool {
	set := make(map[handshakes.Ends]bool, len(ends))
	for _, e := range ends {
		set[e] = true
	}
	return set
}

func (r *handshakeRescan) run() {
	if r.rescan() {
		r.unregister()
	}
}

// rescan runs one round and reports whether the rescans have finished.
func (r *handshakeRescan) rescan() (finished bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return false
	}
	r.rounds++
	a := r.d.adoptScan(r.scanner, func(e handshakes.Ends) bool { return r.pending[e] })
	stillPending := make(map[handshakes.Ends]bool, len(r.pending))
	for _, e := range a.found.Pending {
		if r.pending[e] {
			stillPending[e] = true
		}
	}
	r.pending = stillPending
	level := slog.LevelDebug
	switch {
	case a.scanErr != nil || a.storeErr != nil:
		level = slog.LevelWarn
	case a.stored > 0:
		level = slog.LevelInfo
	}
	r.d.log.Log(context.Background(), level, "adopted the handshakes that were under way at attach",
		"round", r.rounds, "stored", a.stored, "still_under_way", len(stillPending), "scan_err", a.scanErr, "store_err", a.storeErr)
	if len(stillPending) == 0 || r.rounds == handshakeRescans {
		r.finish()
		return true
	}
	r.delay *= 2
	r.timer.Reset(r.delay)
	return false
}

// stop ends the rescans; the datapath closes.
func (r *handshakeRescan) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finish()
}

func (r *handshakeRescan) finish() {
	if r.stopped {
		return
	}
	r.stopped = true
	if r.timer != nil {
		r.timer.Stop()
	}
	r.scanner.Close()
}
