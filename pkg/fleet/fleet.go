// Package fleet shares what m2hod learns about cells with the other hosts
// of a fleet (buses, trains, vans crossing the same cells), through a NATS
// JetStream key-value bucket, so that a host meeting a cell for the first
// time clamps with what a peer measured there rather than with the
// conservative default.
//
// The bucket is never on the hot path. A watcher feeds a local cache,
// which the estimator reads under its lock; what this host learns goes to
// a bounded write-behind queue that a publisher drains while the server
// is reachable. Vehicles lose their uplink: the client starts, runs and
// keeps learning without a server, and reconnects silently (the local
// cell store stays the source of truth).
//
// Peers are not trusted: every entry is checked, a malformed one is
// counted and skipped, an entry older than Options.MaxAge is ignored, and
// several peers' reports of a cell are combined by their lower median, so
// one wrong peer among three or more cannot move the answer. The
// estimator bounds whatever the fleet answers for buffers
// (estimator.SourceFleet), the state machine what it answers for the
// learning predictor (statemachine.LearntPrior).
//
// Connected means the bucket answers, not only that the connection to
// the server is up: m2hod on a vehicle connects to a leaf node on
// loopback, which stays up while the hub behind it, and the bucket, are
// out of reach.
package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/m2ho/m2ho/internal/stats"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// Defaults of Options.
const (
	DefaultBucket = "m2ho_cells"
	// DefaultMaxAge: a cell's configuration (and so its buffer) changes
	// on the scale of network upgrades, but an entry that no host has
	// refreshed for a week belongs to a route the fleet no longer
	// drives.
	DefaultMaxAge = 7 * 24 * time.Hour
	// DefaultQueueSize is how many cells wait for publication at most:
	// far more than a day's route crosses.
	DefaultQueueSize = 1024
	// DefaultPublishInterval batches the updates of a cell: a burst
	// changes its record many times a second, the uplink gets one write
	// per changed cell per interval.
	DefaultPublishInterval = 5 * time.Second
	// DefaultMaxBytes bounds the bucket a client creates: a thousand
	// vehicles that each published a hundred cells of a network, with
	// their report counts (about 1 KB an entry), take 100 MB; a peer
	// flooding the bucket fills it up to here and no further. The
	// example hub (deploy/nats-server.conf) stores up to 1 GB.
	DefaultMaxBytes = 256 << 20
)

const (
	// reconnectWait is the pause between connection attempts.
	reconnectWait = 2 * time.Second
	// pingInterval paces the client's pings; two unanswered ones end
	// the connection.
	pingInterval = 20 * time.Second
	// requestTimeout bounds each JetStream request.
	requestTimeout = 5 * time.Second
	// closeFlushTimeout bounds the last publication at shutdown.
	closeFlushTimeout = time.Second
	// healthTicks is how many publish intervals may pass without an
	// answer from the bucket before the client asks it whether it is
	// there (a minute by default): through a leaf node, a hub out of
	// reach shows only as requests nobody answers, and the probe's few
	// hundred bytes a minute are what an idle vehicle spends on it.
	healthTicks = 12
	// kindsPerEntry bounds the report kinds held in the cache, on
	// average per entry: a cell has a dozen kinds at most, most entries
	// far fewer, and a peer publishing the maximum (maxReports) for
	// every cell would otherwise hold gigabytes.
	kindsPerEntry = 4
)

// Options configure a Client.
type Options struct {
	// URL is one or more server URLs, comma-separated (nats://, tls://).
	URL string
	// Network names the mobile network, the first token of every key:
	// cell identities (RAT, ARFCN, PCI) repeat across operators.
	Network string
	// Host names this host in its keys.
	Host string
	// Bucket is the key-value bucket; DefaultBucket when empty.
	Bucket string
	// CredsFile is a NATS credentials file (JWT and seed).
	CredsFile string
	// CAFile, CertFile and KeyFile are the TLS trust anchors and client
	// certificate.
	CAFile, CertFile, KeyFile string
	// MaxAge is how old an entry may be to count; DefaultMaxAge when 0.
	MaxAge time.Duration
	// QueueSize bounds the publication queue; DefaultQueueSize when 0.
	QueueSize int
	// MaxEntries bounds the peers' entries held in the cache;
	// DefaultMaxEntries when 0.
	MaxEntries int
	// MaxBytes bounds the bucket when this client creates it, or finds
	// it unbounded; DefaultMaxBytes when 0. A full bucket refuses
	// publications, which are counted (Stats.Rejected).
	MaxBytes int64
	// PublishInterval paces the publisher; DefaultPublishInterval when 0.
	PublishInterval time.Duration
	Logger          *slog.Logger
	// Now is the clock entries are aged against; time.Now when nil.
	Now func() time.Time
}

