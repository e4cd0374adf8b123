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
// estimator bounds whatever the fleet answers (estimator.SourceFleet).
package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	// PublishInterval paces the publisher; DefaultPublishInterval when 0.
	PublishInterval time.Duration
	Logger          *slog.Logger
	// Now is the clock entries are aged against; time.Now when nil.
	Now func() time.Time
}

// peerEntry is what one host reported about a cell.
type peerEntry struct {
	bufferBytes uint64
	// stored is when the server stored the entry: its age does not
	// depend on the peer's clock.
	stored time.Time
}

// Stats are the client's counters, for metrics and /status.
type Stats struct {
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
	// Malformed counts skipped entries by reason (Malformed* constants).
	Malformed map[string]uint64 `json:"malformed"`
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
	// cached counts the entries in peers, at most opts.MaxEntries.
	cached int
	// own is the latest entry of each cell this host publishes, by key.
	own map[string]*entry
	// queue holds the keys of own waiting for publication, oldest first.
	queue  []string
	queued map[string]bool
	// versions counts the changes of each entry of own.
	versions  map[string]uint64
	hits      uint64
	misses    uint64
	dropped   uint64
	published uint64
	malformed map[string]uint64
}

var _ estimator.Fleet = (*Client)(nil)

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
		own:         make(map[string]*entry),
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
		nats.ReconnectWait(reconnectWait),
		// A vehicle leaving coverage closes nothing: the pings find
		// the dead link, in 40 s rather than the client's default 4 min.
		nats.PingInterval(pingInterval),
		nats.Timeout(requestTimeout),
		nats.ConnectHandler(func(nc *nats.Conn) { c.onConnect(nc, "connected") }),
		nats.ReconnectHandler(func(nc *nats.Conn) { c.onConnect(nc, "reconnected") }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			c.logger.Info("fleet store disconnected; publications wait in the queue", "err", err)
		}),
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

// Run binds the bucket whenever the client is connected, watches the
// network's entries into the cache and publishes the queue, until ctx
// ends; then it publishes what is queued if it can within a second, and
// closes the connection. Failures only delay: it returns nil.
func (c *Client) Run(ctx context.Context) error {
	defer c.nc.Close()
	var lastErr string
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
			// Logged once per kind of failure: a bucket that stays
			// unreachable must not fill the journal.
			if err.Error() != lastErr {
				c.logger.Warn("fleet store unusable; retrying", "err", err)
				lastErr = err.Error()
			}
			select {
			case <-ctx.Done():
			case <-c.reconnected:
			case <-time.After(reconnectWait):
			}
			continue
		}
		lastErr = ""
	}
	return nil
}

// session binds the bucket, and watches and publishes until ctx ends, the
// connection is renewed (nil) or a request fails.
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
	tick := time.NewTicker(c.opts.PublishInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			flushCtx, cancel := context.WithTimeout(context.Background(), closeFlushTimeout)
			defer cancel()
			if err := c.flush(flushCtx, kv); err != nil {
				c.logger.Info("fleet store: publications left unsent at exit", "queued", c.Stats().Queued, "err", err)
			}
			return nil
		case <-c.reconnected:
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("bucket watch ended")
			}
			if e != nil { // nil marks the end of the initial values
				c.ingest(e)
			}
		case <-tick.C:
			if err := c.flush(ctx, kv); err != nil {
				return err
			}
		}
	}
}

