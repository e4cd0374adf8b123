package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/cellstore"
	"github.com/m2ho/m2ho/pkg/config"
	"github.com/m2ho/m2ho/pkg/datapath"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/metrics"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// fakeDatapath records policy writes and serves scripted measurements.
type fakeDatapath struct {
	mu       sync.Mutex
	calls    []string
	clamp    uint32
	flows    []datapath.Flow
	counters datapath.Counters
	pending  int
	bursts   chan datapath.Burst
	closed   bool
	// keptFlows: the daemon closed with CloseKeepingFlows
	keptFlows bool
	failOp    string
	// pendingReads counts the calls of SuppressionPending.
	pendingReads int
	// handoverEpoch: a suppression start (a handover's epoch) succeeded
	// and no stop, nor a Preparation's suppression, followed.
	handoverEpoch bool
}

func newFakeDatapath() *fakeDatapath { return &fakeDatapath{bursts: make(chan datapath.Burst, 16)} }

func (f *fakeDatapath) record(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if op == f.failOp {
		return errors.New("map update failed")
	}
	f.calls = append(f.calls, op)
	return nil
}

func (f *fakeDatapath) SetClamp(bytes uint32, _ time.Time) error {
	if err := f.record(statemachine.OpSetClamp); err != nil {
		return err
	}
	f.mu.Lock()
	f.clamp = bytes
	f.mu.Unlock()
	return nil
}
func (f *fakeDatapath) SetFreeze(time.Time) error { return f.record(statemachine.OpSetFreeze) }
func (f *fakeDatapath) ClearClamp() error         { return f.record(statemachine.OpClearClamp) }
func (f *fakeDatapath) PrepareSuppression(time.Time) error {
	if err := f.record(statemachine.OpPrepareSuppression); err != nil {
		return err
	}
	f.mu.Lock()
	f.handoverEpoch = false
	f.mu.Unlock()
	return nil
}
func (f *fakeDatapath) StartSuppression(time.Time) (uint32, error) {
	if err := f.record(statemachine.OpStartSuppression); err != nil {
		return 0, err
	}
	f.mu.Lock()
	f.handoverEpoch = true
	f.mu.Unlock()
	return 7, nil
}
func (f *fakeDatapath) StopSuppression() error {
	if err := f.record(statemachine.OpStopSuppression); err != nil {
		return err
	}
	f.mu.Lock()
	f.handoverEpoch = false
	f.mu.Unlock()
	return nil
}
func (f *fakeDatapath) AttachMode() string { return "fake" }
func (f *fakeDatapath) SuppressionPending() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pendingReads++
	if !f.handoverEpoch {
		// As the datapath: no flow is pending outside a handover's epoch.
		return 0, nil
	}
	return f.pending, nil
}
func (f *fakeDatapath) Counters() (datapath.Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counters, nil
}
func (f *fakeDatapath) IngressBytes() (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counters[datapath.IngressBytes], nil
}
func (f *fakeDatapath) Flows() ([]datapath.Flow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]datapath.Flow(nil), f.flows...), nil
}
func (f *fakeDatapath) EvictIdle(_, _ time.Duration) (int, error) { return 0, nil }
func (f *fakeDatapath) RTTHistogram() ([]uint64, error) {
	return make([]uint64, datapath.RTTBuckets), nil
}
func (f *fakeDatapath) ReadBursts(ctx context.Context, fn func(datapath.Burst)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case b := <-f.bursts:
			fn(b)
		}
	}
}
func (f *fakeDatapath) FlushBursts() error { return nil }
func (f *fakeDatapath) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func (f *fakeDatapath) CloseKeepingFlows() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed, f.keptFlows = true, true
	return nil
}

func (f *fakeDatapath) callsSnapshot() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// chanSource is a diag input fed by the test.
type chanSource struct {
	events chan diag.Event
	err    error
}

func (s *chanSource) Name() string { return "test:" }
func (s *chanSource) Run(ctx context.Context, out chan<- diag.Event) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-s.events:
			if !ok {
				return s.err
			}
			out <- ev
		}
	}
}

