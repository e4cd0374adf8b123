package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/m2ho/m2ho/pkg/datapath"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/rrc"
	"github.com/m2ho/m2ho/pkg/fleet"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

// Status is the /status document.
type Status struct {
	// State is stable, preparation or smoothing.
	State statemachine.State `json:"state"`
	// Serving is the cell data flows through.
	Serving diag.Cell `json:"serving_cell"`
	Mode    string    `json:"mode"`
	// Policy is the configured policy (m2ho or freeze); InForce is what
	// the datapath enforces now.
	Policy     string         `json:"policy"`
	InForce    PolicyInForce  `json:"policy_in_force"`
	AttachMode string         `json:"attach_mode"`
	Cells      []CellStatus   `json:"cells"`
	Datapath   DatapathStatus `json:"datapath"`
	Diag       DiagStatus     `json:"diag"`
	// Network is the mobile network what is learnt belongs to.
	Network NetworkStatus       `json:"network"`
	Machine statemachine.Status `json:"machine"`
	// Fleet is the fleet store's state, absent without one. Estimates
	// taken from it show as the clamp source fleet.
	Fleet  *fleet.Stats `json:"fleet,omitempty"`
	Uptime float64      `json:"uptime_seconds"`
}

// PolicyInForce is the policy installed in the datapath, as the daemon
// wrote it (in observe mode: as it would have written it).
type PolicyInForce struct {
	ClampBytes          uint32     `json:"clamp_bytes"`
	ClampSource         string     `json:"clamp_source,omitempty"`
	ClampDeadline       *time.Time `json:"clamp_deadline,omitempty"`
	Freeze              bool       `json:"freeze"`
	Suppressing         bool       `json:"suppressing"`
	SuppressionDeadline *time.Time `json:"suppression_deadline,omitempty"`
	Epoch               uint32     `json:"epoch"`
}

// CellStatus is the buffer estimate of one cell, and the queue it last
// overflowed at (estimator.CellRecord.CeilingBytes).
type CellStatus struct {
	Cell         diag.Cell `json:"cell"`
	BufferBytes  uint64    `json:"buffer_bytes"`
	CeilingBytes uint64    `json:"ceiling_bytes,omitempty"`
	Bursts       uint64    `json:"bursts"`
	Updated      time.Time `json:"updated"`
}

// DatapathStatus is what the BPF side counted.
type DatapathStatus struct {
	Counters datapath.Counters `json:"counters"`
	Flows    int               `json:"flows"`
	// Error is set when the datapath could not be read.
	Error string `json:"error,omitempty"`
}

// DiagStatus counts the diag input by event type and error reason: over
// every input, and for each input by its URI; and it says, for each
// input, which SIM subscription of a multi-SIM modem it follows.
type DiagStatus struct {
	Events        map[string]uint64                 `json:"events"`
	Errors        map[string]uint64                 `json:"errors"`
	Inputs        map[string]InputStatus            `json:"inputs"`
	Subscriptions map[string]rrc.SubscriptionStatus `json:"subscriptions"`
}

// InputStatus is what one diag input gave.
type InputStatus struct {
	Events map[string]uint64 `json:"events"`
	Errors map[string]uint64 `json:"errors"`
	// LastEvent is absent before the input's first event.
	LastEvent *time.Time `json:"last_event,omitempty"`
}

// loopStatus builds the part of /status that belongs to the loop: the
// machine, the estimator and the policy. It runs on the loop.
func (d *Daemon) loopStatus() Status {
	now := time.Now()
	ms := d.machine.Status()
	p := d.act.snapshot(now)
	st := Status{
		State:   ms.State,
		Serving: ms.Serving,
		InForce: PolicyInForce{
			ClampBytes: p.ClampBytes, ClampSource: ms.InForce.ClampSource, Freeze: p.Freeze,
			Suppressing: p.Suppressing, Epoch: p.Epoch,
		},
		Cells:   []CellStatus{},
		Network: d.network.status(),
		Machine: ms,
	}
	if p.ClampBytes > 0 || p.Freeze {
		st.InForce.ClampDeadline = &p.ClampDeadline
	}
	if p.Suppressing {
		st.InForce.SuppressionDeadline = &p.SuppressDeadline
	}
	for _, c := range d.est.Cells() {
		st.Cells = append(st.Cells, CellStatus{Cell: c.Cell, BufferBytes: c.BufferBytes, CeilingBytes: c.CeilingBytes, Bursts: c.Bursts, Updated: c.Updated})
	}
	return st
}

