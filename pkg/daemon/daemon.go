// Package daemon wires m2hod together: the datapath, the cell store, the
// estimator, the state machine, the diag inputs, the metrics and the HTTP
// endpoints, and runs them until its context ends.
//
// One goroutine, the loop, owns the state machine. It serialises
// everything that drives it: diag events, downlink bursts from the
// datapath, a 10 ms ticker that runs the machine's timeouts and watches
// suppressed flows, and /status requests. Inputs and the burst reader run
// in their own goroutines and only hand over values. The sampler, another
// goroutine, walks the flow table for the estimator (which is safe for
// concurrent use): a walk costs time in proportion to the table's size,
// and the loop must never wait for one before acting on an event.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/pkg/cellstore"
	"github.com/m2ho/m2ho/pkg/config"
	"github.com/m2ho/m2ho/pkg/datapath"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/diag/rrc"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/fleet"
	"github.com/m2ho/m2ho/pkg/metrics"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// Timing of the loop.
const (
	// pollInterval paces the machine's timeouts and the byte sampling
	// while something happens. It is well below the shortest interval the
	// machine acts on (a ~30 ms command-to-execution gap) and below the
	// RTT of any cellular path, which the bandwidth estimate counts bytes
	// over.
	pollInterval = 10 * time.Millisecond
	// idleInterval paces them while nothing is under way (Stable with no
	// policy in force; slot allocations bring their own samples): every 100 Hz timer
	// costs about 1% of a core on a small virtual machine. Byte samples
	// this far apart still give a per-RTT rate that is ready, and fresh,
	// when a handover is predicted.
	idleInterval = 100 * time.Millisecond
	// quietAfter is how long the link must be silent before the byte
	// sampling slows down to quietInterval.
	quietAfter = time.Second
	// quietInterval paces the byte sampling while the link is silent and
	// nothing is under way: new traffic is seen within it, and its first
	// per-RTT estimate follows within a round.
	quietInterval = time.Second
	// evictInterval, flowIdle and closedFlowIdle bound the flow table: a
	// flow silent for flowIdle is forgotten but for its handshake, which
	// the clamp needs if it resumes, and a closed connection after
	// closedFlowIdle, which covers its last packets, so that short
	// connections do not fill the table.
	evictInterval  = 30 * time.Second
	flowIdle       = 5 * time.Minute
	closedFlowIdle = 10 * time.Second
	// stallAfter is how long the loop may go without a tick before
	// /healthz reports it stalled.
	stallAfter = time.Second
	// statusTimeout bounds how long /status waits for the loop.
	statusTimeout = time.Second
	// eventQueue, batchQueue and burstQueue absorb bursts of input while
	// the loop is busy; beyond them inputs wait (UDP then queues in the
	// socket, whose buffer holds thousands of datagrams). batchQueue
	// counts datagrams, of one event or of a hundred, and each datagram
	// input keeps batchQueue+2 slices of events for them (see
	// diag.BatchSource): a few suffice where the socket queues.
	eventQueue = 1024
	batchQueue = 8
	burstQueue = 256
)

// datapathAPI is what the daemon uses of the BPF datapath.
type datapathAPI interface {
	policyWriter
	AttachMode() string
	SuppressionPending() (int, error)
	Counters() (datapath.Counters, error)
	// IngressBytes is Counters()[datapath.IngressBytes], read for the
	// byte samples at a fraction of the cost.
	IngressBytes() (uint64, error)
	Flows() ([]datapath.Flow, error)
	EvictIdle(idle, closedIdle time.Duration) (int, error)
	RTTHistogram() ([]uint64, error)
	ReadBursts(ctx context.Context, fn func(datapath.Burst)) error
	FlushBursts() error
	Close() error
	CloseKeepingFlows() error
}

// opener creates the external resources; tests replace it.
type opener struct {
	datapath func(datapath.Options) (datapathAPI, error)
	source   func(uri string, opts diagsrc.Options) (diag.Source, error)
}

var realOpener = opener{
	datapath: func(o datapath.Options) (datapathAPI, error) {
		dp, err := datapath.Open(o)
		if err != nil {
			// A nil *Datapath in the interface would not compare nil.
			return nil, err
		}
		return dp, nil
	},
	source: diagsrc.Open,
}

