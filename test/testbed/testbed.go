// Package testbed runs one scenario end to end: it creates the topology,
// starts the emulator, optionally m2hod on the UE's modem interface, runs
// the traffic, and writes what it measured next to the emulator's ground
// truth.
package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/m2ho/m2ho/internal/jsonfile"
	"github.com/m2ho/m2ho/pkg/config"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/scaledcc"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/topo"
	"github.com/m2ho/m2ho/test/traffic"
)

// Addresses inside the UE namespace.
const (
	DiagAddr      = "127.0.0.1:5599"
	M2hodListen   = "127.0.0.1:9569"
	ReceiverPort  = "5201"
	m2hodReadyFor = 10 * time.Second
	m2hodStopWait = 5 * time.Second
	// FleetAddr is where the fleet store's server listens (Config.Fleet).
	FleetAddr = "127.0.0.1:4222"
	// FleetNetwork names the emulated network in the fleet store.
	FleetNetwork = "testbed"
)

// Variant is a congestion control, optionally with m2hod running its m2ho
// policy (with some components ablated) or the Freeze-TCP baseline.
type Variant struct {
	CC   string
	M2HO bool
	// Freeze runs m2hod with --policy freeze instead of m2ho.
	Freeze bool
	// Ablate lists the m2ho components switched off (--ablate).
	Ablate []config.Component
}

// Variant name parts.
const (
	variantM2HO   = "m2ho"
	variantFreeze = "freeze"
	ablatePrefix  = "-no-"
)

// ParseVariant reads a congestion control (cubic, bbr, reno, or scubic:
// CUBIC scaled like the scenario, see test/scaledcc), optionally
// followed by "+m2ho", "+freeze" or "+m2ho-no-<component>" (repeatable,
// components as in m2hod --ablate): "cubic+m2ho-no-prediction".
func ParseVariant(s string) (Variant, error) {
	cc, extra, _ := strings.Cut(s, "+")
	v := Variant{CC: cc}
	switch cc {
	case "cubic", "bbr", "reno", scaledcc.Family:
	default:
		return v, fmt.Errorf("variant %q: congestion control %q is not cubic, %s, bbr or reno", s, cc, scaledcc.Family)
	}
	if extra == "" {
		return v, nil
	}
	parts := strings.Split(extra, ablatePrefix)
	switch parts[0] {
	case variantM2HO:
		v.M2HO = true
	case variantFreeze:
		v.M2HO, v.Freeze = true, true
	default:
		return v, fmt.Errorf("variant %q: %q is not m2ho or freeze", s, parts[0])
	}
	for _, name := range parts[1:] {
		c, err := config.ParseComponent(name)
		if err != nil {
			return v, fmt.Errorf("variant %q: %w", s, err)
		}
		if v.Freeze {
			return v, fmt.Errorf("variant %q: the freeze policy has no components to ablate", s)
		}
		v.Ablate = append(v.Ablate, c)
	}
	return v, nil
}

func (v Variant) String() string {
	switch {
	case v.Freeze:
		return v.CC + "+" + variantFreeze
	case v.M2HO:
		name := v.CC + "+" + variantM2HO
		for _, c := range v.Ablate {
			name += ablatePrefix + string(c)
		}
		return name
	}
	return v.CC
}

// Suppresses reports whether the variant's daemon drops duplicate ACKs:
// m2ho with its suppression component.
func (v Variant) Suppresses() bool {
	return v.M2HO && !v.Freeze && !slices.Contains(v.Ablate, config.ComponentSuppression)
}

// daemonArgs are the m2hod flags that select the variant's policy.
func (v Variant) daemonArgs() []string {
	var args []string
	if v.Freeze {
		args = append(args, "--policy", string(config.PolicyFreeze))
	}
	if len(v.Ablate) > 0 {
		names := make([]string, len(v.Ablate))
		for i, c := range v.Ablate {
			names[i] = string(c)
		}
		args = append(args, "--ablate", strings.Join(names, ","))
	}
	return args
}