// Status returns the /status document. The loop contributes its part;
// the datapath and input counters are read here, off the loop, so that a
// walk of a large flow table never delays an event. It fails when the loop
// does not answer before ctx ends.
func (d *Daemon) Status(ctx context.Context) (Status, error) {
	reply := make(chan Status, 1)
	select {
	case d.statusReq <- reply:
	case <-ctx.Done():
		return Status{}, fmt.Errorf("status: loop busy: %w", ctx.Err())
	}
	var st Status
	select {
	case st = <-reply:
	case <-ctx.Done():
		return Status{}, fmt.Errorf("status: loop busy: %w", ctx.Err())
	}
	st.Mode, st.Policy, st.AttachMode = string(d.cfg.Mode), string(d.cfg.Policy), d.dp.AttachMode()
	st.Uptime = time.Since(d.started).Seconds()
	if d.fleet != nil {
		fs := d.fleet.Stats()
		st.Fleet = &fs
	}
	counters, err := d.dp.Counters()
	if err == nil {
		var flows []datapath.Flow
		flows, err = d.dp.Flows()
		st.Datapath = DatapathStatus{Counters: counters, Flows: len(flows)}
	}
	if err != nil {
		st.Datapath.Error = err.Error()
	}
	st.Diag = DiagStatus{Events: map[string]uint64{}, Errors: map[string]uint64{}, Inputs: map[string]InputStatus{},
		Subscriptions: map[string]rrc.SubscriptionStatus{}}
	for _, in := range d.inputs {
		events, errs := in.Stats.Snapshot()
		is := InputStatus{Events: map[string]uint64{}, Errors: map[string]uint64{}}
		addCounts(is.Events, st.Diag.Events, events)
		addCounts(is.Errors, st.Diag.Errors, errs)
		if last := in.Stats.LastEvent(); !last.IsZero() {
			is.LastEvent = &last
		}
		st.Diag.Inputs[in.Name] = is
	}
	for i, subs := range d.subscriptions {
		st.Diag.Subscriptions[d.sources[i].Name()] = subs.Status()
	}
	return st, nil
}

// addCounts adds the counts cs to the input's map and to the total.
func addCounts(input, total map[string]uint64, cs []diag.Counter) {
	for _, c := range cs {
		input[c.Label] = c.Value
		total[c.Label] += c.Value
	}
}

func (d *Daemon) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", d.metrics.Handler())
	mux.HandleFunc("GET /healthz", d.serveHealthz)
	mux.HandleFunc("GET /status", d.serveStatus)
	return mux
}

// Healthy fails when the loop has stalled: policies are renewed by the
// loop, so a stalled loop means the datapath is failing open. /healthz
// and systemd's watchdog both ask it.
func (d *Daemon) Healthy() error {
	last := d.lastTick.Load()
	if age := time.Since(time.Unix(0, last)); last == 0 || age > stallAfter {
		return fmt.Errorf("%w: loop stalled: last tick %v ago", errNotHealthy, age.Round(time.Millisecond))
	}
	return nil
}

// Summary says what the daemon does, in a line.
func (d *Daemon) Summary() string {
	return fmt.Sprintf("%s on %s (%s, attached: %s)", d.cfg.Policy, d.cfg.Iface, d.cfg.Mode, d.dp.AttachMode())
}

// serveHealthz reports whether the loop is alive (see Healthy).
func (d *Daemon) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	if err := d.Healthy(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

func (d *Daemon) serveStatus(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), statusTimeout)
	defer cancel()
	st, err := d.Status(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(st); err != nil {
		d.logger.Debug("writing /status", "err", err)
	}
}
