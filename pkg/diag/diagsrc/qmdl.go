package diagsrc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
)

// record describes one input unit (a DIAG log packet or a GSMTAP datagram)
// for the raw listing of Decode.
type record struct {
	Time time.Time
	// Kind is the log code as 0xB0C0, or the transport (gsmtap, qcsuper-nr).
	Kind    string
	Version string
	Length  int
	// RRC is set when an RRC message was lifted out of the unit.
	RRC    *diag.RRCMessage
	Events int
	// Note says why nothing was decoded (an error reason or a status).
	Note string
}

// pump turns DIAG log packets into events: RRC segments are joined, RRC
// messages decoded, and every packet optionally reported for listings.
type pump struct {
	sink    rrcSink
	joiner  qcdiag.RRCJoiner
	pacer   *pacer
	observe func(record) error
}

func newPump(opts Options, out chan<- diag.Event) *pump {
	p := &pump{sink: rrcSink{decoder: opts.RRC, stats: opts.Stats, drops: opts.drops, out: out}, observe: opts.observe}
	p.joiner.Stats = opts.Stats
	if opts.Realtime {
		p.pacer = &pacer{}
	}
	return p
}

// run reads packets until the reader fails (io.EOF at the end of a file)
// or ctx ends.
func (p *pump) run(ctx context.Context, r *qcdiag.Reader) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		pkt, err := r.Next()
		if err != nil {
			return err
		}
		if err := p.packet(ctx, pkt); err != nil {
			return err
		}
	}
}

func (p *pump) packet(ctx context.Context, pkt qcdiag.LogPacket) error {
	if p.pacer != nil {
		if err := p.pacer.wait(ctx, pkt.Time); err != nil {
			return err
		}
	}
	var rec record
	msg, ok, err := p.joiner.Add(pkt)
	switch {
	case err != nil:
		rec.Note = diag.ErrorReason(err, qcdiag.ReasonMalformedRRC)
		// The reader has counted unknown versions already.
		if errors.Is(err, qcdiag.ErrUnknownVersion) {
			p.sink.drops.note(rec.Note)
		} else {
			p.sink.drop(rec.Note)
		}
	case ok:
		rec.RRC = &msg
		n, err := p.sink.deliver(ctx, msg)
		if err != nil {
			return err
		}
		rec.Events = n
	case pkt.Layout == qcdiag.LayoutKnown:
		rec.Note = "not_rrc_for_m2ho"
	case pkt.Layout == qcdiag.LayoutUnknownCode:
		rec.Note = "unknown_code"
	}
	if p.observe == nil {
		return nil
	}
	rec.Time, rec.Kind, rec.Length = pkt.Time, fmt.Sprintf("0x%04X", pkt.Code), len(pkt.Payload)
	rec.Version = fmt.Sprintf("v%d", pkt.Version)
	if pkt.Layout == qcdiag.LayoutUnknownCode {
		rec.Version = "-"
	}
	return p.observe(rec)
}

// maxReplayGap caps one wait of a paced replay, so that a capture paused
// for hours, or a corrupt timestamp, does not stall it.
const maxReplayGap = 10 * time.Second

// pacer sleeps so that items are released at the pace of their
// timestamps; time going backwards releases at once.
type pacer struct {
	wallStart, first, last time.Time
}

func (p *pacer) wait(ctx context.Context, t time.Time) error {
	if p.first.IsZero() {
		p.wallStart, p.first, p.last = time.Now(), t, t
		return nil
	}
	if gap := t.Sub(p.last); gap > maxReplayGap {
		p.first = p.first.Add(gap - maxReplayGap)
	}
	if t.After(p.last) {
		p.last = t
	}
	d := time.Until(p.wallStart.Add(t.Sub(p.first)))
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// counterSet sums the counters of the readers a source used.
type counterSet struct {
	mu   sync.Mutex
	done qcdiag.Counters
	cur  *qcdiag.Reader
}

func (c *counterSet) attach(r *qcdiag.Reader) {
	c.mu.Lock()
	c.cur = r
	c.mu.Unlock()
}

func (c *counterSet) detach() {
	c.mu.Lock()
	if c.cur != nil {
		c.done = c.done.Add(c.cur.Counters())
		c.cur = nil
	}
	c.mu.Unlock()
}

func (c *counterSet) snapshot() qcdiag.Counters {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return c.done
	}
	return c.done.Add(c.cur.Counters())
}

// QMDLSource replays a recorded DIAG stream.
type QMDLSource struct {
	name, path string
	opts       Options
	counters   counterSet
}

func newQMDLSource(name, path string, opts Options) (*QMDLSource, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("diag input %s: %w", name, err)
	}
	return &QMDLSource{name: name, path: path, opts: opts}, nil
}

// Name returns the URI the source was opened from.
func (s *QMDLSource) Name() string { return s.name }

// Counters are the DIAG framing counts of the replay so far.
func (s *QMDLSource) Counters() qcdiag.Counters { return s.counters.snapshot() }

// Run replays the file once and returns nil at its end.
func (s *QMDLSource) Run(ctx context.Context, out chan<- diag.Event) error {
	f, err := openInput(ctx, s.path)
	if err != nil {
		return openError(ctx, s.name, err)
	}
	defer f.Close()
	return s.replay(ctx, f, out)
}

func (s *QMDLSource) replay(ctx context.Context, r io.Reader, out chan<- diag.Event) error {
	reader := qcdiag.NewReader(r, s.opts.Stats)
	s.counters.attach(reader)
	defer s.counters.detach()
	defer s.opts.drops.flush()
	err := newPump(s.opts, out).run(ctx, reader)
	if errors.Is(err, io.EOF) {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		// A read interrupted by the end of ctx fails with its own error.
		return ctxErr
	}
	return fmt.Errorf("diag %s: %w", s.name, err)
}