// Config is one run.
type Config struct {
	Scenario *scenario.Scenario
	Variant  Variant
	// OutDir receives the run's files.
	OutDir string
	// M2hod is the daemon binary, needed when the variant uses m2ho.
	M2hod string
	// Pcap captures the UE's modem interface to OutDir/ue.pcap.
	Pcap bool
	// Fleet, with an m2ho variant, gives m2hod a fleet store.
	Fleet *Fleet
	// DiagFlush is the period at which the emulator writes the diag
	// events it coalesced (emu.Config.DiagFlush); 0 sends one event per
	// datagram.
	DiagFlush time.Duration
	Log       *slog.Logger
}

// Fleet is the fleet store of a run: a NATS server with JetStream inside
// the UE namespace (where a vehicle runs its leaf node), started before
// m2hod and stopped after it. Its store directory outlives the run, so
// that a later run, standing for another CPE, finds what this one
// published.
type Fleet struct {
	// Server is the server's command line; it listens on FleetAddr.
	Server []string
	// Host is m2hod's name in the fleet (--fleet-host).
	Host string
}

// Result is what a run produced.
type Result struct {
	Variant      Variant
	Truth        *emu.GroundTruth
	Measurements *traffic.Measurements
	Fidelity     Fidelity
	// SentBytes is what the sender handed to its sockets.
	SentBytes uint64
	// Daemon is what m2hod cost while the traffic ran; nil without m2hod.
	Daemon *DaemonUsage
}

// Fidelity is how closely the emulator kept to its schedule.
type Fidelity struct {
	DownlinkP50 time.Duration `json:"downlink_timing_p50_ns"`
	DownlinkP99 time.Duration `json:"downlink_timing_p99_ns"`
	DownlinkMax time.Duration `json:"downlink_timing_max_ns"`
	UplinkP50   time.Duration `json:"uplink_timing_p50_ns"`
	UplinkP99   time.Duration `json:"uplink_timing_p99_ns"`
	// Where downlink lateness comes from: the scheduler's wake-ups, and
	// sending a slot's burst.
	WakeupP99     time.Duration `json:"wakeup_late_p99_ns"`
	WakeupMax     time.Duration `json:"wakeup_late_max_ns"`
	SendBatchP99  time.Duration `json:"send_batch_p99_ns"`
	SendBatchMax  time.Duration `json:"send_batch_max_ns"`
	Deliveries    uint64        `json:"deliveries"`
	SendErrors    uint64        `json:"send_errors"`
	CongestionCtl string        `json:"congestion_control"`
	// DiagFlush is how the run fed m2hod its diag events: coalesced into
	// datagrams written at this period, or one per datagram when 0.
	DiagFlush time.Duration `json:"diag_flush_ns"`
}

// Files a run writes into its output directory.
const (
	GroundTruthFile  = "groundtruth.json.gz"
	MeasurementsFile = "measurements.json.gz"
	FidelityFile     = "fidelity.json"
	M2hodLogFile     = "m2hod.log"
	M2hodMetricsFile = "m2hod-metrics.txt"
	M2hodStatusFile  = "m2hod-status.json"
	M2hodUsageFile   = "m2hod-usage.json"
	PcapFile         = "ue.pcap"
)