// peerEntry is what one host reported about a cell.
type peerEntry struct {
	// bufferBytes is 0 when the host published report counts alone.
	bufferBytes uint64
	reports     []reportCount
	// stored is when the server stored the entry: its age does not
	// depend on the peer's clock.
	stored time.Time
}

// peerLead is the report-to-command lead a host published for a band,
// with the latest entry that carried it.
type peerLead struct {
	lead    time.Duration
	samples int
	stored  time.Time
	// cell is that entry's: when it leaves the cache, so does the lead,
	// so that the leads held never outnumber the entries.
	cell diag.CellKey
}

// Stats are the client's counters, for metrics and /status.
type Stats struct {
	// Connected: the bucket answers. A connection to a leaf node whose
	// hub is out of reach is not connected.
	Connected bool `json:"connected"`
	// Entries counts the peers' cell entries held in the cache.
	Entries int    `json:"entries"`
	Hits    uint64 `json:"hits"`
	Misses  uint64 `json:"misses"`
	// Queued is the publication queue's depth; Dropped counts cells
	// pushed out of the full queue, Published the entries written.
	Queued    int    `json:"queued"`
	Dropped   uint64 `json:"dropped"`
	Published uint64 `json:"published"`
	// Rejected counts entries the server refused (a full bucket); they
	// leave the queue until their cell changes again.
	Rejected uint64 `json:"rejected"`
	// Malformed counts skipped entries by reason (Malformed* constants).
	Malformed map[string]uint64 `json:"malformed"`
	// Error says why the bucket is not usable: the last connection or
	// request error (a refused credential, a certificate, a hub out of
	// reach); empty while connected.
	Error string `json:"error,omitempty"`
}

// Client is a connection to the fleet store. Create it with Open, run it
// with Run. Lookup and Publish are safe for concurrent use and never
// block on the network.
type Client struct {
	opts   Options
	nc     *nats.Conn
	logger *slog.Logger
	// reconnected is signalled on every (re)connection: the publisher
	// binds the bucket and watches it again.
	reconnected chan struct{}

	mu    sync.Mutex
	peers map[diag.CellKey]map[string]peerEntry
	// cached counts the entries in peers, at most opts.MaxEntries, and
	// kinds the report kinds they hold, at most kindsPerEntry times as
	// many.
	cached, kinds int
	// leads are the peers' leads, by band and host.
	leads map[diag.Band]map[string]peerLead
	// own is the latest entry of each cell this host publishes, by key.
	own map[string]*entry
	// ownLeads is this host's lead by band, published with every entry
	// of a cell of the band.
	ownLeads map[diag.Band]leadSummary
	// queue holds the keys of own waiting for publication, oldest first.
	queue  []string
	queued map[string]bool
	// versions counts the changes of each entry of own.
	versions  map[string]uint64
	hits      uint64
	misses    uint64
	dropped   uint64
	published uint64
	rejected  uint64
	malformed map[string]uint64
	// lastRefusal is the last refusal logged.
	lastRefusal string
	// usable: a session has the bucket; lastErr is why not, logged
	// when it changes.
	usable  bool
	lastErr string
}

var (
	_ estimator.Fleet          = (*Client)(nil)
	_ statemachine.LearntPrior = (*Client)(nil)
)

