// Package replay runs recorded modem signalling through m2hod's state
// machine and estimator on the recording's own clock, with no datapath,
// and judges handover prediction against what the network did. It is
// the one replay loop of m2ho: `m2hod replay`, the evaluation's
// prediction tables and the tests on real captures all use it.
package replay

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// TickPeriod is how often, in recorded time, the player runs the
// machine's timers between events, as the daemon's ticker does (every 10
// to 50 ms): timeouts fire when they are due, not at the next event.
const TickPeriod = 10 * time.Millisecond

// QuietAfter bounds the ticking after an event: every timer of the
// machine (prediction and execution timeouts, Smoothing, the bandwidth
// warm-up) has fired well within it, and a recording paused for hours
// costs nothing.
const QuietAfter = 10 * time.Second

// sessionRestart is how far back the recorded clock must jump for the
// next event to start a new recording: a log made of several recordings
// replays each on a fresh machine, as a restarted m2hod would run it.
// Smaller steps back are messages of two log codes stamped a little
// apart, which the machine's own clock absorbs.
const sessionRestart = time.Second

// Options configure a Player.
type Options struct {
	// Machine is the state machine's configuration
	// (statemachine.DefaultConfig when zero).
	Machine statemachine.Config
	// Estimator is the estimator's configuration
	// (estimator.DefaultConfig when zero).
	Estimator estimator.Config
	// Store gives the estimator its stored cells (nil: none).
	Store estimator.Store
	// Actuator receives the policies (nil: they are dropped).
	Actuator statemachine.Actuator
	// Observer is told what the machine does (nil: nothing).
	Observer statemachine.Observer
	// Learnt keeps what the machine learnt (the learning predictor's
	// counts and intervals, the mean T2): every machine of the player
	// starts from it and saves its changes there, as m2hod does with its
	// cell store (nil: a store of the player's own, so that a log of
	// several recordings still carries it over).
	Learnt statemachine.LearntStore
	// NewSession is called when the recorded clock jumps back and a fresh
	// machine takes over, before it handles its first event.
	NewSession func(at time.Time)
}

// Player drives a state machine over events in recorded time. It is not
// safe for concurrent use.
type Player struct {
	opts    Options
	machine *statemachine.Machine
	est     *estimator.Estimator
	// next is the time of the next tick; last that of the latest event;
	// now the latest time the machine was given.
	next, last, now time.Time
}

// NewPlayer returns a player with a fresh machine and estimator.
func NewPlayer(opts Options) (*Player, error) {
	if opts.Machine == (statemachine.Config{}) {
		opts.Machine = statemachine.DefaultConfig()
	}
	if opts.Estimator == (estimator.Config{}) {
		opts.Estimator = estimator.DefaultConfig()
	}
	if opts.Actuator == nil {
		opts.Actuator = statemachine.DiscardActuator{}
	}
	if opts.Learnt == nil {
		opts.Learnt = &Learnt{}
	}
	p := &Player{opts: opts}
	if err := p.start(); err != nil {
		return nil, err
	}
	return p, nil
}

// start replaces the machine and estimator with fresh ones, keeping what
// the machine learnt about the network (Options.Learnt): it belongs to
// the modem's network, not to one recording, and m2hod keeps it in its
// cell store.
func (p *Player) start() error {
	quiet := slog.New(slog.DiscardHandler)
	est, err := estimator.New(p.opts.Estimator, p.opts.Store, quiet)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	m, err := statemachine.New(p.opts.Machine, est, p.opts.Actuator, quiet)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	// The recordings name no network, as the diag events do not: the
	// records are those of no network, which m2hod without a fleet uses.
	if err := m.UseLearntStore(p.opts.Learnt, ""); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	m.SetObserver(p.opts.Observer)
	p.machine, p.est = m, est
	p.next, p.last, p.now = time.Time{}, time.Time{}, time.Time{}
	return nil
}

// Machine is the machine handling events now (a new one per session).
func (p *Player) Machine() *statemachine.Machine { return p.machine }

// Play runs the timers up to ev's time, then the event.
func (p *Player) Play(ev diag.Event) error {
	if err := p.Prepare(ev.Time); err != nil {
		return err
	}
	p.Handle(ev)
	return nil
}

// Prepare readies the player for an event at t: a fresh machine when
// the recorded clock jumped back (a new recording), else the timers up
// to t.
func (p *Player) Prepare(t time.Time) error {
	if !p.last.IsZero() && t.Before(p.last.Add(-sessionRestart)) {
		if err := p.start(); err != nil {
			return err
		}
		if p.opts.NewSession != nil {
			p.opts.NewSession(t)
		}
		return nil
	}
	p.AdvanceTo(t)
	return nil
}

// AdvanceTo ticks the machine every TickPeriod up to t, for at most
// QuietAfter past the latest event.
func (p *Player) AdvanceTo(t time.Time) {
	if p.next.IsZero() || p.last.IsZero() {
		return
	}
	for quiet := p.last.Add(QuietAfter); p.next.Before(t) && p.next.Before(quiet); p.next = p.next.Add(TickPeriod) {
		p.tick(p.next)
	}
}

func (p *Player) tick(t time.Time) {
	p.setNow(t)
	p.machine.Tick(t)
}

func (p *Player) setNow(t time.Time) {
	if t.After(p.now) {
		p.now = t
	}
}

// Now is the latest time the machine was given: the replay's clock.
func (p *Player) Now() time.Time { return p.now }

// Handle gives the machine (and, for rb_alloc, the estimator first, as
// the daemon does) one event, without ticking first.
func (p *Player) Handle(ev diag.Event) {
	p.setNow(ev.Time)
	if ev.Type == diag.TypeRBAlloc {
		p.est.AddRBAlloc(ev)
	}
	p.machine.HandleEvent(ev)
	if ev.Time.After(p.last) {
		p.last = ev.Time
	}
	if p.next.Before(ev.Time) {
		p.next = ev.Time.Add(TickPeriod)
	}
}

// Drain ticks after the last event until done reports true or QuietAfter
// passed: whatever is pending gets its outcome.
func (p *Player) Drain(done func() bool) {
	if p.last.IsZero() {
		return
	}
	for end := p.last.Add(QuietAfter); !done() && p.next.Before(end); p.next = p.next.Add(TickPeriod) {
		p.tick(p.next)
	}
}