func testConfig(t testing.TB) config.Config {
	cfg := config.Default()
	cfg.Iface = "wwan0"
	cfg.Diag = []string{"test:"}
	cfg.Listen = "127.0.0.1:0"
	cfg.StateDir = t.TempDir()
	return cfg
}

type harness struct {
	d      *Daemon
	dp     *fakeDatapath
	src    *chanSource
	obs    *transitionLog
	cancel context.CancelFunc
	done   chan error
}

// transitionLog records the machine's transitions as "from>to:reason",
// so that a test can tell what ended a state, and passes everything on to
// the daemon's own observer.
type transitionLog struct {
	statemachine.Observer
	mu  sync.Mutex
	log []string
}

func (l *transitionLog) Transition(from, to statemachine.State, reason string, at time.Time) {
	l.mu.Lock()
	l.log = append(l.log, from.String()+">"+to.String()+":"+reason)
	l.mu.Unlock()
	l.Observer.Transition(from, to, reason, at)
}

// last is the latest transition, "" before any.
func (l *transitionLog) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.log) == 0 {
		return ""
	}
	return l.log[len(l.log)-1]
}

func startHarness(t *testing.T, cfg config.Config) *harness {
	t.Helper()
	h := &harness{dp: newFakeDatapath(), src: &chanSource{events: make(chan diag.Event)}, done: make(chan error, 1)}
	var err error
	h.d, err = open(cfg, nil, opener{
		datapath: func(datapath.Options) (datapathAPI, error) { return h.dp, nil },
		source:   func(string, diagsrc.Options) (diag.Source, error) { return h.src, nil },
	})
	require.NoError(t, err)
	// Before Run: the loop is the machine's only user from then on.
	h.obs = &transitionLog{Observer: observer{h.d.metrics}}
	h.d.machine.SetObserver(h.obs)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-h.done:
			assert.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return h
}

func (h *harness) status(t *testing.T) Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := h.d.Status(ctx)
	require.NoError(t, err)
	return st
}

// TestCloseKeepingFlows: a daemon told to keep its flows releases the
// policy in force and leaves its flow state pinned when it stops; any
// other stop removes it.
func TestCloseKeepingFlows(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			h := startHarness(t, testConfig(t))
			h.src.events <- a3(cellA, cellB)
			require.Eventually(t, func() bool { return h.status(t).State == statemachine.Preparation },
				time.Second, time.Millisecond)
			if keep {
				h.d.KeepFlowsAtExit()
			}
			h.cancel()
			require.NoError(t, waitReturned(t, h.done, "Run"))
			h.dp.mu.Lock()
			defer h.dp.mu.Unlock()
			assert.True(t, h.dp.closed)
			assert.Equal(t, keep, h.dp.keptFlows)
			if keep {
				require.GreaterOrEqual(t, len(h.dp.calls), 2)
				assert.Equal(t, []string{statemachine.OpClearClamp, statemachine.OpStopSuppression}, h.dp.calls[len(h.dp.calls)-2:],
					"the clamp of Preparation released")
			}
		})
	}
}

var (
	cellA = diag.Cell{RAT: diag.RATNR, Band: diag.BandSub6, PCI: 1, ARFCN: 632628}
	cellB = diag.Cell{RAT: diag.RATNR, Band: diag.BandSub6, PCI: 2, ARFCN: 632628}
)

func a3(serving, neighbor diag.Cell) diag.Event {
	return diag.Event{Type: diag.TypeMeasReport, Meas: diag.EventA3, Serving: serving, Neighbor: neighbor}
}

