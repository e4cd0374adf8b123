package datapath

import (
	"context"
	"fmt"
	"log/slog"

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
func (d *Datapath) AdoptHandshakes(hs []handshakes.Handshake) (int, error) {
	seen := make(map[m2hoFlowKey]bool, len(hs))
	var kept keptHandshakes
	for _, h := range hs {
		key := flowKeyOf(h.Local, h.Remote)
		if seen[key] {
			continue
		}
		seen[key] = true
		kept.add(&key, h.MSS, h.WScale)
	}
	return d.storeHandshakes(&kept)
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

// adoptOpenConnections finds the connections already open when the
// programs were attached and adopts their handshakes. Connections opened
// from now on show their SYNs to the programs. What cannot be found or
// stored leaves those connections unclamped, nothing more, so it is
// logged and not returned.
func (d *Datapath) adoptOpenConnections() {
	found, scanErr := handshakes.Scan()
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
		"unknown_scale", found.Unknown, "malformed", found.Malformed, "scan_err", scanErr, "store_err", err)
}