// bind opens the bucket, creating it when no host has yet. Entries live
// for MaxAge in the bucket too, so that it does not grow for ever.
func (c *Client) bind(ctx context.Context) (jetstream.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	kv, err := js.KeyValue(ctx, c.opts.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: c.opts.Bucket, Description: "m2ho per-cell estimates shared by a fleet",
			History: 1, TTL: c.opts.MaxAge, MaxValueSize: maxValueSize,
		})
		if errors.Is(err, jetstream.ErrBucketExists) { // another host was faster
			kv, err = js.KeyValue(ctx, c.opts.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", c.opts.Bucket, err)
	}
	return kv, nil
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
	if kve.Operation() != jetstream.KeyValuePut || e.BufferBytes == 0 {
		// Deleted, aged out in the bucket, or trigger counts alone.
		if _, known := c.peers[key][host]; known {
			c.cached--
		}
		delete(c.peers[key], host)
		if len(c.peers[key]) == 0 {
			delete(c.peers, key)
		}
		return
	}
	hosts := c.peers[key]
	if _, known := hosts[host]; !known {
		if c.cached >= c.opts.MaxEntries {
			c.malformed[MalformedCapacity]++
			c.logger.Debug("fleet entry skipped: cache full", "key", kve.Key(), "entries", c.cached)
			return
		}
		c.cached++
	}
	if hosts == nil {
		hosts = make(map[string]peerEntry)
		c.peers[key] = hosts
	}
	hosts[host] = peerEntry{bufferBytes: e.BufferBytes, stored: kve.Created()}
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
		if now.Sub(p.stored) <= c.opts.MaxAge {
			fresh = append(fresh, p.bufferBytes)
		}
	}
	if len(fresh) == 0 {
		c.misses++
		return 0, false
	}
	c.hits++
	slices.Sort(fresh)
	return fresh[(len(fresh)-1)/2], true
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
// cells, are not a cell's and stay local.
func (c *Client) publishReports(s statemachine.ReportStats) {
	if s.Cell.IsZero() || !s.Neighbor.IsZero() || s.Cell.RAT == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key, e := c.ownLocked(s.Cell)
	count := reportCount{Event: s.Event, Measured: s.Measured, Reports: s.Reports, Followed: s.Followed}
	i := slices.IndexFunc(e.Reports, func(r reportCount) bool { return r.Event == s.Event && r.Measured == s.Measured })
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

// flush publishes the queued entries while connected. A cell leaves the
// queue once its latest entry is published; one that changed meanwhile
// stays for the next round. The first failure ends the round.
func (c *Client) flush(ctx context.Context, kv jetstream.KeyValue) error {
	if !c.nc.IsConnected() {
		return nil // the publications wait; a reconnection renews the session
	}
	c.mu.Lock()
	keys := slices.Clone(c.queue)
	values := make([][]byte, len(keys))
	versions := make([]uint64, len(keys))
	for i, k := range keys {
		v, err := json.Marshal(c.own[k])
		if err != nil { // an entry holds no type that fails to encode
			c.mu.Unlock()
			return fmt.Errorf("encode %s: %w", k, err)
		}
		values[i], versions[i] = v, c.versions[k]
	}
	c.mu.Unlock()
	for i, k := range keys {
		putCtx, cancel := context.WithTimeout(ctx, requestTimeout)
		_, err := kv.Put(putCtx, k, values[i])
		cancel()
		if err != nil {
			return fmt.Errorf("publish %s: %w", k, err)
		}
		c.mu.Lock()
		c.published++
		if c.versions[k] == versions[i] && c.queued[k] {
			c.queue = slices.DeleteFunc(c.queue, func(q string) bool { return q == k })
			delete(c.queued, k)
		}
		c.mu.Unlock()
	}
	return nil
}

// Stats returns the counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		Connected: c.nc.IsConnected(), Entries: c.cached, Hits: c.hits, Misses: c.misses,
		Queued: len(c.queue), Dropped: c.dropped, Published: c.published, Malformed: maps.Clone(c.malformed),
	}
}

// LearntStore returns next with every change of the learning
// predictor's counts also queued for the fleet.
func (c *Client) LearntStore(next statemachine.LearntStore) statemachine.LearntStore {
	return learntTee{next: next, fleet: c}
}

type learntTee struct {
	next  statemachine.LearntStore
	fleet *Client
}

func (t learntTee) LoadReportStats() ([]statemachine.ReportStats, error) {
	return t.next.LoadReportStats()
}

func (t learntTee) SaveReportStats(s statemachine.ReportStats) error {
	t.fleet.publishReports(s)
	return t.next.SaveReportStats(s)
}