func TestPolicyFollowsEvents(t *testing.T) {
	tests := []struct {
		name        string
		mode        config.Mode
		policy      config.Policy
		wantCalls   []string
		wantClamp   uint32
		wantFreeze  bool
		wantForward bool
	}{
		{name: "enforce m2ho", mode: config.ModeEnforce, policy: config.PolicyM2HO,
			wantCalls: []string{statemachine.OpPrepareSuppression, statemachine.OpSetClamp}, wantClamp: uint32(estimator.DefaultConfig().DefaultBufferBytes), wantForward: true},
		{name: "enforce freeze", mode: config.ModeEnforce, policy: config.PolicyFreeze,
			wantCalls: []string{statemachine.OpSetFreeze}, wantFreeze: true, wantForward: true},
		{name: "observe writes nothing", mode: config.ModeObserve, policy: config.PolicyM2HO,
			wantClamp: uint32(estimator.DefaultConfig().DefaultBufferBytes)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Mode, cfg.Policy = tt.mode, tt.policy
			h := startHarness(t, cfg)
			h.src.events <- a3(cellA, cellB)
			require.Eventually(t, func() bool { return h.status(t).State.String() == "preparation" }, 2*time.Second, 5*time.Millisecond)

			st := h.status(t)
			assert.Equal(t, tt.wantClamp, st.InForce.ClampBytes)
			assert.Equal(t, tt.wantFreeze, st.InForce.Freeze)
			assert.NotNil(t, st.InForce.ClampDeadline, "every policy carries a deadline")
			assert.Equal(t, string(tt.mode), st.Mode)
			assert.Equal(t, cellA, st.Serving)
			calls := h.dp.callsSnapshot()
			if tt.wantForward {
				require.NotEmpty(t, calls)
				require.GreaterOrEqual(t, len(calls), len(tt.wantCalls))
				assert.Equal(t, tt.wantCalls, calls[:len(tt.wantCalls)])
			} else {
				assert.Empty(t, calls, "observe mode never writes a policy")
			}
		})
	}
}

func (f *fakeDatapath) pendingReadCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pendingReads
}

func (f *fakeDatapath) setPending(n int) {
	f.mu.Lock()
	f.pending = n
	f.mu.Unlock()
}

// handover runs a predicted handover from cell A to cell B and waits for
// Smoothing.
func (h *harness) handover(t *testing.T) {
	t.Helper()
	h.src.events <- a3(cellA, cellB)
	h.src.events <- diag.Event{Type: diag.TypeHOCommand, Kind: diag.HOPCell, Source: cellA, Target: cellB}
	h.src.events <- diag.Event{Type: diag.TypeHOComplete, Cell: cellB}
	require.Eventually(t, func() bool { return h.status(t).State == statemachine.Smoothing }, 2*time.Second, time.Millisecond)
}

func TestSmoothingEndsWhenFlowsRelease(t *testing.T) {
	cfg := testConfig(t)
	// The longest Smoothing allowed: the flows release well before it,
	// and the transition's reason tells a release from the timeout.
	cfg.SmoothingMax = 190 * time.Millisecond
	h := startHarness(t, cfg)
	h.dp.setPending(1)
	h.handover(t)
	st := h.status(t)
	assert.True(t, st.InForce.Suppressing)
	assert.Equal(t, uint32(7), st.InForce.Epoch, "the epoch the datapath returned")

	// A flow still pending holds Smoothing across ticks, which come every
	// pollInterval: about ten in 100 ms, where the idle pace gives one or
	// two and a flow's release would wait up to idleInterval.
	reads := h.dp.pendingReadCount()
	time.Sleep(10 * pollInterval)
	assert.Equal(t, statemachine.Smoothing, h.status(t).State)
	assert.GreaterOrEqual(t, h.dp.pendingReadCount()-reads, 5, "ticks in 100 ms of Smoothing")

	h.dp.setPending(0)
	require.Eventually(t, func() bool { return h.status(t).State == statemachine.Stable }, 2*time.Second, time.Millisecond)
	assert.Equal(t, "smoothing>stable:flows_released", h.obs.last())
	assert.Contains(t, h.dp.callsSnapshot(), statemachine.OpStopSuppression)
}

