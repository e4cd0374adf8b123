package emu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/rtprio"
	"github.com/m2ho/m2ho/test/scenario"
)

// Config wires an Emulator to its interfaces and to the diag consumer.
type Config struct {
	Scenario *scenario.Scenario
	// ServerIface and UEIface are the emulator's two interfaces; packets
	// read on one leave on the other. InEmu runs a function in the
	// namespace that holds them (sockets keep the namespace they were
	// opened in).
	ServerIface, UEIface string
	InEmu                func(func() error) error
	// DiagAddr, when set, is the UDP address (host:port) diag events go
	// to, opened from the namespace InDiag runs in (the UE's, where m2hod
	// listens on loopback).
	DiagAddr string
	InDiag   func(func() error) error
	// Encode is the diag JSON v1 encoder (diag.MarshalJSON).
	Encode func(diag.Event) ([]byte, error)
	// DiagFlush, when positive, coalesces rb_alloc events into datagrams
	// written at this period, as a DIAG port delivers them (see
	// diagFeed; DIAGPortFlush is the testbed's default); 0 sends each
	// event in a datagram of its own.
	DiagFlush time.Duration
	// AckTapIface, when set, is the UE's interface towards a receiver
	// behind it, opened in the namespace InAckTap runs in: the
	// receiver's ACKs read there, before the UE's datapath could drop
	// any, are the exact record of the duplicate ACKs generated.
	AckTapIface string
	InAckTap    func(func() error) error
	Log         *slog.Logger
}

// Emulator moves packets between two interfaces through a Link in real
// time, with AF_PACKET sockets. Kernel forwarding stays off in its
// namespace, so it is the only path between the two sides.
type Emulator struct {
	cfg       Config
	serverEnd *packetSocket
	ueEnd     *packetSocket
	ackTap    *packetSocket
	diagConn  net.Conn
	diag      *diagFeed

	mu   sync.Mutex
	link *Link

	start  rtprio.Mono
	epoch  time.Time
	uplink uplinkQueue

	// Filled by the scheduler goroutine only.
	batch  []delivery
	events []diag.Event

	// Delivery timing: actual send time minus due time.
	Downlink Histogram
	Uplink   Histogram
	// Wakeup is how late the scheduler woke for a slot, SendBatch how long
	// sending one slot's burst took: the two parts of a downlink timing
	// error.
	Wakeup    Histogram
	SendBatch Histogram

	realtimeOnce sync.Once
	// Send errors on the two sides (a full socket buffer drops the frame).
	sendErrors uint64

	// runMu guards closed and the running Run's stop and done, so that
	// Close can stop Run and wait for its readers before the sockets
	// they read go away.
	runMu   sync.Mutex
	closed  bool
	stopRun context.CancelFunc
	runDone chan struct{}
}

type delivery struct {
	p  *Packet
	at time.Duration
}

// New opens the emulator's sockets and builds its link.
func New(cfg Config) (*Emulator, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	e := &Emulator{cfg: cfg}
	err := cfg.InEmu(func() error {
		var err error
		if e.serverEnd, err = openPacketSocket(cfg.ServerIface); err != nil {
			return err
		}
		e.ueEnd, err = openPacketSocket(cfg.UEIface)
		return err
	})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("opening emulator sockets: %w", err)
	}
	if cfg.AckTapIface != "" {
		if cfg.InAckTap == nil {
			e.Close()
			return nil, errors.New("an ACK tap needs InAckTap")
		}
		err := cfg.InAckTap(func() error {
			var err error
			e.ackTap, err = openPacketSocket(cfg.AckTapIface)
			return err
		})
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("opening the ACK tap: %w", err)
		}
	}
	if cfg.DiagAddr != "" {
		if cfg.Encode == nil || cfg.InDiag == nil {
			e.Close()
			return nil, errors.New("a diag address needs Encode and InDiag")
		}
		if cfg.DiagFlush < 0 {
			e.Close()
			return nil, fmt.Errorf("negative diag flush period %v", cfg.DiagFlush)
		}
		err := cfg.InDiag(func() error {
			var err error
			e.diagConn, err = net.Dial("udp", cfg.DiagAddr)
			return err
		})
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("opening diag feed: %w", err)
		}
		e.diag = &diagFeed{conn: e.diagConn, encode: cfg.Encode, period: cfg.DiagFlush, lost: e.diagLost}
	}
	return e, nil
}