// Open checks the options and starts connecting in the background. An
// unreachable server is not an error: the client retries for ever, and
// until then looks up nothing and queues what it publishes. Unreadable
// credentials or TLS files are.
func Open(opts Options) (*Client, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Bucket = cmp.Or(opts.Bucket, DefaultBucket)
	opts.MaxAge = cmp.Or(opts.MaxAge, DefaultMaxAge)
	opts.QueueSize = cmp.Or(opts.QueueSize, DefaultQueueSize)
	opts.MaxEntries = cmp.Or(opts.MaxEntries, DefaultMaxEntries)
	opts.PublishInterval = cmp.Or(opts.PublishInterval, DefaultPublishInterval)
	opts.MaxBytes = cmp.Or(opts.MaxBytes, DefaultMaxBytes)
	if opts.MaxBytes < maxValueSize {
		return nil, fmt.Errorf("fleet: bucket size %d bytes: must hold at least one entry of %d", opts.MaxBytes, maxValueSize)
	}
	for name, v := range map[string]string{"network": opts.Network, "host": opts.Host, "bucket": opts.Bucket} {
		if !NameRE.MatchString(v) {
			return nil, fmt.Errorf("fleet: %s %q: must be 1 to 64 letters, digits, _ or -", name, v)
		}
	}
	if opts.URL == "" {
		return nil, errors.New("fleet: no server URL")
	}
	// The client reads these files at each connection attempt, where a
	// missing one would only show as a connection that never comes.
	for what, path := range map[string]string{"credentials": opts.CredsFile, "CA": opts.CAFile, "certificate": opts.CertFile, "key": opts.KeyFile} {
		if path == "" {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("fleet: %s file: %w", what, err)
		}
		_ = f.Close()
	}
	c := &Client{
		opts:        opts,
		logger:      opts.Logger.With("fleet", redact(opts.URL)),
		reconnected: make(chan struct{}, 1),
		peers:       make(map[diag.CellKey]map[string]peerEntry),
		leads:       make(map[diag.Band]map[string]peerLead),
		own:         make(map[string]*entry),
		ownLeads:    make(map[diag.Band]leadSummary),
		queued:      make(map[string]bool),
		versions:    make(map[string]uint64),
		malformed:   make(map[string]uint64),
	}
	natsOpts := []nats.Option{
		nats.Name("m2hod " + opts.Host),
		// The first connection is retried like any later one: the
		// daemon starts out of coverage as well as in it.
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		// A server that refuses the credentials twice would otherwise
		// be given up for good; the hub's operator may yet add them.
		nats.IgnoreAuthErrorAbort(),
		nats.ReconnectWait(reconnectWait),
		// A vehicle leaving coverage closes nothing: the pings find
		// the dead link, in 40 s rather than the client's default 4 min.
		nats.PingInterval(pingInterval),
		nats.Timeout(requestTimeout),
		nats.ConnectHandler(func(nc *nats.Conn) { c.onConnect(nc, "connected") }),
		nats.ReconnectHandler(func(nc *nats.Conn) { c.onConnect(nc, "reconnected") }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { c.setUnusable(err) }),
		// Every failed attempt: a refused credential or certificate
		// would otherwise only show as a connection that never comes.
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { c.setUnusable(err) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.logger.Debug("fleet store", "err", err)
		}),
	}
	if opts.CredsFile != "" {
		natsOpts = append(natsOpts, nats.UserCredentials(opts.CredsFile))
	}
	if opts.CAFile != "" {
		natsOpts = append(natsOpts, nats.RootCAs(opts.CAFile))
	}
	if opts.CertFile != "" || opts.KeyFile != "" {
		natsOpts = append(natsOpts, nats.ClientCert(opts.CertFile, opts.KeyFile))
	}
	nc, err := nats.Connect(opts.URL, natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("fleet %s: %w", redact(opts.URL), err)
	}
	c.nc = nc
	return c, nil
}

// onConnect runs on the client's own goroutine, possibly before Open has
// set c.nc: it uses the connection it is given.
func (c *Client) onConnect(nc *nats.Conn, what string) {
	c.logger.Info("fleet store "+what, "server", nc.ConnectedUrlRedacted())
	select {
	case c.reconnected <- struct{}{}:
	default:
	}
}

// HostName is the host's name as a key token: characters a token cannot
// hold become '-', and it is cut to 64 characters.
func HostName() (string, error) {
	name, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("fleet: host name: %w", err)
	}
	name = invalidNameChars.ReplaceAllString(name, "-")
	if len(name) > 64 {
		name = name[:64]
	}
	if name == "" {
		return "", errors.New("fleet: empty host name")
	}
	return name, nil
}

var invalidNameChars = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// redact drops the user information of the URLs for logs.
func redact(urls string) string {
	var out []string
	for u := range strings.SplitSeq(urls, ",") {
		if at := strings.LastIndex(u, "@"); at >= 0 {
			if scheme := strings.Index(u, "://"); scheme >= 0 && scheme < at {
				u = u[:scheme+3] + "***" + u[at:]
			}
		}
		out = append(out, strings.TrimSpace(u))
	}
	return strings.Join(out, ",")
}