// TestSmoothingEndsOnTheTargetCellsDrain: the first burst period of the
// target cell after the handover ends Smoothing, whether the datapath saw
// it as a packet train of real size or rb_alloc shows it in the slots;
// a lone packet does not, nor does any burst while a flow waits for its
// forwarded data. SmoothingMax is long enough to tell them apart.
func TestSmoothingEndsOnTheTargetCellsDrain(t *testing.T) {
	fullSlot, partialSlot, emptySlot := diag.Slot{Given: 100, Total: 106}, diag.Slot{Given: 20, Total: 106}, diag.Slot{Total: 106}
	tests := []struct {
		name    string
		mode    config.Mode
		pending int
		// bytes of the datapath train, or 0 for an rb_alloc event instead.
		bytes uint64
		// drainBurst is the configured drain_burst_bytes (0: default)
		drainBurst uint64
		want       string
	}{
		{name: "a drain-sized train", mode: config.ModeObserve, bytes: 100_000, want: "smoothing>stable:burst_end"},
		{name: "a burst period in the target cell's slots", mode: config.ModeObserve, want: "smoothing>stable:burst_end"},
		{name: "a lone 52-byte packet", mode: config.ModeObserve, bytes: 52, want: "smoothing>stable:smoothing_max"},
		{name: "a drain while a flow waits", mode: config.ModeEnforce, pending: 1, bytes: 100_000, want: "smoothing>stable:smoothing_max"},
		{name: "a train below the configured drain size", mode: config.ModeObserve, bytes: 100_000, drainBurst: 200_000,
			want: "smoothing>stable:smoothing_max"},
		{name: "a small train at a configured small drain size", mode: config.ModeObserve, bytes: 3000, drainBurst: 3000,
			want: "smoothing>stable:burst_end"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Mode = tc.mode
			cfg.DrainBurstBytes = tc.drainBurst
			cfg.SmoothingMax = 190 * time.Millisecond
			h := startHarness(t, cfg)
			h.dp.setPending(tc.pending)
			h.handover(t)
			if tc.pending > 0 {
				// The loop learns of the waiting flow at a tick.
				require.Eventually(t, func() bool { return h.dp.pendingReadCount() > 0 }, time.Second, time.Millisecond)
			}
			if tc.bytes > 0 {
				// After the execution: the loop stamped it before.
				start := time.Now()
				h.dp.bursts <- datapath.Burst{Start: start, End: start.Add(2 * time.Millisecond), Bytes: tc.bytes, Packets: tc.bytes/1500 + 1}
			} else {
				// The loop takes the slots to end at receipt; they must
				// lie after the execution.
				time.Sleep(5 * time.Millisecond)
				h.src.events <- diag.Event{Type: diag.TypeRBAlloc, Cell: cellB, SlotDuration: 500 * time.Microsecond,
					Slots: []diag.Slot{fullSlot, fullSlot, partialSlot, emptySlot}}
			}
			require.Eventually(t, func() bool { return h.status(t).State == statemachine.Stable }, 2*time.Second, time.Millisecond)
			assert.Equal(t, tc.want, h.obs.last())
		})
	}
}

// TestFailedSuppressionStartIsRetried: a StartSuppression write that
// failed leaves suppression off in the datapath, whose pending count is
// then 0; that must not read as every flow released, or Smoothing ends
// before the machine's Tick retries the write.
func TestFailedSuppressionStartIsRetried(t *testing.T) {
	cfg := testConfig(t)
	cfg.SmoothingMax = 190 * time.Millisecond
	h := startHarness(t, cfg)
	h.dp.mu.Lock()
	h.dp.failOp = statemachine.OpStartSuppression
	h.dp.mu.Unlock()
	h.dp.setPending(1)
	h.handover(t)
	// Several ticks pass with the write failing.
	time.Sleep(3 * pollInterval)
	assert.Equal(t, statemachine.Smoothing, h.status(t).State, "Smoothing outlives a failed suppression start")
	assert.NotContains(t, h.dp.callsSnapshot(), statemachine.OpStopSuppression)

	h.dp.mu.Lock()
	h.dp.failOp = ""
	h.dp.mu.Unlock()
	require.Eventually(t, func() bool { return h.status(t).InForce.Suppressing }, time.Second, time.Millisecond,
		"a tick retried the write")
	assert.Equal(t, statemachine.Smoothing, h.status(t).State)
	h.dp.setPending(0)
	require.Eventually(t, func() bool { return h.status(t).State == statemachine.Stable }, 2*time.Second, time.Millisecond)
	assert.Equal(t, "smoothing>stable:flows_released", h.obs.last())
}

