package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/m2ho/m2ho/pkg/config"
	"github.com/m2ho/m2ho/pkg/datapath"
)

// Reload is how Serve takes a new configuration while it runs.
type Reload struct {
	// Requests delivers a value at every request to reload: SIGHUP, with
	// signal.Notify, which drops a signal while one is pending.
	Requests <-chan os.Signal
	// Load reads the configuration again, from the same flags and file.
	Load func() (config.Config, error)
	// Opening is called with every configuration Serve opens a daemon
	// with, before it does: the caller sets its log level there. Nil
	// means nothing to do.
	Opening func(config.Config)
}

// runner is the part of a Daemon that Serve drives.
type runner interface {
	Run(ctx context.Context) error
	KeepFlowsAtExit()
	// Healthy fails while the daemon runs but no longer does its work
	// (see Daemon.Healthy).
	Healthy() error
	// Summary is a line on what the daemon does, for systemctl status.
	Summary() string
}

// Serve opens a daemon with cfg and runs it until ctx ends (it returns
// nil) or the daemon fails (it returns the error). At every reload
// request it reads the configuration again and, if it is valid, restarts
// the daemon with it in place: the programs are detached and loaded
// again, the policy in force is released, the cell history is kept on
// disk, and so is the pinned flow state when the interface and pin
// directory stay (open connections are adopted again either way). A configuration that does not validate leaves the running
// daemon alone; one that validates but cannot be opened (an interface or
// a port that is not there) brings back the previous one. Either way the
// error is logged, so that a typo in the file never stops the service.
//
// At the start, a modem interface that is not there yet (the modem still
// enumerates, or resets) is waited for, with the HTTP endpoints telling
// so (see waitForInterface), rather than an exit.
//
// Under systemd (Type=notify), Serve tells it when the daemon is ready,
// what it does, and when it stops, and pings the watchdog for as long as
// the daemon is healthy: a loop that stalls stops the pings, and systemd
// restarts the service after WatchdogSec.
func Serve(ctx context.Context, cfg config.Config, logger *slog.Logger, reload Reload) error {
	n, err := notifierFromEnv()
	if err != nil {
		logger.Warn("systemd notifications off", "err", err)
	}
	defer n.close()
	return serve(ctx, cfg, logger, reload, n, func(cfg config.Config) (runner, error) { return Open(cfg, logger) },
		func(ctx context.Context, cfg config.Config) error { return waitForInterface(ctx, cfg, logger) })
}

func serve(ctx context.Context, cfg config.Config, logger *slog.Logger, reload Reload, n *notifier,
	openDaemon func(config.Config) (runner, error), waitInterface func(context.Context, config.Config) error) error {
	// current is the running daemon, nil while none runs.
	var current atomic.Pointer[runner]
	if n != nil && n.watchdog > 0 {
		watchCtx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		go pingWatchdog(watchCtx, n, n.watchdog, func() error {
			if d := current.Load(); d != nil {
				return (*d).Healthy()
			}
			return nil
		}, logger)
	}
	opening := func(cfg config.Config) (runner, error) {
		if reload.Opening != nil {
			reload.Opening(cfg)
		}
		d, err := openDaemon(cfg)
		if err == nil {
			current.Store(&d)
			notifyLog(n, logger, "READY=1", "STATUS="+d.Summary())
		}
		return d, err
	}
	defer func() { notifyLog(n, logger, "STOPPING=1") }()
	d, err := opening(cfg)
	for errors.Is(err, datapath.ErrNoInterface) {
		logger.Warn("waiting for the modem interface", "iface", cfg.Iface)
		notifyLog(n, logger, "READY=1", "STATUS=waiting for the interface "+cfg.Iface)
		if err := waitInterface(ctx, cfg); err != nil || ctx.Err() != nil {
			return err
		}
		logger.Info("the modem interface is there", "iface", cfg.Iface)
		d, err = opening(cfg)
	}
	if err != nil {
		return err
	}
	for {
		next, err := runUntilReload(ctx, d, cfg, logger, reload)
		current.Store(nil)
		if err != nil || next == nil || ctx.Err() != nil {
			return err
		}
		if d, err = opening(*next); err == nil {
			cfg = *next
			logger.Info("configuration reloaded")
			continue
		}
		logger.Error("cannot start with the reloaded configuration: going back to the previous one", "err", err)
		if d, err = opening(cfg); err != nil {
			return fmt.Errorf("the previous configuration failed too: %w", err)
		}
	}
}

// notifyLog sends a notification to systemd; a failure only costs the
// notification, and is logged.
func notifyLog(n *notifier, logger *slog.Logger, lines ...string) {
	if err := n.send(lines...); err != nil {
		logger.Warn("notifying systemd", "err", err)
	}
}

// pingWatchdog pings systemd's watchdog every interval while healthy
// says so, until ctx ends.
func pingWatchdog(ctx context.Context, n *notifier, interval time.Duration, healthy func() error, logger *slog.Logger) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if err := healthy(); err != nil {
			logger.Error("watchdog not pinged", "err", err)
			continue
		}
		notifyLog(n, logger, "WATCHDOG=1")
	}
}

// runUntilReload runs d, opened with cfg, until ctx ends or d fails, which
// it returns as (nil, err), or until a reload request brings a valid
// configuration, which it returns once d has stopped.
func runUntilReload(ctx context.Context, d runner, cfg config.Config, logger *slog.Logger, reload Reload) (*config.Config, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	for {
		select {
		case err := <-done:
			return nil, err
		case <-reload.Requests:
			next, err := reload.Load()
			if err != nil {
				logger.Error("configuration not reloaded: the daemon goes on with the running one", "err", err)
				continue
			}
			logger.Info("reloading the configuration: restarting in place")
			if samePins(cfg, next) {
				d.KeepFlowsAtExit()
			}
			cancel()
			if err := <-done; err != nil {
				return nil, err
			}
			return &next, nil
		}
	}
}

// samePins says whether daemons with configurations a and b pin their
// flows in the same place (see flowPinDir), so that b's takes a's over.
func samePins(a, b config.Config) bool {
	return a.PinDir != "" && a.PinDir == b.PinDir && a.Iface == b.Iface
}