// Close closes the connection. Run closes it itself when it returns.
func (c *Client) Close() { c.nc.Close() }

// setUnusable records why the bucket cannot be used (nil: no reason
// known), logging a reason once: a hub that stays out of reach must not
// fill the journal.
func (c *Client) setUnusable(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.usable = false
	if err == nil || err.Error() == c.lastErr {
		return
	}
	c.lastErr = err.Error()
	c.logger.Warn("fleet store unusable; publications wait in the queue, retrying", "err", err)
}

func (c *Client) setUsable() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.usable {
		c.logger.Info("fleet store bucket bound", "bucket", c.opts.Bucket)
	}
	c.usable, c.lastErr = true, ""
}

// Run binds the bucket whenever the client is connected, watches the
// network's entries into the cache and publishes the queue, until ctx
// ends; then it publishes what is queued if it can within a second, and
// closes the connection. Failures only delay: it returns nil.
func (c *Client) Run(ctx context.Context) error {
	defer c.nc.Close()
	for ctx.Err() == nil {
		if !c.nc.IsConnected() {
			select {
			case <-ctx.Done():
			case <-c.reconnected:
			case <-time.After(reconnectWait):
			}
			continue
		}
		// A signal from before this session is stale.
		select {
		case <-c.reconnected:
		default:
		}
		err := c.session(ctx)
		if err != nil && ctx.Err() == nil {
			c.setUnusable(err)
			select {
			case <-ctx.Done():
			case <-c.reconnected:
			case <-time.After(reconnectWait):
			}
		}
	}
	return nil
}

// session binds the bucket, and watches and publishes until ctx ends, the
// connection is renewed (nil) or the bucket stops answering.
func (c *Client) session(ctx context.Context) error {
	kv, err := c.bind(ctx)
	if err != nil {
		return err
	}
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := kv.Watch(watchCtx, c.opts.Network+".>")
	if err != nil {
		return fmt.Errorf("watch bucket %s: %w", c.opts.Bucket, err)
	}
	defer func() { _ = w.Stop() }()
	c.setUsable()
	defer c.setUnusable(nil)
	tick := time.NewTicker(c.opts.PublishInterval)
	defer tick.Stop()
	// answered is when the bucket last answered a request of this
	// session.
	answered := time.Now()
	for {
		select {
		case <-ctx.Done():
			flushCtx, cancel := context.WithTimeout(context.Background(), closeFlushTimeout)
			defer cancel()
			if _, err := c.flush(flushCtx, kv); err != nil {
				c.logger.Info("fleet store: publications left unsent at exit", "queued", c.Stats().Queued, "err", err)
			}
			return nil
		case <-c.reconnected:
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("bucket watch ended")
			}
			answered = time.Now()
			if e != nil { // nil marks the end of the initial values
				c.ingest(e)
			}
		case <-tick.C:
			ok, err := c.flush(ctx, kv)
			if err != nil {
				return err
			}
			if ok {
				answered = time.Now()
			}
			if time.Since(answered) < healthTicks*c.opts.PublishInterval {
				continue
			}
			if err := c.probe(ctx, kv); err != nil {
				return err
			}
			answered = time.Now()
		}
	}
}

// probe asks the bucket for a key no host writes: the answer that it has
// none says the bucket is there.
func (c *Client) probe(ctx context.Context, kv jetstream.KeyValue) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	_, err := kv.Get(ctx, c.opts.Network+".probe")
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("bucket %s does not answer: %w", c.opts.Bucket, err)
	}
	return nil
}

// bind opens the bucket, creating it when no host has yet. Entries live
// for MaxAge in the bucket too, so that it does not grow for ever, and the
// bucket holds MaxBytes at most, one value per key.
func (c *Client) bind(ctx context.Context) (jetstream.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	kv, err := js.KeyValue(ctx, c.opts.Bucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: c.opts.Bucket, Description: "m2ho per-cell estimates shared by a fleet",
			History: 1, TTL: c.opts.MaxAge, MaxValueSize: maxValueSize, MaxBytes: c.opts.MaxBytes,
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // another host was faster
			kv, err = js.KeyValue(ctx, c.opts.Bucket)
		}
	case err == nil:
		c.bound(ctx, js, kv)
	}
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", c.opts.Bucket, err)
	}
	return kv, nil
}