func TestBurstsTeachTheServingCell(t *testing.T) {
	h := startHarness(t, testConfig(t))
	h.src.events <- a3(cellA, cellB)
	h.src.events <- diag.Event{Type: diag.TypeMeasReport, Meas: diag.EventA1, Serving: cellA}
	// Bursts and events reach the loop on different channels: the burst
	// must come once the serving cell is known.
	require.Eventually(t, func() bool { return h.status(t).Serving == cellA }, 2*time.Second, time.Millisecond)
	// A burst that started before cell A served could be the previous
	// cell's: this one starts after.
	start := time.Now()
	h.dp.bursts <- datapath.Burst{Start: start, End: start.Add(20 * time.Millisecond), Bytes: 400000, Packets: 280}
	require.Eventually(t, func() bool {
		for _, c := range h.status(t).Cells {
			if c.Cell == cellA && c.BufferBytes == 400000 {
				return true
			}
		}
		return false
	}, 2*time.Second, 5*time.Millisecond, "the burst became cell A's estimate")
}

func TestHTTPEndpoints(t *testing.T) {
	h := startHarness(t, testConfig(t))
	base := "http://" + h.d.Addr().String()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	require.Eventually(t, func() bool { code, _ := get("/healthz"); return code == http.StatusOK }, 2*time.Second, 5*time.Millisecond)

	code, body := get("/status")
	require.Equal(t, http.StatusOK, code)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	for _, key := range []string{"state", "serving_cell", "policy", "policy_in_force", "cells", "datapath", "attach_mode", "diag", "machine"} {
		assert.Contains(t, doc, key)
	}
	assert.Equal(t, "stable", doc["state"])
	assert.Equal(t, "fake", doc["attach_mode"])
	assert.Equal(t, map[string]any{"test:": map[string]any{"followed": 0.0, "auto": true, "seen": []any{}}},
		doc["diag"].(map[string]any)["subscriptions"], "the SIM subscription each input follows")

	code, body = get("/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, name := range []string{"m2hod_state", "m2hod_clamp_bytes", "m2hod_flows", "m2hod_rtt_seconds_bucket", "m2hod_info"} {
		assert.Contains(t, body, "\n"+name)
	}

	code, _ = get("/nope")
	assert.Equal(t, http.StatusNotFound, code)
	resp, err := http.Post(base+"/status", "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

func TestHealthzReportsStalledLoop(t *testing.T) {
	cfg := testConfig(t)
	d, err := open(cfg, nil, opener{
		datapath: func(datapath.Options) (datapathAPI, error) { return newFakeDatapath(), nil },
		source:   func(string, diagsrc.Options) (diag.Source, error) { return &chanSource{}, nil },
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	tests := []struct {
		name     string
		lastTick time.Time
		want     int
	}{
		{"never ticked", time.Time{}, http.StatusServiceUnavailable},
		{"ticked just now", time.Now(), http.StatusOK},
		{"stalled", time.Now().Add(-3 * stallAfter), http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.lastTick.IsZero() {
				d.lastTick.Store(0)
			} else {
				d.lastTick.Store(tt.lastTick.UnixNano())
			}
			rec := &responseRecorder{header: http.Header{}}
			d.serveHealthz(rec, nil)
			assert.Equal(t, tt.want, rec.code)
		})
	}
}

// responseRecorder is the minimum http.ResponseWriter for a handler call.
type responseRecorder struct {
	header http.Header
	code   int
	body   strings.Builder
}

func (r *responseRecorder) Header() http.Header { return r.header }
func (r *responseRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *responseRecorder) WriteHeader(code int) { r.code = code }

func TestRunStopsOnSourceFailureAndDetaches(t *testing.T) {
	cfg := testConfig(t)
	dp := newFakeDatapath()
	src := &chanSource{events: make(chan diag.Event), err: errors.New("serial device gone")}
	d, err := open(cfg, nil, opener{
		datapath: func(datapath.Options) (datapathAPI, error) { return dp, nil },
		source:   func(string, diagsrc.Options) (diag.Source, error) { return src, nil },
	})
	require.NoError(t, err)
	close(src.events)
	err = d.Run(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "serial device gone")
	assert.True(t, dp.closed, "the datapath is detached")
	store, err := cellstore.Open(cfg.StateDir, cellstore.Options{})
	require.NoError(t, err, "the store was closed and unlocked")
	require.NoError(t, store.Close())
}

func TestOpenErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()

	tests := []struct {
		name     string
		mutate   func(*config.Config)
		dpErr    error
		srcErr   error
		wantErr  string
		wantDone bool // the datapath was opened, so it must be closed
	}{
		{name: "missing interface", dpErr: datapath.ErrNoInterface, wantErr: "interface wwan0 not found"},
		{name: "kernel without BPF", dpErr: datapath.ErrUnsupported, wantErr: "this kernel cannot run the m2ho programs"},
		{name: "no privileges", dpErr: datapath.ErrPermission, wantErr: "not enough privileges to load the m2ho programs"},
		{name: "diag input", srcErr: errors.New("address already in use"), wantErr: "diag input test:: address already in use", wantDone: true},
		{name: "busy listen port", mutate: func(c *config.Config) { c.Listen = busy.Addr().String() }, wantErr: "listen " + busy.Addr().String(), wantDone: true},
		{name: "unusable state dir", mutate: func(c *config.Config) { c.StateDir = "/proc/m2ho" }, wantErr: "cell store"},
		{name: "estimator rejects its config", mutate: func(c *config.Config) { c.Lambda = -1 }, wantErr: "estimator: lambda -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			if tt.mutate != nil {
				tt.mutate(&cfg)
			}
			dp := newFakeDatapath()
			opened := false
			_, err := open(cfg, nil, opener{
				datapath: func(datapath.Options) (datapathAPI, error) {
					if tt.dpErr != nil {
						return nil, tt.dpErr
					}
					opened = true
					return dp, nil
				},
				source: func(string, diagsrc.Options) (diag.Source, error) {
					if tt.srcErr != nil {
						return nil, tt.srcErr
					}
					return &chanSource{}, nil
				},
			})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
			assert.Equal(t, tt.wantDone, opened && dp.closed, "an opened datapath is detached again")
			if _, statErr := os.Stat(filepath.Join(cfg.StateDir, cellstore.FileName)); statErr == nil {
				store, err := cellstore.Open(cfg.StateDir, cellstore.Options{})
				require.NoError(t, err, "the store was released")
				require.NoError(t, store.Close())
			}
		})
	}
}