// Run executes the scenario once and writes its files. The topology is
// removed on every return path; cancelling ctx ends the run early.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	if cfg.Variant.M2HO && cfg.M2hod == "" {
		return nil, errors.New("variant with m2ho needs the m2hod binary")
	}
	if cfg.Fleet != nil && (!cfg.Variant.M2HO || len(cfg.Fleet.Server) == 0) {
		return nil, errors.New("a fleet store needs an m2ho variant and a server command")
	}
	if cfg.DiagFlush < 0 {
		return nil, fmt.Errorf("negative diag flush period %v", cfg.DiagFlush)
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	if removed, err := topo.CleanupStale(); err != nil {
		log.Warn("removing namespaces of crashed runs", "err", err)
	} else if len(removed) > 0 {
		log.Info("removed namespaces of crashed runs", "namespaces", removed)
	}
	sc := cfg.Scenario
	tb, err := topo.Create(topo.Options{LAN: sc.Traffic.Receiver == scenario.ReceiverLAN})
	if err != nil {
		return nil, fmt.Errorf("creating topology: %w", err)
	}
	defer func() {
		if cerr := tb.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("removing topology: %w", cerr))
		}
	}()
	log.Info("topology up", "id", tb.ID, "namespaces", tb.Namespaces())

	receiver, err := traffic.Listen(tb.ReceiverNamespace.Do, net.JoinHostPort(tb.ReceiverAddr.String(), ReceiverPort))
	if err != nil {
		return nil, err
	}
	go receiver.Serve()
	defer receiver.Close()

	var daemon *m2hod
	if cfg.Variant.M2HO {
		args := m2hodArgs(tb.ModemIface, filepath.Join(cfg.OutDir, m2hodStateDir), sc.Scale, cfg.Variant)
		if cfg.Fleet != nil {
			stopFleet, err := startFleetServer(ctx, tb, cfg.Fleet.Server, cfg.OutDir)
			if err != nil {
				return nil, err
			}
			// Deferred before m2hod's stop, so run after it: m2hod
			// publishes what it still holds as it stops.
			defer func() {
				if serr := stopFleet(); serr != nil {
					log.Warn("fleet server exit", "err", serr)
				}
			}()
			args = append(args, "--fleet", "nats://"+FleetAddr, "--fleet-network", FleetNetwork, "--fleet-host", cfg.Fleet.Host)
		}
		daemon, err = startM2hod(ctx, tb, cfg.M2hod, cfg.OutDir, args)
		if err != nil {
			return nil, err
		}
		defer func() {
			daemon.saveState(cfg.OutDir, log)
			if serr := daemon.stop(); serr != nil {
				log.Warn("m2hod exit", "err", serr)
			}
		}()
	}

	emuCfg := emu.Config{
		Scenario: sc, ServerIface: topo.EmuServerIface, UEIface: topo.EmuUEIface,
		InEmu: tb.Emu.Do, DiagAddr: DiagAddr, InDiag: tb.UE.Do, Encode: diag.MarshalJSON, DiagFlush: cfg.DiagFlush, Log: log,
	}
	if tb.LAN != nil {
		// The receiver's ACKs before the UE forwards them through its
		// modem interface, where m2ho's datapath may drop duplicates.
		emuCfg.AckTapIface, emuCfg.InAckTap = topo.UELANIface, tb.UE.Do
	}
	emulator, err := emu.New(emuCfg)
	if err != nil {
		return nil, err
	}
	defer emulator.Close()

	var capture *traffic.Capture
	if cfg.Pcap {
		capture, err = traffic.StartCapture(tb.UE.Do, topo.UEIface, filepath.Join(cfg.OutDir, PcapFile))
		if err != nil {
			return nil, err
		}
		defer capture.Close()
	}

	epoch, err := emulator.Start()
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithDeadline(ctx, epoch.Add(sc.Duration))
	defer stop()
	emuDone := make(chan error, 1)
	emuCtx, stopEmu := context.WithCancel(context.Background())
	defer stopEmu()
	go func() { emuDone <- emulator.Run(emuCtx) }()

	ccName := cfg.Variant.CC
	if ccName == scaledcc.Family {
		scaled, err := scaledcc.Register(sc.Scale)
		if err != nil {
			return nil, err
		}
		defer scaled.Close()
		ccName = scaled.Name()
	}
	sender, err := traffic.Dial(runCtx, tb.SenderNamespace.Do, net.JoinHostPort(tb.ReceiverAddr.String(), ReceiverPort), ccName, sc.Traffic.Flows)
	if err != nil {
		return nil, err
	}
	defer sender.Close()
	cc, err := sender.CongestionControl(0)
	if err != nil {
		return nil, fmt.Errorf("reading congestion control: %w", err)
	}
	measured := make(chan *traffic.Measurements, 1)
	go func() { measured <- traffic.Measure(runCtx, epoch, receiver, sender) }()
	log.Info("traffic running", "variant", cfg.Variant, "cc", cc, "duration", sc.Duration)
	var usageFrom procSample
	if daemon != nil {
		usageFrom = daemon.sample()
	}
	sendErr := sender.Run(runCtx)
	m := <-measured
	var usage *DaemonUsage
	if daemon != nil {
		usage = daemon.usageSince(usageFrom)
	}
	stopEmu()
	if err := <-emuDone; err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	if sendErr != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("sender: %w", sendErr)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("run interrupted: %w", ctx.Err())
	}

	res = &Result{
		Variant: cfg.Variant, Truth: emulator.Truth(), Measurements: m, SentBytes: sender.Sent(), Daemon: usage,
		Fidelity: Fidelity{
			DownlinkP50: emulator.Downlink.Quantile(0.5), DownlinkP99: emulator.Downlink.Quantile(0.99),
			DownlinkMax: emulator.Downlink.Max(), UplinkP50: emulator.Uplink.Quantile(0.5),
			UplinkP99: emulator.Uplink.Quantile(0.99), Deliveries: emulator.Downlink.Count(),
			WakeupP99: emulator.Wakeup.Quantile(0.99), WakeupMax: emulator.Wakeup.Max(),
			SendBatchP99: emulator.SendBatch.Quantile(0.99), SendBatchMax: emulator.SendBatch.Max(),
			SendErrors: emulator.SendErrors(), CongestionCtl: cc, DiagFlush: cfg.DiagFlush,
		},
	}
	if err := res.write(cfg.OutDir); err != nil {
		return nil, err
	}
	return res, nil
}