// Close stops Run if it is running and waits for it to return, then
// releases the sockets. Closing a socket a reader is still blocked on
// would not wake it, and its descriptor number could meanwhile be reused
// by another socket, which the reader would then read. Close may be
// called more than once; Run after Close fails.
func (e *Emulator) Close() {
	e.runMu.Lock()
	if e.closed {
		e.runMu.Unlock()
		return
	}
	e.closed = true
	stop, done := e.stopRun, e.runDone
	e.runMu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	if e.serverEnd != nil {
		e.serverEnd.close()
	}
	if e.ueEnd != nil {
		e.ueEnd.close()
	}
	if e.ackTap != nil {
		e.ackTap.close()
	}
	if e.diagConn != nil {
		e.diagConn.Close()
	}
}

// Start fixes the run's time origin and builds the link; the returned
// epoch is virtual time zero in wall-clock time.
func (e *Emulator) Start() (time.Time, error) {
	e.start = rtprio.Now()
	e.epoch = time.Now()
	link, err := NewLink(e.cfg.Scenario, e.epoch, e.collectEvent, e.collectDelivery)
	if err != nil {
		return time.Time{}, err
	}
	if e.ackTap != nil {
		link.TapAcks()
	}
	e.link = link
	return e.epoch, nil
}

// Run forwards packets until ctx ends. Start must have been called.
func (e *Emulator) Run(ctx context.Context) error {
	if e.link == nil {
		return errors.New("emulator not started")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.runMu.Lock()
	switch {
	case e.closed:
		e.runMu.Unlock()
		return errors.New("emulator closed")
	case e.runDone != nil:
		e.runMu.Unlock()
		return errors.New("emulator already running")
	}
	done := make(chan struct{})
	e.stopRun, e.runDone = cancel, done
	e.runMu.Unlock()
	// Close waits for this, after every goroutine below has returned.
	defer func() {
		e.runMu.Lock()
		e.stopRun, e.runDone = nil, nil
		e.runMu.Unlock()
		close(done)
	}()
	threads := int32(packetPathThreads)
	if e.ackTap != nil {
		threads++
	}
	ensureProcessors(realtimeThreads.Add(threads))
	defer realtimeThreads.Add(-threads)
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	run := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- err
			}
		}()
	}
	// Each goroutine of the packet path holds its own real-time thread.
	realtime := func(f func() error) func() error {
		return func() error {
			if err := rtprio.Lock(); err != nil {
				e.realtimeOnce.Do(func() { e.cfg.Log.Warn("emulator threads run at normal priority", "err", err) })
			}
			return f()
		}
	}
	run(realtime(func() error { return e.readDownlink(ctx) }))
	run(realtime(func() error { return e.readUplink(ctx) }))
	run(realtime(func() error { e.writeUplink(ctx); return nil }))
	run(realtime(func() error { e.schedule(ctx); return nil }))
	if e.ackTap != nil {
		run(realtime(func() error { return e.readAckTap(ctx) }))
	}
	var first error
	select {
	case <-ctx.Done():
	case first = <-errs:
		cancel()
	}
	wg.Wait()
	return first
}

// Truth returns the ground truth; call it after Run returned.
func (e *Emulator) Truth() *GroundTruth {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.link.Truth()
}

// SendErrors counts frames the emulator could not send.
func (e *Emulator) SendErrors() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sendErrors
}

// packetPathThreads is the number of goroutines Run locks to real-time
// threads, besides the ACK tap's when there is one.
const packetPathThreads = 4

// realtimeThreads counts the real-time threads of the emulators running
// in this process: an evaluation may run several units at once.
var realtimeThreads atomic.Int32

// ensureProcessors raises GOMAXPROCS so that each of the process's
// realtime real-time threads returning from a sleep always finds a free
// P. With GOMAXPROCS at the core count, the P it needs can be held by a
// normal thread the kernel has descheduled on a loaded machine, and the
// slot waits for that thread's next time slice: measured here as a p99
// timing error of 24 ms instead of 0.6 ms.
func ensureProcessors(realtime int32) {
	want := runtime.NumCPU() + int(realtime)
	if runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
}