func TestRecorderFailure(t *testing.T) {
	dp := newFakeDatapath()
	dp.failOp = statemachine.OpSetClamp
	m := metrics.New([]string{"stable"}, metrics.Info{}, metrics.Sources{}, nil)
	r := &recorder{next: dp, metrics: m}
	deadline := time.Now().Add(time.Second)
	require.Error(t, r.SetClamp(100000, deadline))
	assert.Zero(t, r.snapshot(time.Now()).ClampBytes, "a failed write is not in force")
	assert.Zero(t, r.writeCount())
	require.NoError(t, r.SetFreeze(deadline))
	p := r.snapshot(time.Now())
	assert.True(t, p.Freeze)
	assert.False(t, r.snapshot(deadline).Freeze, "gone at its deadline, as in the datapath")
}

func TestRTTSampler(t *testing.T) {
	local := netip.MustParseAddrPort("10.0.0.2:40000")
	peer1 := netip.MustParseAddrPort("192.0.2.1:443")
	peer2 := netip.MustParseAddrPort("192.0.2.2:443")
	flow := func(remote netip.AddrPort, samples uint64, rtt time.Duration) datapath.Flow {
		return datapath.Flow{Local: local, Remote: remote, RTTSamples: samples, RTTLatest: rtt}
	}
	ms := time.Millisecond
	steps := []struct {
		name     string
		path     uint64
		flows    []datapath.Flow
		wantRTTs []time.Duration
	}{
		{"first sample", 0, []datapath.Flow{flow(peer1, 1, 20*ms)}, []time.Duration{20 * ms}},
		{"no new sample", 0, []datapath.Flow{flow(peer1, 1, 20*ms)}, nil},
		{"new samples: only the latest", 0, []datapath.Flow{flow(peer1, 5, 30*ms)}, []time.Duration{30 * ms}},
		{"flow without samples", 0, []datapath.Flow{flow(peer1, 5, 30*ms), flow(peer2, 0, 0)}, nil},
		{"second flow measures", 0, []datapath.Flow{flow(peer1, 6, 25*ms), flow(peer2, 1, 40*ms)},
			[]time.Duration{25 * ms, 40 * ms}},
		{"first evicted", 0, []datapath.Flow{flow(peer2, 1, 40*ms)}, nil},
		{"key reused by a new connection", 0, []datapath.Flow{flow(peer1, 1, 5*ms), flow(peer2, 1, 40*ms)},
			[]time.Duration{5 * ms}},
		// The serving cell changed since the last walk: peer1's new
		// sample may predate the handover, so the walk only takes the
		// counts.
		{"serving cell changed", 1, []datapath.Flow{flow(peer1, 2, 5*ms), flow(peer2, 1, 40*ms)}, nil},
		{"samples after the change", 1, []datapath.Flow{flow(peer1, 3, 60*ms), flow(peer2, 1, 40*ms)},
			[]time.Duration{60 * ms}},
		{"empty table", 1, nil, nil},
	}
	s := newRTTSampler()
	for _, step := range steps {
		var rtts []time.Duration
		s.observe(step.path, step.flows, func(rtt time.Duration) { rtts = append(rtts, rtt) })
		assert.Equal(t, step.wantRTTs, rtts, step.name)
	}
}

