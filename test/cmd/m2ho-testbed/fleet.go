package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/m2ho/m2ho/pkg/fleet"
	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/eval"
	"github.com/m2ho/m2ho/test/report"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/testbed"
)

// Files of the fleet evaluation's output directory.
const (
	fleetStoreDir = "fleet-store"
	fleetSummary  = "summary.txt"
	fleetResults  = "fleet.json"
)

// fleetRun is one CPE's pass through the scenario.
type fleetRun struct {
	name string
	// host is the CPE's name in the fleet, empty for a CPE without one.
	host string
}

// The first CPE learns every cell and publishes it; the second enters
// the same cells for the first time, once with the fleet store holding
// what the first learnt, once alone.
var fleetRuns = []fleetRun{
	{name: "cpe1-fleet", host: "cpe1"},
	{name: "cpe2-fleet", host: "cpe2"},
	{name: "cpe2-alone"},
}

// FirstVisits is what a run's handovers into cells the CPE had not
// served before came to.
type FirstVisits struct {
	Run       string `json:"run"`
	Handovers int    `json:"handovers"`
	LossFree  int    `json:"loss_free"`
	// OverflowDrops are the target cells' buffer overflows during the
	// handovers' interruptions.
	OverflowDrops   int     `json:"overflow_drops"`
	Retransmissions float64 `json:"retransmissions_per_handover"`
	// Fleet is the daemon's fleet counters at the end; nil without one.
	Fleet *fleet.Stats `json:"fleet,omitempty"`
}

func cmdFleet(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	outDir := fs.String("out", "out/fleet", "output directory")
	scenarioPath := fs.String("scenario", "test/scenarios/drive-generated.yaml", "scenario file")
	variantName := fs.String("variant", "scubic+m2ho", "variant of every run; must use m2ho")
	m2hod := fs.String("m2hod", "bin/m2hod", "m2hod binary")
	if err := fs.Parse(args); err != nil {
		return err
	}
	variant, err := testbed.ParseVariant(*variantName)
	if err != nil {
		return err
	}
	if !variant.M2HO {
		return fmt.Errorf("variant %s does not run m2hod", variant)
	}
	if err := requireRoot(); err != nil {
		return err
	}
	if _, err := os.Stat(*m2hod); err != nil {
		return fmt.Errorf("needs m2hod (make build): %w", err)
	}
	sc, err := scenario.Load(*scenarioPath)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locating m2ho-testbed for the fleet server: %w", err)
	}
	// Each evaluation starts from an empty fleet.
	store := filepath.Join(*outDir, fleetStoreDir)
	if err := os.RemoveAll(store); err != nil {
		return fmt.Errorf("fleet store: %w", err)
	}
	if err := os.MkdirAll(store, 0o755); err != nil {
		return fmt.Errorf("fleet store: %w", err)
	}
	server := []string{self, "fleet-server", "--store", store, "--listen", testbed.FleetAddr}

	var summary bytes.Buffer
	w := io.MultiWriter(out, &summary)
	fmt.Fprintf(w, "scenario %s (%s), %v, scale %.2g, variant %s; the second CPE enters every cell the first visited\n\n",
		sc.Name, sc.Description, sc.Duration, sc.Scale, variant)
	var summaries [][]report.Summary
	var visits []FirstVisits
	for _, r := range fleetRuns {
		dir := filepath.Join(*outDir, r.name)
		cfg := testbed.Config{Scenario: sc, Variant: variant, OutDir: dir, M2hod: *m2hod, Log: log}
		if r.host != "" {
			cfg.Fleet = &testbed.Fleet{Server: server, Host: r.host}
		}
		log.Info("fleet run", "run", r.name, "out", dir)
		res, err := testbed.Run(ctx, cfg)
		if err != nil {
			return fmt.Errorf("run %s: %w", r.name, err)
		}
		hs, err := eval.AnalyzeRun(sc, res, dir)
		if err != nil {
			return err
		}
		summaries = append(summaries, report.Summarize(r.name, hs))
		v := firstVisits(r.name, sc, res.Truth, hs)
		if r.host != "" {
			if v.Fleet, err = daemonFleetStats(filepath.Join(dir, testbed.M2hodStatusFile)); err != nil {
				log.Warn("fleet counters unreadable", "run", r.name, "err", err)
			}
		}
		visits = append(visits, v)
	}

	fmt.Fprintln(w, "All handovers (means per handover; throughput over [-5 s, +5 s] of execution, scaled Mbit/s)")
	if err := report.WriteComparison(w, summaries); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nFirst visits: handovers into a cell the CPE had not served before in its run")
	if err := writeFirstVisits(w, visits); err != nil {
		return err
	}
	if err := testbed.WriteJSON(filepath.Join(*outDir, fleetResults), visits); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*outDir, fleetSummary), summary.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing summary: %w", err)
	}
	fmt.Fprintf(w, "files in %s\n", *outDir)
	return nil
}