// Daemon is a running m2hod. Create it with Open, run it with Run.
type Daemon struct {
	cfg    config.Config
	logger *slog.Logger

	dp    datapathAPI
	store *cellstore.Store
	// fleet is the fleet store, nil when none is configured.
	fleet   *fleet.Client
	est     *estimator.Estimator
	machine *statemachine.Machine
	act     *recorder
	metrics *metrics.Metrics
	// inputs count what each diag input gave, in cfg.Diag order.
	inputs  []metrics.DiagInput
	sources []diag.Source
	// subscriptions are the RRC decoders of the sources, in their order.
	subscriptions []*rrc.Subscriptions
	// network is the mobile network of what is learnt; the loop owns it.
	network networkState

	listener net.Listener
	server   *http.Server

	statusReq chan chan Status
	// sampleFast asks the sampler for byte samples every pollInterval;
	// the loop sets it, and signals sampleWake when it turns on so that
	// the sampler speeds up at once.
	sampleFast atomic.Bool
	sampleWake chan struct{}
	// lastTick is the unix time in nanoseconds of the loop's last tick.
	lastTick atomic.Int64
	started  time.Time
	// keepFlows: see KeepFlowsAtExit.
	keepFlows atomic.Bool

	closeOnce sync.Once
}

// Open creates every part of the daemon and binds its sockets, so that
// every configuration or environment problem is reported before Run. On
// error nothing is left open.
func Open(cfg config.Config, logger *slog.Logger) (*Daemon, error) {
	return open(cfg, logger, realOpener)
}

