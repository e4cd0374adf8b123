package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/m2ho/m2ho/pkg/config"
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
func Serve(ctx context.Context, cfg config.Config, logger *slog.Logger, reload Reload) error {
	return serve(ctx, cfg, logger, reload, func(cfg config.Config) (runner, error) { return Open(cfg, logger) })
}

func serve(ctx context.Context, cfg config.Config, logger *slog.Logger, reload Reload,
	openDaemon func(config.Config) (runner, error)) error {
	opening := func(cfg config.Config) (runner, error) {
		if reload.Opening != nil {
			reload.Opening(cfg)
		}
		return openDaemon(cfg)
	}
	d, err := opening(cfg)
	if err != nil {
		return err
	}
	for {
		next, err := runUntilReload(ctx, d, cfg, logger, reload)
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
