// Command m2hod is the M2HO daemon: it predicts 5G handovers from modem
// diagnostics and drives the BPF datapath that protects TCP from them.
//
//	m2hod --iface IFACE [--config FILE] [--diag URI ...] [--mode enforce|observe]
//	      [--listen 127.0.0.1:9569] [--state-dir DIR] [--log-level info]
//	m2hod decode [--raw] URI
//	m2hod replay [--json] URI...
//
// SIGTERM or an interrupt stops it; SIGHUP reloads the configuration
// (see daemon.Serve).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/m2ho/m2ho/pkg/config"
	"github.com/m2ho/m2ho/pkg/daemon"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/diag/rrc"
)

// Exit codes: 2 for usage errors (bad flags or configuration), 1 for
// failures while starting or running.
const (
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := stopContext(context.Background())
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// stopContext is done at the first SIGTERM or interrupt, which asks m2hod
// to detach and exit. Only the first is caught: from then on the signals
// take their default action again, so that an operator can still kill a
// process whose shutdown is stuck.
func stopContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(parent, syscall.SIGTERM, os.Interrupt)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "decode" {
		return decode(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "replay" {
		return replayCommand(ctx, args[1:], stdout, stderr)
	}
	cfg, err := config.Parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "m2hod: %v\n", err)
		return exitUsage
	}
	// SIGHUP would otherwise end the process, and systemd takes a
	// SIGHUP death for a clean exit, which Restart=on-failure leaves be.
	requests := make(chan os.Signal, 1)
	signal.Notify(requests, syscall.SIGHUP)
	defer signal.Stop(requests)
	level := new(slog.LevelVar)
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	reload := daemon.Reload{
		Requests: requests,
		// The same flags over the file, as at the start; their usage
		// text has no reader here.
		Load:    func() (config.Config, error) { return config.Parse(args, io.Discard) },
		Opening: func(cfg config.Config) { level.Set(cfg.LogLevel) },
	}
	if err := daemon.Serve(ctx, cfg, logger, reload); err != nil {
		return fail(stderr, logger, err)
	}
	return 0
}

// fail prints the one-line reason of a failure. Some errors carry more
// (a verifier log spans hundreds of lines): that goes to the debug log.
func fail(stderr io.Writer, logger *slog.Logger, err error) int {
	reason, detail, multiline := strings.Cut(err.Error(), "\n")
	fmt.Fprintf(stderr, "m2hod: %s\n", reason)
	if multiline {
		logger.Debug("failure detail", "detail", detail)
	}
	return exitFailure
}

// decode prints the events of a diag input as version-1 JSON lines, or
// its DIAG log packets with --raw, and a summary of what was skipped.
func decode(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const usage = "usage: m2hod decode [--raw] URI   (jsonl:PATH, qmdl:PATH, pcap:PATH, udp://, gsmtap://, serial:)"
	fs := flag.NewFlagSet("m2hod decode", flag.ContinueOnError)
	// A mistake gets a one-line reason; the full usage is for -h.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	raw := fs.Bool("raw", false, "list every DIAG log packet (time, log code, version, length, decoded) instead of events")
	follow := rrc.FollowAuto
	fs.Func("subscription", "SIM subscription whose events to print: auto (the one carrying data, else 0) or an index from 0", func(s string) (err error) {
		follow, err = rrc.ParseFollow(s)
		return err
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, usage)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "m2hod decode: %v (m2hod decode -h lists the flags)\n", err)
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, usage)
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var stats diag.Stats
	subs := rrc.NewSubscriptions(logger, follow)
	opts := diagsrc.Options{Stats: &stats, RRC: subs, Logger: logger}
	err := diagsrc.Decode(ctx, stdout, fs.Arg(0), *raw, opts)
	if st := subs.Status(); len(st.Seen) > 1 {
		fmt.Fprintf(stderr, "subscription followed: %d (%s)\n", st.Followed, follow)
		for _, c := range st.Seen {
			fmt.Fprintf(stderr, "subscription %d: %d rrc messages, %d events printed, %d not\n", c.Subscription, c.Messages, c.Events, c.DroppedEvents)
		}
	}
	events, errs := stats.Snapshot()
	for _, c := range events {
		fmt.Fprintf(stderr, "events %s: %d\n", c.Label, c.Value)
	}
	for _, c := range errs {
		fmt.Fprintf(stderr, "skipped %s: %d\n", c.Label, c.Value)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "m2hod decode: %v\n", err)
		return exitFailure
	}
	return 0
}