// bound gives a bucket created without a size bound (by an m2hod that set
// none, or by hand) MaxBytes, and one value per key. A host that may not
// change it still uses it.
func (c *Client) bound(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue) {
	st, err := kv.Status(ctx)
	if err != nil {
		c.logger.Info("fleet store: cannot read the bucket's configuration", "bucket", c.opts.Bucket, "err", err)
		return
	}
	cfg := st.Config()
	if cfg.MaxBytes > 0 && cfg.History == 1 {
		return
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = c.opts.MaxBytes
	}
	cfg.History = 1
	if _, err := js.UpdateKeyValue(ctx, cfg); err != nil {
		c.logger.Warn("fleet store: cannot bound the bucket's size", "bucket", c.opts.Bucket, "err", err)
		return
	}
	c.logger.Info("fleet store: bucket bounded", "bucket", c.opts.Bucket, "max_bytes", cfg.MaxBytes)
}

// ingest puts a watched entry in the cache, or takes a deleted one out.
func (c *Client) ingest(kve jetstream.KeyValueEntry) {
	key, host, err := parseKey(c.opts.Network, kve.Key())
	var e entry
	if err == nil && kve.Operation() == jetstream.KeyValuePut {
		e, err = decodeEntry(key, kve.Value(), kve.Created())
	} else if err != nil {
		err = &malformedError{reason: MalformedKey, err: err}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.malformed[malformedReason(err)]++
		c.logger.Debug("fleet entry skipped", "key", kve.Key(), "err", err)
		return
	}
	if kve.Operation() != jetstream.KeyValuePut {
		c.forgetLocked(key, host) // deleted, or aged out in the bucket
		return
	}
	hosts := c.peers[key]
	old, known := hosts[host]
	if !known && c.cached >= c.opts.MaxEntries {
		c.malformed[MalformedCapacity]++
		c.logger.Debug("fleet entry skipped: cache full", "key", kve.Key(), "entries", c.cached)
		return
	}
	reports := e.Reports
	if c.kinds-len(old.reports)+len(reports) > kindsPerEntry*c.opts.MaxEntries {
		// The buffer estimate and the lead still count.
		c.malformed[MalformedCapacity]++
		c.logger.Debug("fleet entry's report counts skipped: cache full", "key", kve.Key(), "kinds", c.kinds)
		reports = nil
	}
	if hosts == nil {
		hosts = make(map[string]peerEntry)
		c.peers[key] = hosts
	}
	if !known {
		c.cached++
	}
	c.kinds += len(reports) - len(old.reports)
	hosts[host] = peerEntry{bufferBytes: e.BufferBytes, reports: reports, stored: kve.Created()}
	band := diag.BandOf(key.RAT, key.ARFCN)
	if e.Lead == nil {
		c.forgetLeadLocked(band, host, key)
		return
	}
	if c.leads[band] == nil {
		c.leads[band] = make(map[string]peerLead)
	}
	c.leads[band][host] = peerLead{lead: e.Lead.lead(), samples: e.Lead.Samples, stored: kve.Created(), cell: key}
}

// forgetLocked takes what host published about the cell of key out of
// the cache.
func (c *Client) forgetLocked(key diag.CellKey, host string) {
	old, known := c.peers[key][host]
	if !known {
		return
	}
	c.cached--
	c.kinds -= len(old.reports)
	delete(c.peers[key], host)
	if len(c.peers[key]) == 0 {
		delete(c.peers, key)
	}
	c.forgetLeadLocked(diag.BandOf(key.RAT, key.ARFCN), host, key)
}

// forgetLeadLocked drops host's lead of band if the entry of key carried
// it; the host's next entry of the band brings it back.
func (c *Client) forgetLeadLocked(band diag.Band, host string, key diag.CellKey) {
	if l, ok := c.leads[band][host]; ok && l.cell == key {
		delete(c.leads[band], host)
	}
}

