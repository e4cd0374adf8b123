package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/fleet"
	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/eval"
	"github.com/m2ho/m2ho/test/report"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/testbed"
)

// Files of the fleet evaluation's output directory and of each of its
// scenarios' directories.
const (
	fleetStoreDir = "fleet-store"
	fleetSummary  = "summary.txt"
	fleetResults  = "fleet.json"
)

// routeUsage is the usage of --route.
const routeUsage = "every handover enters a cell the scenario has not used before, as a vehicle on a line through a city"

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
	// Sub6 counts the first visits to sub-6 cells, the ones a fleet
	// estimate can change (a Preparation towards mmWave sets no clamp of
	// its own), with their loss-free ones, their overflow and the sum of
	// their throughputs over [-5 s, +5 s] of execution, in bit/s.
	Sub6              int     `json:"sub6"`
	Sub6LossFree      int     `json:"sub6_loss_free"`
	Sub6OverflowDrops int     `json:"sub6_overflow_drops"`
	Sub6ThroughputBps float64 `json:"sub6_throughput_bps"`
	// Clamps counts the Preparation clamps m2hod set, by where their size
	// came from (m2hod's "preparation clamp" log lines).
	Clamps map[string]int `json:"clamps,omitempty"`
	// Fleet is the daemon's fleet counters at the end; nil without one.
	Fleet *fleet.Stats `json:"fleet,omitempty"`
}

// FleetScenario is one scenario's three runs.
type FleetScenario struct {
	Scenario string        `json:"scenario"`
	Runs     []FirstVisits `json:"runs"`
}

// fleetComparison is the second CPE with the fleet against without, over
// scenarios, paired.
type fleetComparison struct {
	Scenarios int `json:"scenarios"`
	Sub6      int `json:"sub6_first_visits"`
	// LossFreeFleet and LossFreeAlone are the loss-free shares of the
	// sub-6 first visits, LossFreeGain their difference.
	LossFreeFleet eval.Interval `json:"loss_free_fleet"`
	LossFreeAlone eval.Interval `json:"loss_free_alone"`
	LossFreeGain  eval.Interval `json:"loss_free_gain"`
	// OverflowChange is the change of overflow drops per sub-6 first
	// visit; ThroughputGain the throughput ratio minus one.
	OverflowChange eval.Interval `json:"overflow_drops_change_per_visit"`
	ThroughputGain eval.Interval `json:"throughput_gain"`
}

func cmdFleet(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	outDir := fs.String("out", "out/fleet", "output directory (the scenarios finished there are kept)")
	scenarioPath := fs.String("scenario", "", "one scenario file instead of generated routes")
	routes := fs.Int("scenarios", 6, "generated routes")
	seed := fs.Uint64("seed", 1, "seed of the first route; the next routes take the following seeds")
	mobility := fs.String("mobility", scenario.MobilityDriving, "mobility pattern of the routes: walking or driving")
	duration := fs.Duration("scenario-duration", 2*time.Minute, "length of each route")
	scale := fs.Float64("scale", 0.1, "capacity and buffer scale factor")
	traces := fs.String("traces", defaultTraces, "folder of Lumos5G or Mahimahi traces for the mmWave cells (\"\" for synthetic cells)")
	variantName := fs.String("variant", "scubic+m2ho", "variant of every run; must use m2ho")
	m2hod := fs.String("m2hod", "bin/m2hod", "m2hod binary")
	diagFlush := diagFlushFlag(fs)
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
	if *routes < 1 {
		return errors.New("--scenarios must be at least 1")
	}
	if err := requireRoot(); err != nil {
		return err
	}
	if _, err := os.Stat(*m2hod); err != nil {
		return fmt.Errorf("needs m2hod (make build): %w", err)
	}
	scenarios, err := fleetScenarios(*scenarioPath, *routes, scenario.GenerateOptions{Seed: *seed, Duration: *duration,
		Mobility: *mobility, Scale: *scale, MatchMix: true, TracesFrom: *traces, Route: true})
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locating m2ho-testbed for the fleet server: %w", err)
	}

	var summary bytes.Buffer
	w := io.MultiWriter(out, &summary)
	fmt.Fprintf(w, "%d scenario(s), variant %s; in each, the second CPE enters every cell the first visited\n\n", len(scenarios), variant)
	var results []FleetScenario
	for _, sc := range scenarios {
		res, err := runFleetScenario(ctx, sc, testbed.Config{Variant: variant, M2hod: *m2hod, DiagFlush: *diagFlush, Log: log},
			filepath.Join(*outDir, sc.Name), self, w)
		if err != nil {
			return err
		}
		results = append(results, res)
	}
	cmp := compareFleet(results)
	fmt.Fprintln(w, "Second CPE, with the fleet against alone, paired over scenarios (95% bootstrap intervals)")
	writeFleetComparison(w, cmp)
	if err := testbed.WriteJSON(filepath.Join(*outDir, fleetResults), struct {
		Scenarios  []FleetScenario `json:"scenarios"`
		Comparison fleetComparison `json:"comparison"`
	}{results, cmp}); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*outDir, fleetSummary), summary.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing summary: %w", err)
	}
	fmt.Fprintf(w, "files in %s\n", *outDir)
	return nil
}

