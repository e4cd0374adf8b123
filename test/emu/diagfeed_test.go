package emu

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

// feedEpoch is virtual time zero of the feed tests' events, which carry
// their emission time (ms from it) as their identity.
var feedEpoch = time.Unix(1_700_000_000, 0)

// rbAt is an rb_alloc event of slots slots identified by atMS.
func rbAt(atMS, slots int) diag.Event {
	ev := diag.Event{Type: diag.TypeRBAlloc, Time: feedEpoch.Add(time.Duration(atMS) * ms), SlotDuration: 500 * time.Microsecond,
		Cell: diag.Cell{RAT: diag.RATNR, PCI: 1, ARFCN: 640000}}
	for range slots {
		ev.Slots = append(ev.Slots, diag.Slot{Given: 106, Total: 106})
	}
	return ev
}

// reportAt is a measurement report identified by atMS.
func reportAt(atMS int) diag.Event {
	return diag.Event{Type: diag.TypeMeasReport, Time: feedEpoch.Add(time.Duration(atMS) * ms), Meas: diag.EventA3,
		Serving: diag.Cell{RAT: diag.RATNR, PCI: 1, ARFCN: 640000}, Neighbor: diag.Cell{RAT: diag.RATNR, PCI: 2, ARFCN: 640000}}
}

// udpPair is a connected UDP socket on loopback, as the emulator dials
// m2hod's input, and the socket it sends to.
func udpPair(t *testing.T) (send net.Conn, recv *net.UDPConn) {
	t.Helper()
	recv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	t.Cleanup(func() { recv.Close() })
	send, err = net.Dial("udp", recv.LocalAddr().String())
	require.NoError(t, err)
	t.Cleanup(func() { send.Close() })
	return send, recv
}