// firstVisits sums the handovers of hs whose target the CPE had not
// served before: neither the initial cell nor an earlier target.
func firstVisits(run string, sc *scenario.Scenario, truth *emu.GroundTruth, hs []report.Handover) FirstVisits {
	served := map[string]bool{sc.InitialCell: true}
	first := map[int]bool{}
	for _, ho := range truth.Handovers {
		if ho.Target != "" && !served[ho.Target] {
			first[ho.Index] = true
			served[ho.Target] = true
		}
	}
	v := FirstVisits{Run: run}
	var retrans uint32
	for _, h := range hs {
		if !first[h.Index] {
			continue
		}
		v.Handovers++
		if h.LossFree {
			v.LossFree++
		}
		v.OverflowDrops += h.OverflowDrops
		retrans += h.Retransmissions
	}
	if v.Handovers > 0 {
		v.Retransmissions = float64(retrans) / float64(v.Handovers)
	}
	return v
}

func writeFirstVisits(w io.Writer, visits []FirstVisits) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tfirst visits\tloss-free\tbuffer drops\tretrans/HO\tfleet hits\tfleet misses")
	for _, v := range visits {
		hits, misses := "-", "-"
		if v.Fleet != nil {
			hits, misses = strconv.FormatUint(v.Fleet.Hits, 10), strconv.FormatUint(v.Fleet.Misses, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%s\t%s\n", v.Run, v.Handovers, v.LossFree, v.OverflowDrops, v.Retransmissions, hits, misses)
	}
	return tw.Flush()
}

// daemonFleetStats reads the fleet counters of m2hod's saved /status.
func daemonFleetStats(path string) (*fleet.Stats, error) {
	var st struct {
		Fleet *fleet.Stats `json:"fleet"`
	}
	if err := testbed.ReadJSON(path, &st); err != nil {
		return nil, err
	}
	if st.Fleet == nil {
		return nil, errors.New("no fleet in the status")
	}
	return st.Fleet, nil
}

// cmdFleetServer runs a NATS server with JetStream until the process is
// told to stop: the fleet store of a testbed run, started by the testbed
// inside the UE namespace.
func cmdFleetServer(ctx context.Context, args []string, _ io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("fleet-server", flag.ContinueOnError)
	listen := fs.String("listen", testbed.FleetAddr, "client address")
	store := fs.String("store", "", "JetStream store directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *store == "" {
		return errors.New("--store is required")
	}
	host, portText, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return fmt.Errorf("--listen: bad port %q", portText)
	}
	srv, err := server.NewServer(&server.Options{Host: host, Port: port, JetStream: true, StoreDir: *store, NoSigs: true})
	if err != nil {
		return fmt.Errorf("fleet server: %w", err)
	}
	srv.ConfigureLogger()
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return errors.New("fleet server did not start")
	}
	log.Info("fleet server ready", "listen", *listen, "store", *store)
	<-ctx.Done()
	srv.Shutdown()
	srv.WaitForShutdown()
	return nil
}