func (r *Result) write(dir string) error {
	if err := r.Truth.WriteFile(filepath.Join(dir, GroundTruthFile)); err != nil {
		return err
	}
	files := map[string]any{MeasurementsFile: r.Measurements, FidelityFile: r.Fidelity}
	if r.Daemon != nil {
		files[M2hodUsageFile] = r.Daemon
	}
	for name, v := range files {
		if err := WriteJSON(filepath.Join(dir, name), v); err != nil {
			return err
		}
	}
	return nil
}

// WriteJSON writes v, indented, to path.
func WriteJSON(path string, v any) error { return jsonfile.Write(path, v) }

// ReadJSON decodes the JSON file at path into v. A missing file's error
// wraps os.ErrNotExist.
func ReadJSON(path string, v any) error { return jsonfile.Read(path, v) }

// ReadMeasurements loads a run's measurements file.
func ReadMeasurements(path string) (*traffic.Measurements, error) {
	var m traffic.Measurements
	if err := ReadJSON(path, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// m2hod is the daemon under test, running in the UE namespace.
type m2hod struct {
	cmd    *exec.Cmd
	log    *os.File
	client *http.Client
	exited <-chan error
}

// m2hodArgs is m2hod's command line on the UE. The buffer it assumes for
// a cell it knows nothing of is a real-network size (about one sub-6
// bandwidth-delay product): a scenario's scale shrinks every buffer and
// capacity, so it shrinks that assumption too, or the first clamp towards
// an unknown cell would be ten times the cell's buffer at scale 0.1. A run
// starts and stops its daemon with the flows, so nothing is pinned (the
// UE namespace's /sys has no BPF filesystem anyway).
func m2hodArgs(iface, stateDir string, scale float64, v Variant) []string {
	args := []string{
		"--iface", iface,
		"--diag", "udp://" + DiagAddr,
		"--mode", "enforce",
		"--listen", M2hodListen,
		"--state-dir", stateDir,
		"--pin-dir", "",
	}
	if scale > 0 && scale != 1 {
		scaled := uint64(float64(estimator.DefaultConfig().DefaultBufferBytes) * scale)
		// m2hod refuses a default below its smallest clamp
		minimum := uint64(estimator.DefaultConfig().MinClampBytes)
		args = append(args, "--default-buffer", strconv.FormatUint(max(scaled, minimum), 10))
	}
	return append(args, v.daemonArgs()...)
}

// m2hodStateDir is the daemon's state directory inside a run's directory.
const m2hodStateDir = "m2hod-state"

// freshStateDir makes the daemon's state directory in outDir, empty. Each
// run starts cold: cell estimates learned by an earlier run in the same
// directory (make demo always writes to out/demo) would give m2ho a head
// start that the plain baselines do not get.
func freshStateDir(outDir string) error {
	dir := filepath.Join(outDir, m2hodStateDir)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("m2hod state dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("m2hod state dir: %w", err)
	}
	return nil
}

func startM2hod(ctx context.Context, tb *topo.Topology, binary, outDir string, args []string) (*m2hod, error) {
	logFile, err := os.Create(filepath.Join(outDir, M2hodLogFile))
	if err != nil {
		return nil, fmt.Errorf("m2hod log: %w", err)
	}
	if err := freshStateDir(outDir); err != nil {
		logFile.Close()
		return nil, err
	}
	// Stopped with SIGTERM by stop, not killed with the run's context.
	cmd := tb.UE.Command(context.Background(), binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The daemon must not outlive the testbed, even if the testbed dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited, err := tb.UE.Start(cmd)
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting m2hod: %w", err)
	}
	d := &m2hod{cmd: cmd, log: logFile, exited: exited}
	// HTTP to the daemon goes through a transport dialling inside the UE
	// namespace.
	d.client = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = tb.UE.Do(func() error {
				var derr error
				c, derr = (&net.Dialer{}).DialContext(ctx, network, addr)
				return derr
			})
			return c, err
		},
	}}
	deadline := time.Now().Add(m2hodReadyFor)
	for {
		select {
		case err := <-d.exited:
			if err == nil {
				err = errors.New("exit status 0")
			}
			return nil, fmt.Errorf("m2hod exited at start (see %s): %w", logFile.Name(), err)
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), d.stop())
		case <-time.After(100 * time.Millisecond):
		}
		if d.get("/healthz", io.Discard) == nil {
			return d, nil
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("m2hod not healthy after %v (see %s)", m2hodReadyFor, logFile.Name()), d.stop())
		}
	}
}