// fleetScenarios is the scenario file when one is named, else n routes
// generated from gen's seed on.
func fleetScenarios(path string, n int, gen scenario.GenerateOptions) ([]*scenario.Scenario, error) {
	if path != "" {
		sc, err := scenario.Load(path)
		if err != nil {
			return nil, err
		}
		return []*scenario.Scenario{sc}, nil
	}
	if gen.TracesFrom != "" {
		traces, err := emu.LoadTraceDir(gen.TracesFrom)
		if err != nil {
			return nil, err
		}
		gen.Traces = traces
	}
	var out []*scenario.Scenario
	for i := range uint64(n) {
		g := gen
		g.Seed += i
		sc, err := scenario.Generate(g)
		if err != nil {
			return nil, fmt.Errorf("route of seed %d: %w", g.Seed, err)
		}
		out = append(out, sc)
	}
	return out, nil
}

// runFleetScenario runs the three CPEs over sc with a fresh fleet store,
// each a run of base with its scenario, output directory and fleet, or
// reads what an earlier evaluation left in dir.
func runFleetScenario(ctx context.Context, sc *scenario.Scenario, base testbed.Config, dir, self string, w io.Writer) (FleetScenario, error) {
	log := base.Log
	resultsPath := filepath.Join(dir, fleetResults)
	var res FleetScenario
	if err := testbed.ReadJSON(resultsPath, &res); err == nil && res.Scenario == sc.Name && len(res.Runs) == len(fleetRuns) {
		fmt.Fprintf(w, "%s: kept from an earlier run\n", sc.Name)
		err := writeFirstVisits(w, res.Runs)
		fmt.Fprintln(w)
		return res, err
	}
	raw, err := sc.Marshal()
	if err != nil {
		return FleetScenario{}, err
	}
	store := filepath.Join(dir, fleetStoreDir)
	if err := os.RemoveAll(store); err != nil {
		return FleetScenario{}, fmt.Errorf("fleet store: %w", err)
	}
	if err := os.MkdirAll(store, 0o755); err != nil {
		return FleetScenario{}, fmt.Errorf("fleet store: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scenario.yaml"), raw, 0o644); err != nil {
		return FleetScenario{}, fmt.Errorf("writing scenario: %w", err)
	}
	server := []string{self, "fleet-server", "--store", store, "--listen", testbed.FleetAddr}
	fmt.Fprintf(w, "%s (%s), %v, scale %.2g\n", sc.Name, sc.Description, sc.Duration, sc.Scale)
	res = FleetScenario{Scenario: sc.Name}
	var summaries [][]report.Summary
	for _, r := range fleetRuns {
		runDir := filepath.Join(dir, r.name)
		cfg := base
		cfg.Scenario, cfg.OutDir = sc, runDir
		if r.host != "" {
			cfg.Fleet = &testbed.Fleet{Server: server, Host: r.host}
		}
		log.Info("fleet run", "scenario", sc.Name, "run", r.name, "out", runDir)
		tr, err := testbed.Run(ctx, cfg)
		if err != nil {
			return FleetScenario{}, fmt.Errorf("%s run %s: %w", sc.Name, r.name, err)
		}
		hs, err := eval.AnalyzeRun(sc, tr, runDir)
		if err != nil {
			return FleetScenario{}, err
		}
		summaries = append(summaries, report.Summarize(r.name, hs))
		v := firstVisits(r.name, sc, tr.Truth, hs)
		if v.Clamps, err = preparationClamps(filepath.Join(runDir, testbed.M2hodLogFile)); err != nil {
			log.Warn("preparation clamps unreadable", "run", r.name, "err", err)
		}
		if r.host != "" {
			if v.Fleet, err = daemonFleetStats(filepath.Join(runDir, testbed.M2hodStatusFile)); err != nil {
				log.Warn("fleet counters unreadable", "run", r.name, "err", err)
			}
		}
		res.Runs = append(res.Runs, v)
	}
	fmt.Fprintln(w, "All handovers (means per handover; throughput over [-5 s, +5 s] of execution, scaled Mbit/s)")
	if err := report.WriteComparison(w, summaries); err != nil {
		return FleetScenario{}, err
	}
	fmt.Fprintln(w, "First visits: handovers into a cell the CPE had not served before in its run")
	if err := writeFirstVisits(w, res.Runs); err != nil {
		return FleetScenario{}, err
	}
	fmt.Fprintln(w)
	return res, testbed.WriteJSON(resultsPath, res)
}

