package emu

import (
	"errors"
	"io"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
)

// DIAGPortFlush is the testbed's default Config.DiagFlush: how often a
// DIAG port hands the host the log packets its modem buffered, as
// BenchmarkOverheadDownloadRBAlloc (test/e2e) models it (docs/testbed.md).
const DIAGPortFlush = 50 * time.Millisecond

// errTooLarge refuses an event that no datagram m2hod accepts could hold.
var errTooLarge = errors.New("encoded event exceeds diag.MaxDatagram")

// diagFeed sends the link's diag events to m2hod's datagram input. With a
// period, it coalesces rb_alloc events into newline-separated datagrams of
// at most diag.MaxDatagram bytes, written at the period's boundaries (from
// the run's start), the way a DIAG port delivers log packets many per
// read: the wake-ups of the daemon, not the events, are what the stream
// costs it. Any other event goes out at once, with the rb_alloc events
// queued before it: the scenario's leads are when the daemon learns of a
// report or a command, and a batch's delay on top of them would move
// every handover's outcome, not only the daemon's cost. Without a period
// each event is a datagram of its own.
//
// Only the emulator's scheduler goroutine uses it.
type diagFeed struct {
	conn   io.Writer
	encode func(diag.Event) ([]byte, error)
	period time.Duration
	// lost is told of n events that were not sent.
	lost func(n int, err error)

	// buf holds the encoded events of the next datagram, events of them.
	buf    []byte
	events int
	// next is the boundary at which buf is written, in time since the
	// run's start.
	next time.Duration
}

// send queues the events the link produced by now (time since the run's
// start) and writes what is due.
func (f *diagFeed) send(evs []diag.Event, now time.Duration) {
	if f.events == 0 && f.period > 0 {
		// Nothing waits: the next datagram leaves at the first boundary
		// from now.
		f.next = (now + f.period - 1) / f.period * f.period
	}
	urgent := false
	for _, ev := range evs {
		f.queue(ev)
		urgent = urgent || ev.Type != diag.TypeRBAlloc
	}
	if f.period <= 0 || urgent || now >= f.next {
		f.flush()
	}
}

// due is when the queued events must be written, if any are queued.
func (f *diagFeed) due() (time.Duration, bool) {
	return f.next, f.events > 0
}

// queue appends an event to the datagram under way, first writing that
// datagram when the event would take it past diag.MaxDatagram.
func (f *diagFeed) queue(ev diag.Event) {
	raw, err := f.encode(ev)
	if err == nil && len(raw) > diag.MaxDatagram {
		err = errTooLarge
	}
	if err != nil {
		f.lost(1, err)
		return
	}
	if f.events > 0 && len(f.buf)+1+len(raw) > diag.MaxDatagram {
		f.flush()
	}
	if f.events > 0 {
		f.buf = append(f.buf, '\n')
	}
	f.buf = append(f.buf, raw...)
	f.events++
	if f.period <= 0 {
		f.flush()
	}
}

// flush writes the queued events as one datagram.
func (f *diagFeed) flush() {
	if f.events == 0 {
		return
	}
	if _, err := f.conn.Write(f.buf); err != nil {
		f.lost(f.events, err)
	}
	f.buf, f.events = f.buf[:0], 0
}