// RuntimeMemoryLimit is the heap size at which TuneRuntime lets the
// garbage collector run.
const RuntimeMemoryLimit = 1 << 30

// TuneRuntime prepares the process that hosts an Emulator: enough Ps (see
// ensureProcessors), and garbage collection only when the heap reaches
// RuntimeMemoryLimit. Each collection stops the world, and the world waits
// for every thread holding a P, including normal-priority ones a loaded
// kernel has descheduled: measured here, collections stalled the
// real-time packet path for up to 100 ms (p99 delivery error 100 ms; 0.8
// ms without them). A run allocates little (packets are pooled), so the
// limit is not reached in runs of minutes. It changes process-wide
// settings: call it from main or TestMain.
func TuneRuntime() {
	ensureProcessors(packetPathThreads)
	debug.SetMemoryLimit(RuntimeMemoryLimit)
	debug.SetGCPercent(-1)
}

func (e *Emulator) collectEvent(ev diag.Event) { e.events = append(e.events, ev) }
func (e *Emulator) collectDelivery(p *Packet, at time.Duration) {
	e.batch = append(e.batch, delivery{p, at})
}

func (e *Emulator) readDownlink(ctx context.Context) error {
	for ctx.Err() == nil {
		p := newPacket()
		n, err := e.serverEnd.read(p.Frame[:maxFrame])
		if err != nil {
			recyclePacket(p)
			if errors.Is(err, errTimeout) {
				continue
			}
			return fmt.Errorf("reading downlink: %w", err)
		}
		p.Frame = p.Frame[:n]
		size, isIP, tcp := ParseFrame(p.Frame, true)
		if !isIP {
			e.passNonIP(e.ueEnd, p.Frame)
			recyclePacket(p)
			continue
		}
		p.Size, p.TCP = size, tcp
		at := rtprio.Now().Sub(e.start)
		e.mu.Lock()
		e.link.Arrive(p, at)
		e.mu.Unlock()
	}
	return nil
}

// idlePoll bounds the packet-path threads' sleeps when they have nothing
// scheduled. They poll rather than wake each other through channels or
// timers: those hand a goroutine over through the Go scheduler, which on a
// loaded machine waits for a normal-priority thread and delayed slots by
// tens of milliseconds.
const idlePoll = time.Millisecond

// uplinkQueue holds uplink packets until their release, in release order.
type uplinkQueue struct {
	mu      sync.Mutex
	pending []delayed
}

type delayed struct {
	p       *Packet
	release time.Duration
}

func (q *uplinkQueue) push(d delayed) {
	q.mu.Lock()
	q.pending = append(q.pending, d)
	q.mu.Unlock()
}

// pop returns the head if it is due at now, else when the head is due.
func (q *uplinkQueue) pop(now time.Duration) (d delayed, due bool, next time.Duration, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) == 0 {
		return delayed{}, false, 0, false
	}
	head := q.pending[0]
	if head.release > now {
		return delayed{}, false, head.release, true
	}
	q.pending[0] = delayed{}
	q.pending = q.pending[1:]
	if len(q.pending) == 0 {
		q.pending = q.pending[:0:0]
	}
	return head, true, 0, true
}

func (e *Emulator) readUplink(ctx context.Context) error {
	for ctx.Err() == nil {
		p := newPacket()
		n, err := e.ueEnd.read(p.Frame[:maxFrame])
		if err != nil {
			recyclePacket(p)
			if errors.Is(err, errTimeout) {
				continue
			}
			return fmt.Errorf("reading uplink: %w", err)
		}
		p.Frame = p.Frame[:n]
		_, isIP, tcp := ParseFrame(p.Frame, false)
		if !isIP {
			e.passNonIP(e.serverEnd, p.Frame)
			recyclePacket(p)
			continue
		}
		at := rtprio.Now().Sub(e.start)
		e.mu.Lock()
		release := e.link.UplinkRelease(at, tcp)
		e.mu.Unlock()
		e.uplink.push(delayed{p: p, release: release})
	}
	return nil
}