// Lookup returns the lower median of the buffer estimates that hosts
// reported for cell within MaxAge. Its answer is unbounded: the
// estimator, which knows the floor and the ceiling, bounds it.
func (c *Client) Lookup(cell diag.Cell) (uint64, bool) {
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var fresh []uint64
	for _, p := range c.peers[cell.Key()] {
		if p.bufferBytes > 0 && now.Sub(p.stored) <= c.opts.MaxAge {
			fresh = append(fresh, p.bufferBytes)
		}
	}
	if len(fresh) == 0 {
		c.misses++
		return 0, false
	}
	c.hits++
	return stats.LowerMedian(fresh), true
}

// ReportPrior returns the lower median, over the hosts that published
// counts of a kind of report measured while cell served (within MaxAge),
// of the share a command followed, and how many reports they counted
// together. The state machine bounds the weight of the answer.
func (c *Client) ReportPrior(cell diag.CellKey, event diag.MeasEvent, measured diag.Band, carrier string) (float64, uint32, bool) {
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var shares []float64
	var reports uint64
	for _, p := range c.peers[cell] {
		if now.Sub(p.stored) > c.opts.MaxAge {
			continue
		}
		i := slices.IndexFunc(p.reports, func(r reportCount) bool { return r.is(event, measured, carrier) })
		if i < 0 || p.reports[i].Reports == 0 {
			continue
		}
		r := p.reports[i]
		shares = append(shares, float64(r.Followed)/float64(r.Reports))
		reports += uint64(r.Reports)
	}
	if len(shares) == 0 {
		return 0, 0, false
	}
	return stats.LowerMedian(shares), uint32(min(reports, math.MaxUint32)), true
}

// LeadPrior returns the lower median of the report-to-command leads hosts
// published for serving cells of band (within MaxAge), and how many
// intervals they rest on together. Each lead is at most maxPeerLead; the
// state machine caps what it uses lower.
func (c *Client) LeadPrior(band diag.Band) (time.Duration, int, bool) {
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var leads []time.Duration
	samples := 0
	for _, l := range c.leads[band] {
		if now.Sub(l.stored) <= c.opts.MaxAge {
			leads = append(leads, l.lead)
			samples += l.samples
		}
	}
	if len(leads) == 0 {
		return 0, 0, false
	}
	return stats.LowerMedian(leads), samples, true
}

// Publish queues this host's latest record of a cell.
func (c *Client) Publish(r estimator.CellRecord, rate float64) {
	if r.Cell.RAT == "" || r.BufferBytes == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key, e := c.ownLocked(r.Cell)
	next := entryOf(r, rate)
	if rate == 0 {
		next.RateBytesPerSecond = e.RateBytesPerSecond
	}
	next.Reports = e.Reports
	*e = next
	c.enqueueLocked(key)
}

