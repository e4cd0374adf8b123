// Command m2ho-testbed runs the 5G handover testbed: a scenario with one
// variant (run), the demo comparison of CUBIC with and without m2ho (demo),
// the section 6 evaluation over a generated corpus (eval), handover
// prediction on a corpus's signalling (predict), the scenario generator
// (gen-scenario), one variant in two evaluations (compare), the emulator's fidelity measurement
// (fidelity), two CPEs sharing a fleet store (fleet), and the removal of
// what crashed runs left (cleanup). See docs/testbed.md.
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
	"syscall"

	"github.com/m2ho/m2ho/test/emu"
)

const usage = `usage: m2ho-testbed COMMAND [flags]

commands:
  run --scenario FILE --variant cubic|scubic|bbr|reno[+m2ho|+freeze|+m2ho-no-COMPONENT] --out DIR [--m2hod PATH] [--pcap] [--diag-flush 50ms]
  demo [--out out/demo] [--scenario test/scenarios/demo.yaml] [--m2hod bin/m2hod] [--diag-flush 50ms]
  gen-scenario --seed N [--duration 120s] [--mobility walking|driving] [--scale 0.1] [--match-mix] [--traces DIR] [--leads paper|captures] [--lan-receiver] [--cell-buffer D] [--source-discard] [--route] [--out FILE]
  eval [--out out/eval] [--handovers 140] [--seed 1] [--scenario-duration 2m] [--mobility walking,driving] [--traces DIR] [--cell-buffer D] [--source-discard] [--leads paper|captures]
       [--variants LIST] [--extra-variants LIST] [--extra-scenarios 1] [--m2hod bin/m2hod] [--diag-flush 50ms] [--parallel 1] [--report-only]
  compare --a DIR --b DIR [--variant scubic]   one variant in two evaluations of one corpus, paired: B against A
  predict [--handovers 1000] [--seed 1] [--scenario-duration 2m] [--mobility walking,driving] [--traces DIR] [--leads paper|captures]
                                     handover prediction (Table 4 and 5) on a generated corpus's signalling, without running it
  fidelity [--out DIR]                  the emulator's own fidelity (packet rate, TCP on a constant link)
  fidelity --paper [--from EVALDIR] [--senders cubic,scubic] [--out DIR]   the paper's section 3 with plain senders
  fidelity --similarity [--full-mbps 150] [--scale 0.1] [--out DIR]        scaled CUBIC against the kernel's CUBIC
  leads [--out FILE] URI...          report-to-command and command-to-completion leads of real captures
  fleet [--out out/fleet] [--scenarios 6] [--seed 1] [--mobility driving] [--scenario-duration 2m] [--scale 0.1] [--traces DIR]
        [--scenario FILE] [--variant scubic+m2ho] [--m2hod bin/m2hod] [--diag-flush 50ms]
                                     two CPEs along generated routes (or one scenario): the second with and without the first's fleet store
  fleet-server --store DIR [--listen 127.0.0.1:4222]   the fleet store's NATS server (the fleet runs start it)
  cleanup
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	emu.TuneRuntime()
	if err := raisePriority(); err != nil {
		log.Warn("testbed threads keep their normal priority", "err", err)
	}
	// SIGINT and SIGTERM cancel the run; deferred cleanup removes the
	// namespaces before exit.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	commands := map[string]func(context.Context, []string, io.Writer, *slog.Logger) error{
		"run":          cmdRun,
		"demo":         cmdDemo,
		"eval":         cmdEval,
		"compare":      cmdCompare,
		"gen-scenario": cmdGenScenario,
		"predict":      cmdPredict,
		"fidelity":     cmdFidelity,
		"leads":        cmdLeads,
		"fleet":        cmdFleet,
		"fleet-server": cmdFleetServer,
		"cleanup":      cmdCleanup,
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err := cmd(ctx, os.Args[2:], os.Stdout, log); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "m2ho-testbed %s: %v\n", os.Args[1], err)
		stop()
		os.Exit(1)
	}
}