// pending reads the datagrams waiting on recv. A datagram sent on
// loopback is queued before its write returns, so what is not there
// within the short deadline was not sent.
func pending(t *testing.T, recv *net.UDPConn) [][]byte {
	t.Helper()
	var out [][]byte
	buf := make([]byte, 2*diag.MaxDatagram)
	for {
		require.NoError(t, recv.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
		n, err := recv.Read(buf)
		if errors.Is(err, net.ErrClosed) || isTimeout(err) {
			return out
		}
		require.NoError(t, err)
		out = append(out, bytes.Clone(buf[:n]))
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// datagramEvents decodes a datagram's events as m2hod does: one per line.
func datagramEvents(t *testing.T, datagram []byte) []diag.Event {
	t.Helper()
	var evs []diag.Event
	for line := range bytes.SplitSeq(datagram, []byte{'\n'}) {
		ev, err := diag.ParseJSON(line)
		require.NoError(t, err, "line %q", line)
		evs = append(evs, ev)
	}
	return evs
}

// sentAt names each datagram's events by their emission time in ms.
func sentAt(t *testing.T, datagrams [][]byte) [][]int {
	t.Helper()
	var out [][]int
	for _, d := range datagrams {
		require.LessOrEqual(t, len(d), diag.MaxDatagram)
		var ids []int
		for _, ev := range datagramEvents(t, d) {
			ids = append(ids, int(ev.Time.Sub(feedEpoch)/ms))
		}
		out = append(out, ids)
	}
	return out
}

func TestDiagFeedCoalescesOnThePeriod(t *testing.T) {
	// step is one pass of the scheduler's loop at at, with the events the
	// link produced, and the datagrams the feed must have written by
	// its end (events by their emission time in ms).
	type step struct {
		at     time.Duration
		events []diag.Event
		want   [][]int
	}
	tests := []struct {
		name   string
		period time.Duration
		steps  []step
		// atEnd is what the flush at the end of the run writes.
		atEnd [][]int
	}{
		{name: "no period: one event per datagram", steps: []step{
			{at: 5 * ms, events: []diag.Event{rbAt(1, 20), rbAt(2, 20), reportAt(3)}, want: [][]int{{1}, {2}, {3}}},
			{at: 15 * ms, events: []diag.Event{rbAt(15, 20)}, want: [][]int{{15}}},
		}},
		{name: "rb_alloc waits for the period's boundary", period: 50 * ms, steps: []step{
			{at: 5 * ms, events: []diag.Event{rbAt(5, 20)}},
			{at: 15 * ms, events: []diag.Event{rbAt(15, 20)}},
			{at: 49 * ms},
			{at: 50 * ms, events: []diag.Event{rbAt(50, 20)}, want: [][]int{{5, 15, 50}}},
			{at: 60 * ms, events: []diag.Event{rbAt(60, 20)}},
			{at: 99 * ms},
			{at: 101 * ms, want: [][]int{{60}}},
		}},
		{name: "boundaries count from the run's start", period: 50 * ms, steps: []step{
			{at: 230 * ms, events: []diag.Event{rbAt(230, 20)}},
			{at: 249 * ms},
			{at: 250 * ms, want: [][]int{{230}}},
		}},
		{name: "a late pass writes at once", period: 50 * ms, steps: []step{
			{at: 40 * ms, events: []diag.Event{rbAt(40, 20)}},
			{at: 130 * ms, events: []diag.Event{rbAt(130, 20)}, want: [][]int{{40, 130}}},
			{at: 140 * ms, events: []diag.Event{rbAt(140, 20)}},
			{at: 150 * ms, want: [][]int{{140}}},
		}},
		{name: "signalling leaves at once, after the rb_alloc before it", period: 50 * ms, steps: []step{
			{at: 5 * ms, events: []diag.Event{rbAt(5, 20)}},
			{at: 12 * ms, events: []diag.Event{rbAt(10, 20), reportAt(12), rbAt(12, 20)}, want: [][]int{{5, 10, 12, 12}}},
			{at: 20 * ms, events: []diag.Event{rbAt(20, 20)}},
			{at: 50 * ms, want: [][]int{{20}}},
		}},
		{name: "the end of the run sends what waits", period: 50 * ms, steps: []step{
			{at: 5 * ms, events: []diag.Event{rbAt(5, 20)}},
			{at: 7 * ms, events: []diag.Event{rbAt(7, 20)}},
		}, atEnd: [][]int{{5, 7}}},
		{name: "the end of the run with nothing waiting sends nothing", period: 50 * ms, steps: []step{
			{at: 50 * ms, events: []diag.Event{rbAt(50, 20)}, want: [][]int{{50}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			send, recv := udpPair(t)
			lost := 0
			f := &diagFeed{conn: send, encode: diag.MarshalJSON, period: tt.period, lost: func(n int, _ error) { lost += n }}
			for _, s := range tt.steps {
				f.send(s.events, s.at)
				assert.Equal(t, s.want, sentAt(t, pending(t, recv)), "at %v", s.at)
				if at, ok := f.due(); ok {
					assert.Greater(t, at, s.at, "what waits is due later")
					assert.Zero(t, at%max(tt.period, 1), "on a boundary")
				}
			}
			f.flush()
			assert.Equal(t, tt.atEnd, sentAt(t, pending(t, recv)), "at the end")
			_, waiting := f.due()
			assert.False(t, waiting)
			assert.Zero(t, lost)
		})
	}
}

// TestDiagFeedSplitsAtMaxDatagram: events that do not fit one datagram
// go out in several, in order, each as full as the next event allows.
func TestDiagFeedSplitsAtMaxDatagram(t *testing.T) {
	tests := []struct {
		name  string
		slots int
		count int
	}{
		{name: "events of a few hundred bytes", slots: 20, count: 200},
		{name: "events of about 3 KiB", slots: 300, count: 23},
		{name: "one event that fills a datagram alone", slots: 1600, count: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			send, recv := udpPair(t)
			require.NoError(t, recv.SetReadBuffer(4<<20))
			lost := 0
			f := &diagFeed{conn: send, encode: diag.MarshalJSON, period: 50 * ms, lost: func(n int, _ error) { lost += n }}
			var evs []diag.Event
			var want []int
			for i := range tt.count {
				evs = append(evs, rbAt(i, tt.slots))
				want = append(want, i)
			}
			size, err := diag.MarshalJSON(evs[0])
			require.NoError(t, err)
			require.LessOrEqual(t, len(size), diag.MaxDatagram, "the test's events fit a datagram")
			f.send(evs, 10*ms)
			f.flush()
			datagrams := pending(t, recv)
			require.Greater(t, len(datagrams), 1, "split")
			var got []int
			for i, ids := range sentAt(t, datagrams) {
				got = append(got, ids...)
				if i+1 < len(datagrams) {
					next, err := diag.MarshalJSON(evs[len(got)])
					require.NoError(t, err)
					assert.Greater(t, len(datagrams[i])+1+len(next), diag.MaxDatagram, "datagram %d had room for the next event", i)
				}
			}
			assert.Equal(t, want, got, "every event once, in order")
			assert.Zero(t, lost)
		})
	}
}

// failingConn fails every write.
type failingConn struct{ writes int }

func (c *failingConn) Write([]byte) (int, error) {
	c.writes++
	return 0, errors.New("connection refused")
}

// TestDiagFeedCountsWhatIsNotSent: an event that does not encode or that
// no datagram could hold is lost alone; a failed write loses every event
// of its datagram.
func TestDiagFeedCountsWhatIsNotSent(t *testing.T) {
	badEncode := func(ev diag.Event) ([]byte, error) {
		if ev.Type == diag.TypeMeasReport {
			return nil, errors.New("unencodable")
		}
		return diag.MarshalJSON(ev)
	}
	tests := []struct {
		name     string
		period   time.Duration
		encode   func(diag.Event) ([]byte, error)
		events   []diag.Event
		failing  bool
		wantLost int
		wantSent [][]int
	}{
		{name: "unencodable event, batched", period: 50 * ms, encode: badEncode,
			events: []diag.Event{rbAt(1, 20), reportAt(2), rbAt(3, 20)}, wantLost: 1, wantSent: [][]int{{1, 3}}},
		{name: "unencodable event, one per datagram", encode: badEncode,
			events: []diag.Event{rbAt(1, 20), reportAt(2), rbAt(3, 20)}, wantLost: 1, wantSent: [][]int{{1}, {3}}},
		{name: "event larger than a datagram", period: 50 * ms, encode: diag.MarshalJSON,
			events: []diag.Event{rbAt(1, 20), rbAt(2, 2000), rbAt(3, 20)}, wantLost: 1, wantSent: [][]int{{1, 3}}},
		{name: "failed write, batched", period: 50 * ms, encode: diag.MarshalJSON, failing: true,
			events: []diag.Event{rbAt(1, 20), rbAt(2, 20), rbAt(3, 20)}, wantLost: 3},
		{name: "failed writes, one per datagram", encode: diag.MarshalJSON, failing: true,
			events: []diag.Event{rbAt(1, 20), rbAt(2, 20), rbAt(3, 20)}, wantLost: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			send, recv := udpPair(t)
			lost := 0
			f := &diagFeed{conn: send, encode: tt.encode, period: tt.period, lost: func(n int, err error) {
				require.Error(t, err)
				lost += n
			}}
			if tt.failing {
				f.conn = &failingConn{}
			}
			f.send(tt.events, 10*ms)
			f.flush()
			assert.Equal(t, tt.wantLost, lost)
			assert.Equal(t, tt.wantSent, sentAt(t, pending(t, recv)))
		})
	}
}

// lines splits a datagram into its records.
func lines(datagram []byte) []string {
	return strings.Split(string(datagram), "\n")
}
