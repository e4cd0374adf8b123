package datapath

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/m2ho/m2ho/pkg/handshakes"
)

// AdoptHandshakes hands the programs what the handshakes of connections
// opened before they were attached settled. The clamp of a flow whose own
// handshake went unseen takes the scale and MSS from here the first time
// it meets the flow (Counters.WScaleAdopted); without them it leaves the
// flow alone (Counters.NoWScale). A handshake that matches no flow on the
// link only takes room: the store holds as many as the flow table, and
// forgets the least recently stored to make room. The first of several
// handshakes for one connection stands. It returns how many it stored.
//
// The MSS is the clamp's floor: the window never drops below one of the
// peer's segments. A handshake without one (conntrack keeps none) takes
// the largest segment the link carries, which bounds the peer's; the RFC
// default of 536 bytes would let a small clamp hold the window below one
// full segment and stall the sender.
func (d *Datapath) AdoptHandshakes(hs []handshakes.Handshake) (int, error) {
	d.attachMu.Lock()
	mtu := d.linkMTU
	d.attachMu.Unlock()
	seen := make(map[m2hoFlowKey]bool, len(hs))
	var kept keptHandshakes
	for _, h := range hs {
		key := flowKeyOf(h.Local, h.Remote)
		if seen[key] {
			continue
		}
		seen[key] = true
		mss := h.MSS
		if mss == 0 {
			mss = largestSegment(mtu, h.Remote.Addr().Is4())
		}
		kept.add(&key, mss, h.WScale)
	}
	return d.storeHandshakes(&kept)
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

// keptHandshakes are handshakes to store, keys and values apart for a
// batch update.
type keptHandshakes struct {
	keys  []m2hoFlowKey
	hints []m2hoHandshakeHint
}

func (k *keptHandshakes) add(key *m2hoFlowKey, mss uint16, wscale uint8) {
	k.keys = append(k.keys, *key)
	k.hints = append(k.hints, m2hoHandshakeHint{Mss: mss, Wscale: wscale})
}

// storeHandshakes stores kept handshakes in one system call and returns
// how many it stored.
func (d *Datapath) storeHandshakes(kept *keptHandshakes) (int, error) {
	if len(kept.keys) == 0 {
		return 0, nil
	}
	stored, err := d.objs.HandshakeHints.BatchUpdate(kept.keys, kept.hints, nil)
	if err != nil {
		return stored, fmt.Errorf("datapath: store %d handshakes: %w", len(kept.keys), err)
	}
	return stored, nil
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
	scanner, err := handshakes.NewScanner()
	if err != nil {
		d.log.Warn("cannot look for the handshakes of open connections", "err", err)
		return
	}
	found, scanErr := scanner.Scan()
	stored, err := d.AdoptHandshakes(found.Handshakes)
	level := slog.LevelInfo
	if scanErr != nil || err != nil {
		level = slog.LevelWarn
	}
	bySource := map[handshakes.Source]int{}
	for _, h := range found.Handshakes {
		bySource[h.Source]++
	}
	d.log.Log(context.Background(), level, "adopted the handshakes of open connections", "stored", stored,
		"sockets", bySource[handshakes.FromSocket], "conntrack", bySource[handshakes.FromConntrack],
		"under_way", len(found.Pending), "unknown_scale", found.Unknown, "malformed", found.Malformed,
		"scan_err", scanErr, "store_err", err)
	if len(found.Pending) == 0 {
		scanner.Close()
		return
	}
	r := &handshakeRescan{d: d, scanner: scanner, pending: endsSet(found.Pending), delay: firstHandshakeRescan}
	// the timer's first run waits for the timer to be in place
	r.mu.Lock()
	r.timer = time.AfterFunc(r.delay, r.run)
	r.mu.Unlock()
	d.onClose(r.stop)
}

// handshakeRescan looks again for the handshakes that were under way when
// the programs were attached, and adopts those that have settled, until
// none is left under way or its rounds run out. It scans the network
// namespace the datapath was opened in, whichever thread its timer runs
// on.
type handshakeRescan struct {
	d       *Datapath
	scanner *handshakes.Scanner

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
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.rounds++
	found, scanErr := r.scanner.Scan()
	var settled []handshakes.Handshake
	for _, h := range found.Handshakes {
		if r.pending[h.Ends()] {
			settled = append(settled, h)
		}
	}
	stored, err := r.d.AdoptHandshakes(settled)
	stillPending := make(map[handshakes.Ends]bool, len(r.pending))
	for _, e := range found.Pending {
		if r.pending[e] {
			stillPending[e] = true
		}
	}
	r.pending = stillPending
	level := slog.LevelDebug
	switch {
	case scanErr != nil || err != nil:
		level = slog.LevelWarn
	case stored > 0:
		level = slog.LevelInfo
	}
	r.d.log.Log(context.Background(), level, "adopted the handshakes that were under way at attach",
		"round", r.rounds, "stored", stored, "still_under_way", len(stillPending), "scan_err", scanErr, "store_err", err)
	if len(stillPending) == 0 || r.rounds == handshakeRescans {
		r.finish()
		return
	}
	r.delay *= 2
	r.timer.Reset(r.delay)
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
	r.timer.Stop()
	r.scanner.Close()
}