// compareFleet pairs the second CPE's runs with and without the fleet,
// scenario by scenario, over the sub-6 first visits.
func compareFleet(results []FleetScenario) fleetComparison {
	var fleetFree, aloneFree, gain, visits, overflow, tputFleet, tputAlone []float64
	c := fleetComparison{Scenarios: len(results)}
	for _, r := range results {
		with, alone, ok := secondCPE(r)
		if !ok {
			continue
		}
		n := float64(with.Sub6)
		c.Sub6 += with.Sub6
		visits = append(visits, n)
		fleetFree = append(fleetFree, float64(with.Sub6LossFree))
		aloneFree = append(aloneFree, float64(alone.Sub6LossFree))
		gain = append(gain, float64(with.Sub6LossFree-alone.Sub6LossFree))
		overflow = append(overflow, float64(with.Sub6OverflowDrops-alone.Sub6OverflowDrops))
		tputFleet = append(tputFleet, with.Sub6ThroughputBps)
		tputAlone = append(tputAlone, alone.Sub6ThroughputBps)
	}
	c.LossFreeFleet = eval.BootstrapRatio(fleetFree, visits, 0)
	c.LossFreeAlone = eval.BootstrapRatio(aloneFree, visits, 0)
	c.LossFreeGain = eval.BootstrapRatio(gain, visits, 0)
	c.OverflowChange = eval.BootstrapRatio(overflow, visits, 0)
	c.ThroughputGain = eval.BootstrapRatio(tputFleet, tputAlone, 1)
	return c
}

// secondCPE is a scenario's cpe2-fleet and cpe2-alone runs; ok is false
// when either is missing or they disagree on the handovers, which the
// same scenario never does.
func secondCPE(r FleetScenario) (with, alone FirstVisits, ok bool) {
	var haveWith, haveAlone bool
	for _, v := range r.Runs {
		switch v.Run {
		case fleetRuns[1].name:
			with, haveWith = v, true
		case fleetRuns[2].name:
			alone, haveAlone = v, true
		}
	}
	return with, alone, haveWith && haveAlone && with.Sub6 == alone.Sub6
}