func open(cfg config.Config, logger *slog.Logger, op opener) (_ *Daemon, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{
		cfg:        cfg,
		logger:     logger,
		statusReq:  make(chan chan Status),
		sampleWake: make(chan struct{}, 1),
		started:    time.Now(),
	}
	defer func() {
		if err != nil {
			if closeErr := d.closeResources(); closeErr != nil {
				logger.Warn("cleaning up after a failed start", "err", closeErr)
			}
		}
	}()

	if d.store, err = cellstore.Open(cfg.StateDir, cellstore.Options{Logger: logger}); err != nil {
		return nil, err
	}
	estCfg := estimator.DefaultConfig()
	if cfg.Lambda != 0 {
		estCfg.Lambda = cfg.Lambda
	}
	if cfg.DefaultBufferBytes != 0 {
		estCfg.DefaultBufferBytes = cfg.DefaultBufferBytes
	}
	// The estimator and the machine name themselves in their errors.
	if d.est, err = estimator.New(estCfg, d.store, logger); err != nil {
		return nil, err
	}
	var learnt statemachine.LearntStore = d.store
	if cfg.Fleet.URL != "" {
		if d.fleet, err = openFleet(cfg.Fleet, logger); err != nil {
			return nil, err
		}
		d.est.UseFleet(d.fleet)
		learnt = d.fleet.LearntStore(d.store)
	}

	if err := checkRunningKernel(); err != nil {
		return nil, err
	}
	pinDir, err := flowPinDir(cfg)
	if err != nil {
		return nil, err
	}
	d.dp, err = op.datapath(datapath.Options{Iface: cfg.Iface, BurstGap: cfg.BurstGap, MaxFlows: cfg.MaxFlows, PinDir: pinDir, Logger: logger})
	switch {
	case errors.Is(err, datapath.ErrNoInterface):
		return nil, fmt.Errorf("interface %s not found: %w", cfg.Iface, err)
	case errors.Is(err, datapath.ErrPermission):
		return nil, fmt.Errorf("not enough privileges to load the m2ho programs: %w", err)
	case errors.Is(err, datapath.ErrUnsupported):
		return nil, fmt.Errorf("this kernel cannot run the m2ho programs: %w", err)
	case errors.Is(err, datapath.ErrPinDirInUse):
		return nil, fmt.Errorf("another m2hod runs on %s: %w", cfg.Iface, err)
	case err != nil:
		return nil, fmt.Errorf("datapath on %s: %w", cfg.Iface, err)
	}

	// Each input is counted apart, so that a silent one shows.
	for _, uri := range cfg.Diag {
		d.inputs = append(d.inputs, metrics.DiagInput{Name: uri, Stats: &diag.Stats{}, Reasons: diagsrc.Reasons(uri)})
	}
	states := []string{statemachine.Stable.String(), statemachine.Preparation.String(), statemachine.Smoothing.String()}
	d.act = &recorder{}
	d.metrics = metrics.New(states, metrics.Info{Mode: string(cfg.Mode), Policy: string(cfg.Policy)},
		metrics.Sources{Datapath: d.datapathSnapshot, Policy: d.act.metricsSnapshot, Diag: d.inputs, EstimatorSkipped: d.est.Skipped,
			AttachMode: d.dp.AttachMode, Fleet: d.fleetStats()}, logger)
	d.act.metrics = d.metrics
	if cfg.Mode == config.ModeEnforce {
		d.act.next = d.dp
	}

	if d.machine, err = statemachine.New(machineConfig(cfg), d.est, d.act, logger); err != nil {
		return nil, err
	}
	d.machine.SetObserver(observer{d.metrics})
	// The configured network (the fleet's) until the modem names one
	// when none is configured (handleNetwork).
	d.network.configured = cfg.Fleet.Network
	d.est.UseNetwork(cfg.Fleet.Network)
	if err := d.machine.UseLearntStore(learnt, cfg.Fleet.Network); err != nil {
		logger.Warn("learnt measurement reports unreadable, learning again from scratch", "err", err)
	}

	for i, uri := range cfg.Diag {
		// Each input gets its own RRC decoders: measurement IDs resolve
		// against the measConfig of the same modem stream and SIM.
		subs := rrc.NewSubscriptions(logger.With("diag", uri), cfg.DiagSubscription)
		src, err := op.source(uri, diagsrc.Options{Stats: d.inputs[i].Stats, RRC: subs, Logger: logger, Realtime: true})
		if err != nil {
			return nil, fmt.Errorf("diag input %s: %w", uri, err)
		}
		d.sources = append(d.sources, src)
		d.subscriptions = append(d.subscriptions, subs)
	}

	if d.listener, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	d.server = &http.Server{Handler: d.handler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	logger.Info("m2hod ready", "iface", cfg.Iface, "mode", cfg.Mode, "policy", cfg.Policy, "attach", d.dp.AttachMode(),
		"listen", d.listener.Addr().String(), "diag", cfg.Diag, "state", filepath.Join(cfg.StateDir, cellstore.FileName))
	return d, nil
}

// openFleet connects to the fleet store in the background: an
// unreachable server delays the sharing, never the daemon.
func openFleet(cfg config.Fleet, logger *slog.Logger) (*fleet.Client, error) {
	host := cfg.Host
	if host == "" {
		var err error
		if host, err = fleet.HostName(); err != nil {
			return nil, err
		}
	}
	c, err := fleet.Open(fleet.Options{
		URL: cfg.URL, Network: cfg.Network, Host: host, Bucket: cfg.Bucket,
		CredsFile: cfg.CredsFile, CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile,
		MaxAge: cfg.MaxAge, MaxBytes: cfg.MaxBytes, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	logger.Info("fleet store configured", "network", cfg.Network, "host", host)
	return c, nil
}

// fleetStats reads the fleet's counters for the metrics; nil without a
// fleet, which leaves its metrics out.
func (d *Daemon) fleetStats() func() fleet.Stats {
	if d.fleet == nil {
		return nil
	}
	return d.fleet.Stats
}

// machineConfig maps the daemon configuration to the state machine's.
func machineConfig(cfg config.Config) statemachine.Config {
	c := statemachine.DefaultConfig()
	c.Policy = statemachine.Policy(cfg.Policy)
	c.Prediction = cfg.Enabled(config.ComponentPrediction)
	c.Suppression = cfg.Enabled(config.ComponentSuppression)
	c.BandwidthClamp = cfg.Enabled(config.ComponentBandwidthClamp)
	c.Ramp = cfg.Enabled(config.ComponentRamp)
	if cfg.SmoothingMax != 0 {
		c.SmoothingMax = cfg.SmoothingMax
	}
	if cfg.DrainBurstBytes != 0 {
		c.DrainBurstBytes = cfg.DrainBurstBytes
	}
	return c
}

// Addr returns the address the HTTP endpoints listen on.
func (d *Daemon) Addr() net.Addr { return d.listener.Addr() }

// Run serves until ctx ends (returns nil) or a part fails for good
// (returns the error). Either way everything is closed and the datapath
// detached when it returns.
func (d *Daemon) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	// fatal receives the first error that must stop the daemon.
	fatal := make(chan error, len(d.sources)+3)

	// Datagram inputs deliver the events of a datagram together (see
	// handleEvents), the others one by one.
	events := make(chan diag.Event, eventQueue)
	batches := make(chan []diag.Event, batchQueue)
	for _, src := range d.sources {
		wg.Go(func() {
			var err error
			if bs, ok := src.(diag.BatchSource); ok {
				err = bs.RunBatches(ctx, batches)
			} else {
				err = src.Run(ctx, events)
			}
			switch {
			case ctx.Err() != nil:
			case err == nil:
				d.logger.Info("diag input ended", "input", src.Name())
			default:
				fatal <- fmt.Errorf("diag input %s: %w", src.Name(), err)
			}
		})
	}

	bursts := make(chan datapath.Burst, burstQueue)
	wg.Go(func() {
		err := d.dp.ReadBursts(ctx, func(b datapath.Burst) {
			select {
			case bursts <- b:
			case <-ctx.Done():
			}
		})
		if err != nil && ctx.Err() == nil {
			fatal <- fmt.Errorf("datapath bursts: %w", err)
		}
	})

	wg.Go(func() {
		if err := d.sampleLoop(ctx); err != nil {
			fatal <- fmt.Errorf("sampler: %w", err)
		}
	})

	if d.fleet != nil {
		// Failures of the fleet store only delay the sharing: Run
		// retries until ctx ends and returns nil.
		wg.Go(func() { _ = d.fleet.Run(ctx) })
	}

	wg.Go(func() {
		if err := d.server.Serve(d.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fatal <- fmt.Errorf("http: %w", err)
		}
	})

	err := d.loop(ctx, events, batches, bursts, fatal)
	cancel()
	shutdownCtx, done := context.WithTimeout(context.Background(), 2*time.Second)
	defer done()
	if shutdownErr := d.server.Shutdown(shutdownCtx); shutdownErr != nil {
		d.logger.Warn("http shutdown", "err", shutdownErr)
	}
	wg.Wait()
	if closeErr := d.Close(); closeErr != nil {
		err = errors.Join(err, closeErr)
	}
	return err
}

func (d *Daemon) loop(ctx context.Context, events <-chan diag.Event, batches <-chan []diag.Event, bursts <-chan datapath.Burst, fatal <-chan error) error {
	interval := pollInterval
	ticker, err := newAlignedTicker(interval)
	if err != nil {
		return err
	}
	defer ticker.Stop()
	d.tick(time.Now())
	path := d.est.Path()
	for {
		select {
		case <-ctx.Done():
			d.logger.Info("stopping", "reason", context.Cause(ctx))
			return nil
		case err := <-fatal:
			return err
		case ev := <-events:
			d.handleEvent(ev)
		case evs := <-batches:
			d.handleEvents(evs)
		case b := <-bursts:
			d.handleBurst(b)
		case now := <-ticker.C:
			d.tick(now)
		case reply := <-d.statusReq:
			reply <- d.loopStatus()
		}
		now := time.Now()
		want := d.tickInterval(now)
		if want != interval {
			interval = want
			if err := ticker.Reset(interval); err != nil {
				return err
			}
		}
		d.setSampleFast(want == pollInterval)
		if p := d.est.Path(); p != path {
			// The machine changed the serving cell: the sampler takes the
			// flows' RTT sample counts now, so that the old cell's samples
			// stay out of the new cell's estimate.
			path = p
			d.wakeSampler()
		}
	}
}

// tickInterval is pollInterval while the machine has a timeout to run or
// a policy to renew, idleInterval otherwise.
func (d *Daemon) tickInterval(now time.Time) time.Duration {
	if d.machine.State() == statemachine.Stable && !d.act.policyActive(now) {
		return idleInterval
	}
	return pollInterval
}

// setSampleFast tells the sampler whether fine byte samples are needed:
// Eq. 2 counts bytes per RTT while a clamp holds, which is only while a
// handover is under way. Outside it, coarse samples keep the estimate
// current at a tenth of the cost; the slot bursts, sized from the byte
// history, get a sample after each read of slot allocations instead (see
// handleEvents).
func (d *Daemon) setSampleFast(fast bool) {
	if d.sampleFast.Swap(fast) == fast || !fast {
		return
	}
	d.wakeSampler()
}

// wakeSampler makes the sampler run now rather than at its next tick.
func (d *Daemon) wakeSampler() {
	select {
	case d.sampleWake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// handleEvent runs one diag event that came alone (see handleEvents).
func (d *Daemon) handleEvent(ev diag.Event) {
	one := [1]diag.Event{ev}
	d.handleEvents(one[:])
}

// handleEvents runs the diag events of one read (a datagram), in order.
// evs is not kept: a datagram input reuses it (see diag.BatchSource).
// They are stamped with the time they reach the loop: the machine
// compares event times with the ticker and the datapath enforces
// wall-clock deadlines, while modem clocks (and the time base of
// recordings) are not the host's. An rb_alloc event is placed before
// that time by placeEvents.
func (d *Daemon) handleEvents(evs []diag.Event) {
	received := time.Now()
	placeEvents(evs, received)
	rbAlloc := false
	for _, ev := range evs {
		if ev.Type == diag.TypeNetwork {
			d.handleNetwork(ev)
			continue
		}
		writes := d.act.writeCount()
		if ev.Type == diag.TypeRBAlloc {
			d.est.AddRBAlloc(ev)
			rbAlloc = true
		}
		d.machine.HandleEvent(ev)
		if d.act.writeCount() != writes {
			d.metrics.Actuation(time.Since(received))
		}
	}
	if rbAlloc {
		// A byte sample right after the slots of the read's rb_alloc
		// events, which end at its receipt: the slots of consecutive
		// reads follow each other, so these samples fall on their
		// boundaries, and the estimator sizes a slot burst from the
		// bytes between the samples around it. One sample per read,
		// however many events it brought: taken now, a sample per event
		// would only repeat the one at the read's end, while the
		// events' slots lie before it (placeEvents); the bytes of a
		// burst within a read are interpolated between the samples at
		// the ends of the reads. The sampler takes it within the
		// wake-up that brought the read, once the loop waits again,
		// where a timer at pollInterval would wake the process a
		// hundred times a second.
		d.wakeSampler()
	}
}

// placeEvents places the events of one read on the host clock, given when
// the read was received. An rb_alloc event is sent once its slots are
// over, and the estimator needs the start of its first slot on the clock
// of the byte samples, to count the bytes of a slot burst. The slots of
// a cell's rb_alloc events in one read follow each other, the last
// ending at receipt: each earlier event ends where the next of its cell
// begins. The cells of a read (an LTE anchor and an NR secondary cell)
// are scheduled side by side, each from receipt backwards. Every other
// event happens at receipt.
func placeEvents(evs []diag.Event, received time.Time) {
	// Where the next rb_alloc event of each cell seen so far begins,
	// walking the read backwards. A read names a cell or two.
	var room [4]cellStart
	next := room[:0]
	for i := len(evs) - 1; i >= 0; i-- {
		ev := &evs[i]
		if ev.Type != diag.TypeRBAlloc || ev.SlotDuration <= 0 {
			ev.Time = received
			continue
		}
		key := ev.Cell.Key()
		j := slices.IndexFunc(next, func(c cellStart) bool { return c.cell == key })
		if j < 0 {
			next = append(next, cellStart{cell: key, start: received})
			j = len(next) - 1
		}
		ev.Time = next[j].start.Add(-time.Duration(len(ev.Slots)) * ev.SlotDuration)
		next[j].start = ev.Time
	}
}

// cellStart is where the slots of a cell's next rb_alloc event begin.
type cellStart struct {
	cell  diag.CellKey
	start time.Time
}

// handleBurst passes every datapath burst on unfiltered: the estimator
// judges it as a buffer sample, and the machine decides whether it ends
// Smoothing (a lone packet does not; see statemachine.Machine.OnBurstEnd).
func (d *Daemon) handleBurst(b datapath.Burst) {
	eb := estimatorBurst(b)
	d.metrics.Burst(eb.Bytes)
	d.est.AddBurst(eb)
	d.machine.OnBurstEnd(eb)
}

// tick runs the machine's timeouts and then tells it whether suppressed
// flows still wait for the source cell's data: Smoothing ends when none
// does (every flow active at the handover released itself), and no burst
// ends it while some do.
//
// The machine's Tick comes first, as it retries a suppression start that
// failed. The pending count is asked only while a handover's suppression
// is in force: the datapath also reports 0 when suppression is off or
// still the Preparation's (a failed start at the execution leaves the
// command's in force), which says nothing of the flows, and taken as their
// release it would end Smoothing, its clamp, and the retry with it.
func (d *Daemon) tick(now time.Time) {
	d.lastTick.Store(now.UnixNano())
	d.machine.Tick(now)
	// In observe mode nothing is suppressed, so nothing can be released:
	// Smoothing ends on the burst end or SmoothingMax.
	if d.machine.State() != statemachine.Smoothing || d.cfg.Mode != config.ModeEnforce || !d.act.snapshot(now).HandoverEpoch {
		return
	}
	pending, err := d.dp.SuppressionPending()
	switch {
	case err != nil:
		d.logger.Debug("reading suppressed flows failed", "err", err)
	case pending == 0:
		d.machine.OnFlowsReleased(now)
	default:
		d.machine.OnFlowsPending(now)
	}
}

// Close detaches the datapath and closes the store and inputs. Run calls
// it; call it directly only for a Daemon that was opened but never run.
func (d *Daemon) Close() error {
	var err error
	d.closeOnce.Do(func() { err = d.closeResources() })
	return err
}

// KeepFlowsAtExit makes the daemon, when it closes, release the policy
// in force and leave its flow state pinned (datapath.CloseKeepingFlows)
// instead of removing it, for the next daemon on the same interface and
// pin directory to take over: a restart in place loses no window scale.
func (d *Daemon) KeepFlowsAtExit() { d.keepFlows.Store(true) }

func (d *Daemon) closeResources() error {
	var errs []error
	if d.listener != nil {
		// Closing an already served listener reports an error that
		// carries no information.
		_ = d.listener.Close()
	}
	for _, src := range d.sources {
		if c, ok := src.(io.Closer); ok {
			_ = c.Close()
		}
	}
	if d.dp != nil {
		closeDatapath := d.dp.Close
		if d.keepFlows.Load() {
			// The pinned policy would outlive this daemon until its
			// deadline; the next one starts from Stable.
			if err := errors.Join(d.dp.ClearClamp(), d.dp.StopSuppression()); err != nil {
				errs = append(errs, fmt.Errorf("release the policy: %w", err))
			}
			closeDatapath = d.dp.CloseKeepingFlows
		}
		if err := closeDatapath(); err != nil {
			errs = append(errs, fmt.Errorf("detach datapath: %w", err))
		}
	}
	if d.fleet != nil {
		d.fleet.Close()
	}
	if d.store != nil {
		if err := d.store.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// flowPinDir is where the datapath on cfg.Iface keeps its flows pinned:
// a directory of cfg.PinDir per interface and network namespace, so that
// daemons for interfaces of one name in different namespaces never share
// one. The BPF filesystem refuses dots in names, and interface names
// cannot hold a colon, so dots become colons and a colon separates the
// namespace. Empty when pinning is off.
func flowPinDir(cfg config.Config) (string, error) {
	if cfg.PinDir == "" {
		return "", nil
	}
	var netns unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &netns); err != nil {
		return "", fmt.Errorf("identify the network namespace: %w", err)
	}
	name := fmt.Sprintf("%s:netns%d", strings.ReplaceAll(cfg.Iface, ".", ":"), netns.Ino)
	return filepath.Join(cfg.PinDir, name), nil
}

// observer feeds the machine's transitions to the metrics and the log.
type observer struct{ m *metrics.Metrics }

func (o observer) Transition(from, to statemachine.State, _ string, _ time.Time) {
	o.m.Transition(from.String(), to.String())
}

func (o observer) Handover(kind string, _ time.Time)      { o.m.Handover(kind) }
func (o observer) Prediction(outcome string, _ time.Time) { o.m.Prediction(outcome) }
