package rrc

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

// onSubscription is a test vector as subscription sub sent it at t0+at,
// from the LTE cell 10 on 1300.
func onSubscription(t *testing.T, name string, sub uint8, at time.Duration) diag.RRCMessage {
	msg := vectorByName(t, name)
	msg.Time, msg.PCI, msg.ARFCN, msg.Subscription = t0.Add(at), 10, 1300, sub
	return msg
}

func TestParseFollow(t *testing.T) {
	for in, want := range map[string]Follow{"auto": FollowAuto, "0": {}, "1": {Subscription: 1}} {
		got, err := ParseFollow(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
		assert.Equal(t, in, got.String())
	}
	for _, bad := range []string{"", "-1", "256", "sim2"} {
		_, err := ParseFollow(bad)
		assert.Error(t, err, bad)
	}
}

// TestSubscriptionsKeepStatesApart: one subscription's measConfig never
// resolves another's reports, and only the followed one's events pass.
func TestSubscriptionsKeepStatesApart(t *testing.T) {
	report := []diag.Event{{Type: diag.TypeMeasReport, Time: t0.Add(3 * time.Millisecond), Meas: diag.EventA3,
		Serving: lteCell(10, 1300), Neighbor: lteCell(133, 38950)}}
	for _, follow := range []Follow{{Subscription: 0}, {Subscription: 1}} {
		t.Run("follow "+follow.String(), func(t *testing.T) {
			s := NewSubscriptions(slog.New(slog.DiscardHandler), follow)
			events, err := s.Decode(onSubscription(t, "lte_reconf_measconfig_a3", 1, time.Millisecond))
			require.NoError(t, err)
			assert.Empty(t, events)

			// Subscription 0 has no measConfig: its report is unresolved.
			events, err = s.Decode(onSubscription(t, "lte_mr_a3", 0, 2*time.Millisecond))
			assert.Equal(t, ReasonUnresolvedMeasID, diag.ErrorReason(err, ""))
			assert.Empty(t, events)

			events, err = s.Decode(onSubscription(t, "lte_mr_a3", 1, 3*time.Millisecond))
			require.NoError(t, err)
			want := SubscriptionStatus{Followed: follow.Subscription, Seen: []SubscriptionCounts{
				{Subscription: 0, Messages: 1}, {Subscription: 1, Messages: 2}}}
			if follow.Subscription == 1 {
				assert.Equal(t, report, events)
				want.Seen[1].Events = 1
			} else {
				assert.Empty(t, events)
				want.Seen[1].DroppedEvents = 1
			}
			assert.Equal(t, want, s.Status())
		})
	}
}

// TestSubscriptionsAutoFollowsData: automatic following moves to the
// subscription in a data session, not to one that signals briefly.
func TestSubscriptionsAutoFollowsData(t *testing.T) {
	s := NewSubscriptions(slog.New(slog.DiscardHandler), FollowAuto)
	at := time.Duration(0)
	send := func(sub uint8, n int) {
		for range n {
			at += 100 * time.Millisecond
			_, err := s.Decode(onSubscription(t, "lte_reconf_complete", sub, at))
			require.NoError(t, err)
		}
	}
	send(0, 4)
	send(1, 9)
	assert.Equal(t, uint8(0), s.Status().Followed, "nine messages of subscription 1 are not yet a data session")
	send(1, 1)
	assert.Equal(t, uint8(1), s.Status().Followed, "ten messages, more than twice subscription 0's")
	assert.True(t, s.Status().Auto)

	// Subscription 0 signals as much again: no switch back before it
	// clearly carries more.
	send(0, 15)
	assert.Equal(t, uint8(1), s.Status().Followed)
	// A minute later only subscription 0 is busy.
	at += 2 * time.Minute
	send(0, 10)
	assert.Equal(t, uint8(0), s.Status().Followed)
}

// TestSubscriptionsForgetOldMessages: what automatic following keeps of a
// long single-SIM session stays within the window.
func TestSubscriptionsForgetOldMessages(t *testing.T) {
	s := NewSubscriptions(slog.New(slog.DiscardHandler), FollowAuto)
	for i := range 2000 {
		_, err := s.Decode(onSubscription(t, "lte_reconf_complete", 0, time.Duration(i)*time.Second))
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, len(s.subs[0].dedicated), int(dataWindow/time.Second)+1)
}

// TestSubscriptionsFixedDoesNotMove: a configured subscription stays
// followed whatever the others do.
func TestSubscriptionsFixedDoesNotMove(t *testing.T) {
	s := NewSubscriptions(slog.New(slog.DiscardHandler), Follow{Subscription: 0})
	for i := range 50 {
		_, err := s.Decode(onSubscription(t, "lte_reconf_complete", 1, time.Duration(i)*time.Millisecond))
		require.NoError(t, err)
	}
	assert.Equal(t, uint8(0), s.Status().Followed)
	assert.False(t, s.Status().Auto)
}

// TestServingWithoutPCI: a transport without PCIs (GSMTAP v2) never
// makes a cell of PCI 0: the serving cell is unknown until a handover
// names it, stays named while the connection stays on its carrier, and is
// unknown again on another carrier or a new connection.
func TestServingWithoutPCI(t *testing.T) {
	d := NewDecoder(slog.New(slog.DiscardHandler))
	at := t0
	feed := func(ch diag.RRCChannel, arfcn uint32, s Summary) []diag.Event {
		at = at.Add(time.Millisecond)
		events, err := d.handle(diag.RRCMessage{Time: at, RAT: diag.RATLTE, Channel: ch, ARFCN: arfcn, PCIUnknown: true}, &s)
		require.NoError(t, err)
		return events
	}
	feed(diag.ChannelDLDCCH, 1300, lteReconf(Summary{MeasConfig: lteMeasSetup}))
	a3 := lteReport(1, NeighborCell{RAT: diag.RATLTE, PCI: 20})
	assert.Equal(t, []diag.Event{{Type: diag.TypeMeasReport, Time: at.Add(time.Millisecond), Meas: diag.EventA3,
		Neighbor: lteCell(20, 1300)}}, feed(diag.ChannelULDCCH, 1300, a3), "serving cell unknown, not lte/1300/0")

	ho := lteReconf(Summary{Sync: &SyncTarget{PCI: 20, HasPCI: true}})
	assert.Equal(t, []diag.Event{{Type: diag.TypeHOCommand, Time: at.Add(time.Millisecond), Kind: diag.HOPCell,
		Target: lteCell(20, 1300)}}, feed(diag.ChannelDLDCCH, 1300, ho), "intra-frequency target on the serving carrier")
	feed(diag.ChannelULDCCH, 1300, lteComplete)

	events := feed(diag.ChannelULDCCH, 1300, lteReport(1, NeighborCell{RAT: diag.RATLTE, PCI: 30}))
	require.Len(t, events, 1)
	assert.Equal(t, lteCell(20, 1300), events[0].Serving, "PCI learnt from the handover")

	// Paging, as the transport delivers it: ignored but for the cell.
	paging := func(after time.Duration) {
		at = at.Add(after)
		_, err := d.Decode(diag.RRCMessage{Time: at, RAT: diag.RATLTE, Channel: diag.ChannelPCCH, ARFCN: 1300, PCIUnknown: true, PDU: []byte{0x40}})
		require.NoError(t, err)
	}
	servingOfReport := func() diag.Cell {
		events := feed(diag.ChannelULDCCH, 1300, lteReport(1, NeighborCell{RAT: diag.RATLTE, PCI: 30}))
		require.Len(t, events, 1)
		return events[0].Serving
	}
	paging(time.Second)
	assert.Equal(t, lteCell(20, 1300), servingOfReport(), "paged while connected")
	paging(6 * time.Second)
	assert.True(t, servingOfReport().IsZero(), "paged long after the last dedicated message: idle, may have reselected")

	learn := func() {
		feed(diag.ChannelDLDCCH, 1300, lteReconf(Summary{Sync: &SyncTarget{PCI: 20, HasPCI: true}}))
		feed(diag.ChannelULDCCH, 1300, lteComplete)
		require.Equal(t, lteCell(20, 1300), servingOfReport())
	}
	learn()
	feed(diag.ChannelDLDCCH, 1300, Summary{Message: "rrcConnectionRelease"})
	paging(time.Millisecond)
	assert.True(t, servingOfReport().IsZero(), "paged after a release")

	learn()
	feed(diag.ChannelULCCCH, 1300, Summary{Message: "rrcConnectionReestablishmentRequest"})
	assert.True(t, servingOfReport().IsZero(), "re-established, perhaps on another cell")

	learn()
	at = at.Add(2 * time.Minute)
	assert.True(t, servingOfReport().IsZero(), "after a silent log")

	learn()
	at = at.Add(-2 * time.Minute)
	assert.True(t, servingOfReport().IsZero(), "after a log that jumped back")

	ho = lteReconf(Summary{Sync: &SyncTarget{PCI: 40, HasPCI: true, Carrier: 1500}})
	feed(diag.ChannelDLDCCH, 1300, ho)
	feed(diag.ChannelULDCCH, 1500, lteComplete)
	feed(diag.ChannelDLDCCH, 1500, lteReconf(Summary{MeasConfig: lteMeasSetup}))
	events = feed(diag.ChannelULDCCH, 1500, lteReport(1, NeighborCell{RAT: diag.RATLTE, PCI: 30}))
	require.Len(t, events, 1)
	assert.Equal(t, lteCell(40, 1500), events[0].Serving)
	feed(diag.ChannelBCCHDLSCH, 1800, Summary{})
	events = feed(diag.ChannelULDCCH, 1800, lteReport(1, NeighborCell{RAT: diag.RATLTE, PCI: 30}))
	require.Len(t, events, 1)
	assert.True(t, events[0].Serving.IsZero(), "another carrier, cell unknown")
}

// TestSubscriptionsObserveFollowedReports: only the followed
// subscription's reports are observed, resolved or not.
func TestSubscriptionsObserveFollowedReports(t *testing.T) {
	for _, tc := range []struct {
		follow Follow
		want   []ReportSeen
	}{
		{follow: Follow{Subscription: 0}, want: []ReportSeen{{Time: t0.Add(2 * time.Millisecond), RAT: diag.RATLTE, MeasID: 10}}},
		{follow: Follow{Subscription: 1}, want: []ReportSeen{{Time: t0.Add(3 * time.Millisecond), RAT: diag.RATLTE, MeasID: 10, Resolved: true, Event: diag.EventA3}}},
	} {
		t.Run("follow "+tc.follow.String(), func(t *testing.T) {
			s := NewSubscriptions(slog.New(slog.DiscardHandler), tc.follow)
			var seen []ReportSeen
			s.ObserveReports(func(r ReportSeen) { seen = append(seen, r) })
			_, err := s.Decode(onSubscription(t, "lte_reconf_measconfig_a3", 1, time.Millisecond))
			require.NoError(t, err)
			_, _ = s.Decode(onSubscription(t, "lte_mr_a3", 0, 2*time.Millisecond))
			_, err = s.Decode(onSubscription(t, "lte_mr_a3", 1, 3*time.Millisecond))
			require.NoError(t, err)
			assert.Equal(t, tc.want, seen)
		})
	}
}

// TestSubscriptionsNetworkOfTheFollowed: the network of a subscription
// set up while another was followed is told when it becomes the one
// followed, and only then.
func TestSubscriptionsNetworkOfTheFollowed(t *testing.T) {
	s := NewSubscriptions(slog.New(slog.DiscardHandler), FollowAuto)
	at := time.Duration(0)
	decode := func(vector string, sub uint8) []diag.Event {
		at += 100 * time.Millisecond
		events, err := s.Decode(onSubscription(t, vector, sub, at))
		require.NoError(t, err)
		return events
	}
	decode("lte_sib1_shared", 1)
	assert.Empty(t, decode("lte_setup_complete_plmn2", 1), "subscription 1 is not followed")
	for range 8 {
		assert.Empty(t, decode("lte_reconf_complete", 1))
	}
	events := decode("lte_reconf_complete", 1)
	assert.Equal(t, uint8(1), s.Status().Followed)
	require.Len(t, events, 1)
	assert.Equal(t, diag.TypeNetwork, events[0].Type)
	assert.Equal(t, "460-01", events[0].PLMN)
	assert.Empty(t, decode("lte_reconf_complete", 1), "told once")
}

// TestSubscriptionsLostCommandOfTheOther: a reconfiguration complete
// one subscription sends from another cell than its serving one, with
// nothing awaiting it, completes that subscription's handover: the
// event is passed on when it is the one followed, and the other's
// serving cell stays, so that its next complete from there is none.
func TestSubscriptionsLostCommandOfTheOther(t *testing.T) {
	handedOver := diag.Event{Type: diag.TypeHOComplete, Time: t0.Add(4 * time.Millisecond), Cell: lteCell(20, 1300)}
	for _, tc := range []struct {
		follow Follow
		want   []diag.Event
		counts []SubscriptionCounts
	}{
		{follow: Follow{Subscription: 0}, counts: []SubscriptionCounts{{Subscription: 0, Messages: 3}, {Subscription: 1, Messages: 3, DroppedEvents: 1}}},
		{follow: Follow{Subscription: 1}, want: []diag.Event{handedOver},
			counts: []SubscriptionCounts{{Subscription: 0, Messages: 3}, {Subscription: 1, Messages: 3, Events: 1}}},
	} {
		t.Run("follow "+tc.follow.String(), func(t *testing.T) {
			s := NewSubscriptions(slog.New(slog.DiscardHandler), tc.follow)
			var events []diag.Event
			for i, step := range []struct {
				vector string
				sub    uint8
				pci    uint16
			}{
				{"lte_reconf_measconfig_a3", 0, 10}, {"lte_reconf_measconfig_a3", 1, 10},
				{"lte_reconf_complete", 0, 10}, {"lte_reconf_complete", 1, 10},
				// Subscription 1 was handed over to cell 20, whose command
				// the log lost; subscription 0 stays on cell 10.
				{"lte_reconf_complete", 1, 20}, {"lte_reconf_complete", 0, 10},
			} {
				msg := onSubscription(t, step.vector, step.sub, time.Duration(i)*time.Millisecond)
				msg.PCI = step.pci
				evs, err := s.Decode(msg)
				require.NoError(t, err, "step %d", i)
				events = append(events, evs...)
			}
			assert.Equal(t, tc.want, events)
			assert.Equal(t, tc.counts, s.Status().Seen)
		})
	}
}
