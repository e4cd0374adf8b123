package rrc

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
)

// Follow selects the SIM subscription of a multi-SIM modem whose events
// a Subscriptions decoder passes on.
type Follow struct {
	// Auto follows the subscription that carries the modem's data, judged
	// by its connected-mode signalling; Subscription is the one followed
	// until another clearly carries more.
	Auto         bool
	Subscription uint8
}

// FollowAuto is the default: subscription 0 until another one carries the
// data.
var FollowAuto = Follow{Auto: true}

// ParseFollow reads "auto" or a subscription index (0 for the first SIM).
func ParseFollow(s string) (Follow, error) {
	if s == "auto" {
		return FollowAuto, nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return Follow{}, fmt.Errorf("subscription %q: want auto or an index from 0 (first SIM) to 255", s)
	}
	return Follow{Subscription: uint8(n)}, nil
}

func (f Follow) String() string {
	if f.Auto {
		return "auto"
	}
	return strconv.Itoa(int(f.Subscription))
}

// Automatic following: a subscription carries the data when it exchanged
// more than dataShare times the dedicated RRC messages of the one followed
// within dataWindow of modem time, and at least dataMinMessages. A
// subscription in a data session keeps its connection and exchanges
// measurement reports and reconfigurations all along; the other SIM of a
// dual-SIM modem connects only for short signalling (registration, SMS).
const (
	dataWindow      = time.Minute
	dataShare       = 2
	dataMinMessages = 10
)

// Subscriptions decodes the RRC messages of a multi-SIM modem: each
// subscription has its own Decoder, so that one SIM's measurement
// configuration never resolves the other's reports, and only the events
// of the followed subscription are returned. It is safe for concurrent
// use (Status is read while messages are decoded).
type Subscriptions struct {
	logger *slog.Logger

	mu       sync.Mutex
	auto     bool
	followed uint8
	subs     map[uint8]*subscription
	// reportSeen is told of the followed subscription's measurement
	// reports (ObserveReports).
	reportSeen func(ReportSeen)
	// reports are those of the message being decoded, passed on once it
	// is known whether its subscription is the one followed.
	reports []ReportSeen
}

type subscription struct {
	decoder *Decoder
	// dedicated are the times of recent dedicated (DCCH) messages, oldest
	// first, for automatic following.
	dedicated     []time.Time
	messages      uint64
	events        uint64
	droppedEvents uint64
}

// NewSubscriptions returns a decoder that follows the subscription f
// selects.
func NewSubscriptions(logger *slog.Logger, f Follow) *Subscriptions {
	if logger == nil {
		logger = slog.Default()
	}
	return &Subscriptions{logger: logger, auto: f.Auto, followed: f.Subscription, subs: map[uint8]*subscription{}}
}

var _ diag.RRCDecoder = (*Subscriptions)(nil)

// Decode decodes msg with the decoder of its subscription and returns its
// events when that subscription is the one followed. Errors are those of
// Decoder.Decode, whichever the subscription.
func (s *Subscriptions) Decode(msg diag.RRCMessage) ([]diag.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[msg.Subscription]
	if !ok {
		sub = &subscription{decoder: NewDecoder(s.logger.With("subscription", msg.Subscription))}
		sub.decoder.ObserveReports(func(r ReportSeen) { s.reports = append(s.reports, r) })
		s.subs[msg.Subscription] = sub
		if len(s.subs) > 1 {
			s.logger.Info("rrc: modem with several SIM subscriptions; their RRC states are kept apart",
				"subscription", msg.Subscription, "followed", s.followed, "auto", s.auto)
		}
	}
	sub.messages++
	s.reports = s.reports[:0]
	events, err := sub.decoder.Decode(msg)
	if s.auto && isDedicated(msg.Channel) && s.noteDedicated(msg.Subscription, sub, msg.Time) {
		// The network event of the subscription now followed went by
		// while it was not.
		if n := sub.decoder.Network(); n != "" && !slices.ContainsFunc(events, func(ev diag.Event) bool { return ev.Type == diag.TypeNetwork }) {
			events = append([]diag.Event{{Type: diag.TypeNetwork, Time: msg.Time, PLMN: n}}, events...)
		}
	}
	if msg.Subscription != s.followed {
		sub.droppedEvents += uint64(len(events))
		return nil, err
	}
	sub.events += uint64(len(events))
	if s.reportSeen != nil {
		for _, r := range s.reports {
			s.reportSeen(r)
		}
	}
	return events, err
}

// ObserveReports makes Decode call fn with every measurement report of
// the followed subscription, as Decoder.ObserveReports does (nil: none).
// Reports of the other subscriptions are left out with their events.
func (s *Subscriptions) ObserveReports(fn func(ReportSeen)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reportSeen = fn
}

func isDedicated(ch diag.RRCChannel) bool {
	switch ch {
	case diag.ChannelDLDCCH, diag.ChannelULDCCH, diag.ChannelRRCReconfiguration, diag.ChannelRRCReconfigurationComplete:
		return true
	}
	return false
}

// noteDedicated records a dedicated message of sub at t and switches to sub
// when it carries the data rather than the one followed; it reports
// whether it switched.
func (s *Subscriptions) noteDedicated(index uint8, sub *subscription, t time.Time) bool {
	sub.dedicated = append(sub.dedicated, t)
	mine := sub.recentDedicated(t)
	if index == s.followed {
		return false
	}
	theirs := 0
	if followed, ok := s.subs[s.followed]; ok {
		theirs = followed.recentDedicated(t)
	}
	if mine >= dataMinMessages && mine > dataShare*theirs {
		s.logger.Info("rrc: following the subscription that carries the data", "subscription", index, "was", s.followed,
			"dedicated_messages", mine, "of_followed", theirs, "window", dataWindow)
		s.followed = index
		return true
	}
	return false
}

// recentDedicated forgets the dedicated messages older than dataWindow
// before now and counts the others.
func (sub *subscription) recentDedicated(now time.Time) int {
	cut := 0
	for cut < len(sub.dedicated) && now.Sub(sub.dedicated[cut]) > dataWindow {
		cut++
	}
	sub.dedicated = slices.Delete(sub.dedicated, 0, cut)
	return len(sub.dedicated)
}

// SubscriptionStatus is what a Subscriptions decoder says in /status.
type SubscriptionStatus struct {
	// Followed is the subscription whose events are passed on; Auto
	// whether it is chosen automatically.
	Followed uint8 `json:"followed"`
	Auto     bool  `json:"auto"`
	// Seen lists the subscriptions that sent RRC messages.
	Seen []SubscriptionCounts `json:"seen"`
}

// SubscriptionCounts are the RRC messages of one subscription and the
// events decoded from them, passed on or not.
type SubscriptionCounts struct {
	Subscription  uint8  `json:"subscription"`
	Messages      uint64 `json:"messages"`
	Events        uint64 `json:"events"`
	DroppedEvents uint64 `json:"dropped_events"`
}

// Status reports the subscription followed and what each one sent.
func (s *Subscriptions) Status() SubscriptionStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := SubscriptionStatus{Followed: s.followed, Auto: s.auto, Seen: []SubscriptionCounts{}}
	for i, sub := range s.subs {
		st.Seen = append(st.Seen, SubscriptionCounts{Subscription: i, Messages: sub.messages, Events: sub.events, DroppedEvents: sub.droppedEvents})
	}
	slices.SortFunc(st.Seen, func(a, b SubscriptionCounts) int { return int(a.Subscription) - int(b.Subscription) })
	return st
}