func TestStartsOverCorruptStore(t *testing.T) {
	cfg := testConfig(t)
	path := filepath.Join(cfg.StateDir, cellstore.FileName)
	require.NoError(t, os.WriteFile(path, []byte(strings.Repeat("garbage ", 1000)), 0o600))
	h := startHarness(t, cfg)
	assert.Empty(t, h.status(t).Cells, "a fresh store")
	aside, err := filepath.Glob(path + ".corrupt-*")
	require.NoError(t, err)
	assert.Len(t, aside, 1, "the corrupt file is kept aside")
}

func TestFlowPinDir(t *testing.T) {
	netns, err := os.Readlink("/proc/self/ns/net")
	require.NoError(t, err)
	// "net:[4026531840]": the inode of this network namespace
	ino := strings.TrimSuffix(strings.TrimPrefix(netns, "net:["), "]")
	tests := []struct {
		name   string
		pinDir string
		iface  string
		want   string
	}{
		{"off", "", "wwan0", ""},
		{"modem", "/sys/fs/bpf/m2ho", "wwan0", "/sys/fs/bpf/m2ho/wwan0:netns" + ino},
		{"VLAN interface, whose dot the BPF filesystem refuses", "/sys/fs/bpf/m2ho", "eth0.100", "/sys/fs/bpf/m2ho/eth0:100:netns" + ino},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := flowPinDir(config.Config{PinDir: tt.pinDir, Iface: tt.iface})
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