// FleetServerLogFile is the fleet server's output in a run's directory.
const FleetServerLogFile = "fleet-server.log"

// startFleetServer runs command inside the UE namespace and waits until
// it accepts connections on FleetAddr. The returned function stops it.
func startFleetServer(ctx context.Context, tb *topo.Topology, command []string, outDir string) (stop func() error, err error) {
	logFile, err := os.Create(filepath.Join(outDir, FleetServerLogFile))
	if err != nil {
		return nil, fmt.Errorf("fleet server log: %w", err)
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited, err := tb.UE.Start(cmd)
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting the fleet server: %w", err)
	}
	stop = func() error {
		defer logFile.Close()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return nil // already gone
		}
		select {
		case err := <-exited:
			return err
		case <-time.After(m2hodStopWait):
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("fleet server ignored SIGTERM for %v", m2hodStopWait)
		}
	}
	deadline := time.Now().Add(m2hodReadyFor)
	for {
		select {
		case err := <-exited:
			logFile.Close()
			return nil, fmt.Errorf("fleet server exited at start (see %s): %v", logFile.Name(), err)
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), stop())
		case <-time.After(50 * time.Millisecond):
		}
		dialErr := tb.UE.Do(func() error {
			c, err := net.DialTimeout("tcp", FleetAddr, time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if dialErr == nil {
			return stop, nil
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("fleet server not listening after %v (see %s)", m2hodReadyFor, logFile.Name()), stop())
		}
	}
}

func (d *m2hod) get(path string, w io.Writer) error {
	resp, err := d.client.Get("http://" + M2hodListen + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// saveState stores the daemon's metrics and status for the evaluation.
func (d *m2hod) saveState(dir string, log *slog.Logger) {
	for file, path := range map[string]string{M2hodMetricsFile: "/metrics", M2hodStatusFile: "/status"} {
		f, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			log.Warn("saving m2hod state", "file", file, "err", err)
			continue
		}
		if err := d.get(path, f); err != nil {
			log.Warn("reading m2hod", "path", path, "err", err)
		}
		f.Close()
	}
}

// stop sends SIGTERM (the daemon detaches its programs) and kills it if it
// does not exit in time.
func (d *m2hod) stop() error {
	defer d.log.Close()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return nil // already gone
	}
	select {
	case err := <-d.exited:
		return err
	case <-time.After(m2hodStopWait):
		_ = d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("m2hod ignored SIGTERM for %v", m2hodStopWait)
	}
}
