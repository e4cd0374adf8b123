// Command m2hod is the M2HO daemon: it predicts 5G handovers from modem
// diagnostics and drives the BPF datapath that protects TCP from them.
//
//	m2hod --iface IFACE [--config FILE] [--diag URI ...] [--mode enforce|observe]
//	      [--listen 127.0.0.1:9569] [--state-dir DIR] [--log-level info]
//	      [--log-format text|json|journal]
//	m2hod decode [--raw] URI
//	m2hod replay [--json] URI...
//	m2hod version (or --version)
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
	"runtime"
	"strings"
	"syscall"

	"github.com/m2ho/m2ho/pkg/config"
	"github.com/m2ho/m2ho/pkg/daemon"
	"github.com/m2ho/m2ho/pkg/datapath"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/diag/rrc"
	"github.com/m2ho/m2ho/pkg/version"
)

// Exit codes, those of the LSB for init scripts, which systemd names in
// systemctl status. The unit's RestartPreventExitStatus lists those a
// restart cannot mend: not exitFailure, nor exitUsage, which the Go
// runtime also exits with after a panic or a SIGABRT.
const (
	// exitFailure: a failure while starting or running that a restart
	// may mend (a port in use, a diag input lost for good).
	exitFailure = 1
	// exitUsage: a mistake on the command line.
	exitUsage = 2
	// exitUnsupported: the kernel cannot run the programs (too old, or
	// the interface's link type is not handled).
	exitUnsupported = 3
	// exitPermission: not enough privileges to load the programs.
	exitPermission = 4
	// exitConfig: a configuration that reads but is wrong (a bad value,
	// an unknown key, a missing file).
	exitConfig = 6
)

func main() {
	// One OS thread runs Go code: the daemon is a single event loop with
	// a few helpers, and on a router every extra thread woken for a diag
	// event or a sample costs a context switch. GOMAXPROCS set in the
	// environment still wins.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
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
	if len(args) > 0 {
		switch args[0] {
		case "decode":
			return decode(ctx, args[1:], stdout, stderr)
		case "version":
			fmt.Fprintln(stdout, "m2hod", version.Get())
			return 0
		}
	}
	if len(args) > 0 && args[0] == "replay" {
		return replayCommand(ctx, args[1:], stdout, stderr)
	}
	// Help asked for is the output, on stdout.
	cfg, err := config.Parse(args, stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, config.ErrVersion):
		fmt.Fprintln(stdout, "m2hod", version.Get())
		return 0
	case errors.Is(err, config.ErrCommandLine):
		fmt.Fprintf(stderr, "m2hod: %v\n", err)
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "m2hod: %v\n", err)
		return exitConfig
	}
	// SIGHUP would otherwise end the process, and systemd takes a
	// SIGHUP death for a clean exit, which Restart=on-failure leaves be.
	requests := make(chan os.Signal, 1)
	signal.Notify(requests, syscall.SIGHUP)
	defer signal.Stop(requests)
	level := new(slog.LevelVar)
	level.Set(cfg.LogLevel)
	// The format stays that of the start: a reload that changed it would
	// split one journal between two.
	logger := daemon.NewLogger(stderr, cfg.LogFormat, level)
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

// fail prints the one-line reason of a failure and returns its exit code.
// Some errors carry more (a verifier log spans hundreds of lines): that
// goes to the debug log.
func fail(stderr io.Writer, logger *slog.Logger, err error) int {
	reason, detail, multiline := strings.Cut(err.Error(), "\n")
	fmt.Fprintf(stderr, "m2hod: %s\n", reason)
	if multiline {
		logger.Debug("failure detail", "detail", detail)
	}
	switch {
	case errors.Is(err, datapath.ErrPermission):
		return exitPermission
	case errors.Is(err, datapath.ErrUnsupported):
		return exitUnsupported
	}
	return exitFailure
}

// parseSubcommand parses a subcommand's flags. Help asked for is the
// output (on stdout, exit 0); a mistake gets a one-line reason on stderr
// and the usage status. done says the command ends here with code.
func parseSubcommand(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintln(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0, true
	}
	fmt.Fprintf(stderr, "%s: %v (%s -h lists the flags)\n", fs.Name(), err, fs.Name())
	return exitUsage, true
}

// decode prints the events of a diag input as version-1 JSON lines, or
// its DIAG log packets with --raw, and a summary of what was skipped.
func decode(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const usage = "usage: m2hod decode [--raw] [--subscription auto|N] URI   (jsonl:PATH, qmdl:PATH, pcap:PATH, unix:PATH, udp://, gsmtap://, serial:DEV)"
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
	if code, done := parseSubcommand(fs, args, usage, stdout, stderr); done {
		return code
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
		return inputFailure(err)
	}
	return 0
}

// inputFailure is the exit status of a command whose input failed: the
// usage status when the URI names no input the command reads, else 1.
func inputFailure(err error) int {
	if errors.Is(err, diagsrc.ErrBadURI) {
		return exitUsage
	}
	return exitFailure
}