// readAckTap reads the receiver's frames on the UE's LAN side and records
// its duplicate ACKs as generated.
func (e *Emulator) readAckTap(ctx context.Context) error {
	frame := make([]byte, maxFrame)
	for ctx.Err() == nil {
		n, err := e.ackTap.read(frame)
		if err != nil {
			if errors.Is(err, errTimeout) {
				continue
			}
			return fmt.Errorf("reading the ACK tap: %w", err)
		}
		_, isIP, tcp := ParseFrame(frame[:n], false)
		if !isIP {
			continue
		}
		at := rtprio.Now().Sub(e.start)
		e.mu.Lock()
		e.link.TappedAck(at, tcp)
		e.mu.Unlock()
	}
	return nil
}

func (e *Emulator) writeUplink(ctx context.Context) {
	for ctx.Err() == nil {
		at := rtprio.Now().Sub(e.start)
		d, due, next, ok := e.uplink.pop(at)
		switch {
		case due:
			e.send(e.serverEnd, d.p.Frame)
			e.Uplink.Observe(rtprio.Now().Sub(e.start) - d.release)
			recyclePacket(d.p)
		case ok:
			rtprio.SleepUntil(ctx, e.start.Add(next))
		default:
			rtprio.SleepUntil(ctx, e.start.Add(at+idlePoll))
		}
	}
}

// passNonIP forwards ARP and other non-IP frames at once.
func (e *Emulator) passNonIP(to *packetSocket, frame []byte) {
	e.mu.Lock()
	e.link.Truth().Totals.PassedNonIP++
	e.mu.Unlock()
	e.send(to, frame)
}

func (e *Emulator) send(to *packetSocket, frame []byte) {
	if err := to.write(frame); err != nil {
		e.mu.Lock()
		e.sendErrors++
		e.mu.Unlock()
	}
}

// schedule runs the link's slots in real time and sends what they deliver.
func (e *Emulator) schedule(ctx context.Context) {
	var spareBatch []delivery
	var spareEvents []diag.Event
	// The diag events still queued when the run ends are sent too.
	defer e.flushDiag()
	for ctx.Err() == nil {
		now := rtprio.Now().Sub(e.start)
		e.mu.Lock()
		e.link.Advance(now)
		wake, ok := e.link.NextWake()
		busy := e.link.Busy()
		batch, events := e.batch, e.events
		e.batch, e.events = spareBatch[:0], spareEvents[:0]
		e.mu.Unlock()

		sendStart := rtprio.Now()
		for _, d := range batch {
			e.send(e.ueEnd, d.p.Frame)
			e.Downlink.Observe(rtprio.Now().Sub(e.start) - d.at)
			recyclePacket(d.p)
		}
		if len(batch) > 0 {
			e.SendBatch.Observe(rtprio.Now().Sub(sendStart))
		}
		flushAt, flushing := e.sendDiag(events, now)
		// The two slices alternate between the link and this loop.
		clear(batch)
		spareBatch, spareEvents = batch, events

		if busy {
			// A slot may be far off (an interruption with nothing
			// queued lasts until the handover completes): queued diag
			// events are not held past their boundary.
			if flushing && flushAt < wake {
				rtprio.SleepUntil(ctx, e.start.Add(flushAt))
				continue
			}
			rtprio.SleepUntil(ctx, e.start.Add(wake))
			e.Wakeup.Observe(rtprio.Now().Sub(e.start) - wake)
			continue
		}
		// Nothing queued: an arrival may come before the next action.
		poll := rtprio.Now().Sub(e.start) + idlePoll
		if !ok || wake > poll {
			wake = poll
		}
		if flushing {
			wake = min(wake, flushAt)
		}
		rtprio.SleepUntil(ctx, e.start.Add(wake))
	}
}

// sendDiag hands the link's events to the diag feed, and returns when the
// events it holds back are due.
func (e *Emulator) sendDiag(events []diag.Event, now time.Duration) (flushAt time.Duration, flushing bool) {
	if e.diag == nil {
		return 0, false
	}
	e.diag.send(events, now)
	return e.diag.due()
}

func (e *Emulator) flushDiag() {
	if e.diag != nil {
		e.diag.flush()
	}
}

// diagLost counts diag events that were not sent.
func (e *Emulator) diagLost(n int, err error) {
	e.mu.Lock()
	e.link.Truth().Totals.DiagSendErrors += uint64(n)
	e.mu.Unlock()
	e.cfg.Log.Debug("diag events not sent", "events", n, "err", err)
}
