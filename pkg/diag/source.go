package diag

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Source is one diag input. Run delivers events in order until the input
// ends (a file: returns nil), ctx is cancelled (returns ctx.Err()), or the
// input fails for good (returns the error). Malformed input never ends a
// Run: it is counted in Stats with a reason and skipped.
type Source interface {
	Run(ctx context.Context, out chan<- Event) error
	// Name is the URI the source was opened from, for logs.
	Name() string
}

// BatchSource is a Source that can also deliver together the events that
// arrived together: those of one datagram. The receiver then knows which
// events a single read brought, which it needs to place rb_alloc events
// on its own clock (their slots follow each other up to the read), and it
// takes them at one channel operation. RunBatches delivers the events as
// Run does, each slice a datagram's, in order. A slice is the receiver's
// until it receives again from out: the source then reuses it, so that
// the receiver must neither keep it nor hand it on. A slice's events are
// counted in Stats before it is sent: the counts are never behind what
// the receiver did with them (a handover it counted, say).
type BatchSource interface {
	Source
	RunBatches(ctx context.Context, out chan<- []Event) error
}

// Stats counts what the inputs produced: events by type and errors by
// reason. It is shared by all sources of a daemon and read at scrape time.
// The zero value is ready to use.
type Stats struct {
	mu     sync.Mutex
	events map[Type]uint64
	errors map[string]uint64
	// lastEvent is when CountEvent was last called, in unix nanoseconds.
	lastEvent atomic.Int64
}

// CountEvent records one event of type t, now.
func (s *Stats) CountEvent(t Type) {
	s.lastEvent.Store(time.Now().UnixNano())
	s.mu.Lock()
	if s.events == nil {
		s.events = make(map[Type]uint64)
	}
	s.events[t]++
	s.mu.Unlock()
}

// countEvents records evs, now: CountEvent for a datagram's events, at
// one clock read and one lock.
func (s *Stats) countEvents(evs []Event) {
	if len(evs) == 0 {
		return
	}
	s.lastEvent.Store(time.Now().UnixNano())
	s.mu.Lock()
	if s.events == nil {
		s.events = make(map[Type]uint64)
	}
	for i := range evs {
		s.events[evs[i].Type]++
	}
	s.mu.Unlock()
}

// CountError records one input error; reason is a short stable token
// (for example "json_syntax", "crc", "unknown_log_version").
func (s *Stats) CountError(reason string) {
	s.mu.Lock()
	if s.errors == nil {
		s.errors = make(map[string]uint64)
	}
	s.errors[reason]++
	s.mu.Unlock()
}

// LastEvent is when the last event was counted; the zero time before the
// first.
func (s *Stats) LastEvent() time.Time {
	if ns := s.lastEvent.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Counter is one labelled count of a Stats snapshot.
type Counter struct {
	Label string
	Value uint64
}

// Snapshot returns the counts, each list sorted by label.
func (s *Stats) Snapshot() (events, errors []Counter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, v := range s.events {
		events = append(events, Counter{Label: string(t), Value: v})
	}
	for r, v := range s.errors {
		errors = append(errors, Counter{Label: r, Value: v})
	}
	byLabel := func(c []Counter) { sort.Slice(c, func(i, j int) bool { return c[i].Label < c[j].Label }) }
	byLabel(events)
	byLabel(errors)
	return events, errors
}

// RRCChannel is the logical channel an RRC PDU was carried on; it selects
// the ASN.1 top-level type to decode it with.
type RRCChannel uint8

// RRC logical channels (the message classes of TS 36.331 and 38.331).
const (
	ChannelUnknown RRCChannel = iota
	ChannelBCCHBCH
	ChannelBCCHDLSCH
	ChannelPCCH
	ChannelDLCCCH
	ChannelDLDCCH
	ChannelULCCCH
	ChannelULDCCH
	// ChannelRRCReconfiguration is a bare NR RRCReconfiguration (as SCAT's
	// GSMTAP v3 subtype 0x0201 and EN-DC containers carry it).
	ChannelRRCReconfiguration
	// ChannelRRCReconfigurationComplete is a bare NR
	// RRCReconfigurationComplete (GSMTAP v3 subtype 0x0202; the NR RRC OTA
	// log of an EN-DC modem records the one it tunnels through LTE).
	ChannelRRCReconfigurationComplete
)

// RRCMessage is one RRC PDU lifted out of a transport (DIAG log packet or
// GSMTAP), before ASN.1 decoding.
type RRCMessage struct {
	Time    time.Time
	RAT     RAT
	Channel RRCChannel
	// PCI and ARFCN of the cell the PDU was exchanged with, when the
	// transport says.
	PCI   uint16
	ARFCN uint32
	// PCIUnknown: the transport carries no PCI (GSMTAP v2); PCI is 0
	// then, which is also a valid PCI.
	PCIUnknown bool
	// Subscription is the SIM subscription of a multi-SIM modem the
	// message belongs to, 0 for the first (and for single-SIM modems).
	Subscription uint8
	PDU          []byte
}

// RRCDecoder turns RRC PDUs into events. It is stateful: measurement
// reports name a measId that only the earlier measConfig resolves.
type RRCDecoder interface {
	Decode(msg RRCMessage) ([]Event, error)
}
