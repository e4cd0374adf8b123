package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/m2ho/m2ho/pkg/config"
	"github.com/m2ho/m2ho/pkg/metrics"
)

// interfacePoll paces the look for the interface while m2hod waits for
// it: a modem takes seconds to enumerate, and a lookup costs microseconds.
const interfacePoll = 500 * time.Millisecond

// WaitingStatus is the /status document while m2hod waits for the modem
// interface.
type WaitingStatus struct {
	// State is always "waiting_for_interface".
	State string    `json:"state"`
	Iface string    `json:"iface"`
	Since time.Time `json:"waiting_since"`
}

// waitForInterface returns once an interface named cfg.Iface exists in
// the network namespace, or when ctx ends. Meanwhile the HTTP endpoints
// answer on cfg.Listen: /status and /metrics (m2hod_waiting_for_interface
// 1) say what m2hod waits for, and /healthz is 200, since waiting is the
// daemon doing its job.
func waitForInterface(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	listener, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	status := WaitingStatus{State: "waiting_for_interface", Iface: cfg.Iface, Since: time.Now()}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.NewWaiting(logger).Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "ok: waiting for the interface %s\n", cfg.Iface)
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(status)
	})
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- server.Serve(listener) }()
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdownCtx)
	}()

	ticker := time.NewTicker(interfacePoll)
	defer ticker.Stop()
	for {
		if _, err := net.InterfaceByName(cfg.Iface); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			if !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http: %w", err)
			}
			return nil
		case <-ticker.C:
		}
	}
}