func writeFleetComparison(w io.Writer, c fleetComparison) {
	fmt.Fprintf(w, "  scenarios %d, sub-6 first visits %d\n", c.Scenarios, c.Sub6)
	fmt.Fprintf(w, "  loss-free sub-6 first visits: with the fleet %s, alone %s, difference %s points\n",
		c.LossFreeFleet.Percent(false), c.LossFreeAlone.Percent(false), formatInterval(scaleInterval(c.LossFreeGain, 100)))
	fmt.Fprintf(w, "  overflow drops per sub-6 first visit, with the fleet minus alone: %s\n", formatInterval(c.OverflowChange))
	fmt.Fprintf(w, "  throughput of the sub-6 first visits, with the fleet over alone: %s\n", c.ThroughputGain.Percent(true))
}

// scaleInterval multiplies an interval's figures by k (100 for points).
func scaleInterval(iv eval.Interval, k float64) eval.Interval {
	iv.Value, iv.Low, iv.High = k*iv.Value, k*iv.Low, k*iv.High
	return iv
}

func formatInterval(iv eval.Interval) string {
	if !iv.Valid {
		return "-"
	}
	return fmt.Sprintf("%+.1f [%+.1f, %+.1f]", iv.Value, iv.Low, iv.High)
}

// preparationClamps counts the "preparation clamp" lines of an m2hod log
// by their source.
func preparationClamps(path string) (map[string]int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for line := range strings.Lines(string(raw)) {
		if !strings.Contains(line, `msg="preparation clamp"`) {
			continue
		}
		for field := range strings.FieldsSeq(line) {
			if source, ok := strings.CutPrefix(field, "source="); ok {
				counts[source]++
			}
		}
	}
	return counts, nil
}

// firstVisits sums the handovers of hs whose target the CPE had not
// served before: neither the initial cell nor an earlier target.
func firstVisits(run string, sc *scenario.Scenario, truth *emu.GroundTruth, hs []report.Handover) FirstVisits {
	bands := map[string]diag.Band{}
	for _, c := range sc.Cells {
		bands[c.Name] = c.Band
	}
	served := map[string]bool{sc.InitialCell: true}
	first := map[int]string{}
	for _, ho := range truth.Handovers {
		if ho.Target != "" && !served[ho.Target] {
			first[ho.Index] = ho.Target
			served[ho.Target] = true
		}
	}
	v := FirstVisits{Run: run}
	var retrans uint32
	for _, h := range hs {
		target, ok := first[h.Index]
		if !ok {
			continue
		}
		v.Handovers++
		if h.LossFree {
			v.LossFree++
		}
		v.OverflowDrops += h.OverflowDrops
		retrans += h.Retransmissions
		if bands[target] == diag.BandSub6 {
			v.Sub6++
			if h.LossFree {
				v.Sub6LossFree++
			}
			v.Sub6OverflowDrops += h.OverflowDrops
			v.Sub6ThroughputBps += h.ThroughputBps
		}
	}
	if v.Handovers > 0 {
		v.Retransmissions = float64(retrans) / float64(v.Handovers)
	}
	return v
}

func writeFirstVisits(w io.Writer, visits []FirstVisits) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tfirst visits\tloss-free\tbuffer drops\tretrans/HO\tsub-6\tsub-6 loss-free\tsub-6 drops\tclamps by source\tfleet hits\tfleet misses")
	for _, v := range visits {
		hits, misses := "-", "-"
		if v.Fleet != nil {
			hits, misses = strconv.FormatUint(v.Fleet.Hits, 10), strconv.FormatUint(v.Fleet.Misses, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%d\t%d\t%d\t%s\t%s\t%s\n", v.Run, v.Handovers, v.LossFree, v.OverflowDrops,
			v.Retransmissions, v.Sub6, v.Sub6LossFree, v.Sub6OverflowDrops, formatCounts(v.Clamps), hits, misses)
	}
	return tw.Flush()
}

// formatCounts prints counts as "a=1 b=2", keys sorted; "-" when empty.
func formatCounts(counts map[string]int) string {
	if len(counts) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	return strings.Join(parts, " ")
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