// publishReports queues the learning predictor's counts of one kind of
// report measured in a serving cell. Counts of a band, or of a pair of
// cells, are not a cell's and stay local, and so do another network's.
func (c *Client) publishReports(s statemachine.ReportStats) {
	if s.Cell.IsZero() || !s.Neighbor.IsZero() || s.Cell.RAT == "" || s.Network != c.opts.Network {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key, e := c.ownLocked(s.Cell)
	count := reportCount{Event: s.Event, Measured: s.Measured, Carrier: s.Carrier, Reports: s.Reports, Followed: s.Followed}
	i := slices.IndexFunc(e.Reports, func(r reportCount) bool { return r.is(s.Event, s.Measured, s.Carrier) })
	switch {
	case i >= 0:
		e.Reports[i] = count
	case len(e.Reports) < maxReports:
		e.Reports = append(e.Reports, count)
	default:
		return
	}
	if e.Updated.IsZero() || c.opts.Now().After(e.Updated) {
		e.Updated = c.opts.Now()
	}
	c.enqueueLocked(key)
}

// publishLeads keeps this host's lead of a band for the entries of its
// cells. It queues none itself: the command that brought the interval
// also changed the serving cell's report counts, which queued its entry.
func (c *Client) publishLeads(l statemachine.LeadStats) {
	if l.Network != c.opts.Network || len(l.Samples) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ownLeads[l.Band] = leadSummary{Quantile: statemachine.LeadQuantile,
		Millis: float64(l.Lead()) / float64(time.Millisecond), Samples: len(l.Samples)}
}

func (c *Client) ownLocked(cell diag.Cell) (string, *entry) {
	cell = cell.Normalized()
	key := cellKey(c.opts.Network, cell, c.opts.Host)
	e, ok := c.own[key]
	if !ok {
		e = &entry{Version: entryVersion, RAT: cell.RAT, Band: cell.Band, ARFCN: cell.ARFCN, PCI: cell.PCI}
		c.own[key] = e
	}
	return key, e
}

// enqueueLocked queues key unless it waits already, pushing the oldest
// out of a full queue: that cell's next change queues it again.
func (c *Client) enqueueLocked(key string) {
	c.versions[key]++
	if c.queued[key] {
		return
	}
	if len(c.queue) >= c.opts.QueueSize {
		delete(c.queued, c.queue[0])
		c.queue = c.queue[1:]
		c.dropped++
	}
	c.queue = append(c.queue, key)
	c.queued[key] = true
}

// flush publishes the queued entries while connected, and tells whether
// the bucket answered. A cell leaves the queue once its latest entry is
// published, or refused by the server (a full bucket: counted, and
// queued again by the cell's next change); one that changed meanwhile
// stays for the next round. The first request nobody answers ends the
// round.
func (c *Client) flush(ctx context.Context, kv jetstream.KeyValue) (bool, error) {
	if !c.nc.IsConnected() {
		return false, nil // the publications wait; a reconnection renews the session
	}
	c.mu.Lock()
	keys := slices.Clone(c.queue)
	values := make([][]byte, len(keys))
	versions := make([]uint64, len(keys))
	for i, k := range keys {
		e := *c.own[k]
		if l, ok := c.ownLeads[e.Band]; ok {
			e.Lead = &l
		}
		v, err := json.Marshal(e)
		if err != nil { // an entry holds no type that fails to encode
			c.mu.Unlock()
			return false, fmt.Errorf("encode %s: %w", k, err)
		}
		values[i], versions[i] = v, c.versions[k]
	}
	c.mu.Unlock()
	answered := false
	for i, k := range keys {
		putCtx, cancel := context.WithTimeout(ctx, requestTimeout)
		_, err := kv.Put(putCtx, k, values[i])
		cancel()
		var refused *jetstream.APIError
		if err != nil && !errors.As(err, &refused) {
			return answered, fmt.Errorf("publish %s: %w", k, err)
		}
		answered = true
		c.mu.Lock()
		if refused != nil {
			c.rejected++
			if refused.Error() != c.lastRefusal {
				c.lastRefusal = refused.Error()
				c.logger.Warn("fleet store refused a publication; the cell waits for its next change", "key", k, "err", refused)
			}
		} else {
			c.published++
			c.lastRefusal = "" // the next refusal is news again
		}
		if c.versions[k] == versions[i] && c.queued[k] {
			c.queue = slices.DeleteFunc(c.queue, func(q string) bool { return q == k })
			delete(c.queued, k)
		}
		c.mu.Unlock()
	}
	return answered, nil
}

// Stats returns the counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Stats{
		Connected: c.usable && c.nc.IsConnected(), Entries: c.cached, Hits: c.hits, Misses: c.misses,
		Queued: len(c.queue), Dropped: c.dropped, Published: c.published, Rejected: c.rejected,
		Malformed: maps.Clone(c.malformed),
	}
	if !st.Connected {
		st.Error = c.lastErr
	}
	return st
}

// LearntStore returns next with every change of the learning
// predictor's counts and leads also queued for the fleet, and which
// answers, as a statemachine.LearntPrior, with what the other hosts
// learnt.
func (c *Client) LearntStore(next statemachine.LearntStore) statemachine.LearntStore {
	return learntTee{LearntStore: next, fleet: c}
}

// learntTee is a LearntStore whose saves the fleet publishes, and the
// fleet's LearntPrior.
type learntTee struct {
	statemachine.LearntStore
	fleet *Client
}

func (t learntTee) SaveReportStats(s statemachine.ReportStats) error {
	t.fleet.publishReports(s)
	return t.LearntStore.SaveReportStats(s)
}

func (t learntTee) SaveLeadStats(l statemachine.LeadStats) error {
	t.fleet.publishLeads(l)
	return t.LearntStore.SaveLeadStats(l)
}

func (t learntTee) ReportPrior(cell diag.CellKey, event diag.MeasEvent, measured diag.Band, carrier string) (float64, uint32, bool) {
	return t.fleet.ReportPrior(cell, event, measured, carrier)
}

func (t learntTee) LeadPrior(band diag.Band) (time.Duration, int, bool) {
	return t.fleet.LeadPrior(band)
}
