// Package config builds the single validated configuration of m2hod from
// its command line and an optional YAML file. Flags override the file; the
// file overrides the built-in defaults. Every error is one line that names
// the offending flag or key.
package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/m2ho/m2ho/pkg/datapath/limits"
	"github.com/m2ho/m2ho/pkg/diag/rrc"
	"github.com/m2ho/m2ho/pkg/estimator"
	"github.com/m2ho/m2ho/pkg/fleet"
)

// Mode says whether m2hod changes packets.
type Mode string

// Modes of operation.
const (
	// ModeEnforce writes policies to the datapath.
	ModeEnforce Mode = "enforce"
	// ModeObserve runs prediction, estimation and the state machine but
	// never changes a packet.
	ModeObserve Mode = "observe"
)

// Policy is the handover mitigation in force.
type Policy string

// Policies of the evaluation.
const (
	// PolicyM2HO clamps the window to the target cell's buffer estimate.
	PolicyM2HO Policy = "m2ho"
	// PolicyFreeze advertises a zero window during the handover
	// (the Freeze-TCP baseline).
	PolicyFreeze Policy = "freeze"
)

// LogFormat is how m2hod writes its log.
type LogFormat string

// Log formats.
const (
	// LogAuto is journal when stderr is the systemd journal's stream and
	// text otherwise.
	LogAuto LogFormat = ""
	// LogText is logfmt lines, each with its own time.
	LogText LogFormat = "text"
	// LogJSON is one JSON object a line.
	LogJSON LogFormat = "json"
	// LogJournal is logfmt lines without a time, which the journal adds,
	// prefixed with the syslog priority of their level (sd-daemon(3)).
	LogJournal LogFormat = "journal"
)

func parseLogFormat(s string) (LogFormat, error) {
	switch f := LogFormat(s); f {
	case LogAuto, LogText, LogJSON, LogJournal:
		return f, nil
	}
	return "", fmt.Errorf("must be text, json or journal, got %q", s)
}

// Component is an M2HO mechanism that can be switched off for ablations.
type Component string

// Components that can be ablated.
const (
	ComponentPrediction     Component = "prediction"
	ComponentSuppression    Component = "suppression"
	ComponentBandwidthClamp Component = "bandwidth_clamp"
	// ComponentRamp is the clamp that follows every handover, from the
	// target's buffer estimate up to what the new cell carries.
	ComponentRamp Component = "ramp"
)

var components = []Component{ComponentPrediction, ComponentSuppression, ComponentBandwidthClamp, ComponentRamp}

// ParseComponent names a component that can be ablated.
func ParseComponent(s string) (Component, error) {
	if c := Component(s); slices.Contains(components, c) {
		return c, nil
	}
	return "", fmt.Errorf("unknown component %q (known: prediction, suppression, bandwidth_clamp, ramp)", s)
}

// Defaults of the command line contract.
const (
	DefaultListen   = "127.0.0.1:9569"
	DefaultStateDir = "/var/lib/m2ho"
	// DefaultRuntimeDir holds the diag socket outside systemd, which
	// otherwise names it (RuntimeDirectory=, $RUNTIME_DIRECTORY).
	DefaultRuntimeDir = "/run/m2ho"
	// DiagSocketName is the default diag input's socket in the runtime
	// directory: JSON events from root, the daemon's user or its group
	// only (see diag.UnixSource). UDP, which any local user can reach, is
	// an input only when named.
	DiagSocketName = "diag.sock"
	// DefaultPinDir is where the flow state stays pinned, on the BPF
	// filesystem systemd mounts.
	DefaultPinDir = "/sys/fs/bpf/m2ho"
)

// Bounds of the tunables. The smoothing phase must end well before the
// sender's minimum retransmission timeout (200 ms on Linux), or suppressed
// duplicate ACKs would turn into a timeout.
const (
	maxSmoothing = 200 * time.Millisecond
	maxLambda    = 16
	maxBurstGap  = 100 * time.Millisecond
	// maxDrainBurst is tens of times the cell buffers the paper measured
	// (about 1.5 MB on sub-6, section 3.2): a larger drain threshold is
	// a typo, under which only SmoothingMax would ever end Smoothing.
	maxDrainBurst = 64 << 20
	maxIfaceName  = 15 // IFNAMSIZ - 1
	// maxFlows is the largest flow table the datapath builds.
	maxFlows = limits.MaxFlows
)

// minDefaultBuffer is the smallest default buffer estimate: the estimator
// refuses a default below its minimum clamp, which every answer is raised
// to anyway.
var minDefaultBuffer = estimator.DefaultConfig().MinClampBytes

// Config is everything m2hod needs to run. Tunables left at zero mean "the
// default of the component that owns them" (state machine, estimator,
// datapath), so those defaults live in one place.
type Config struct {
	Iface string
	Diag  []string
	// DiagSubscription is the SIM subscription of a multi-SIM modem whose
	// RRC events m2hod follows (DIAG and GSMTAP inputs); auto follows the
	// one carrying the data, subscription 0 until one is seen.
	DiagSubscription rrc.Follow
	Mode             Mode
	Listen           string
	StateDir         string
	LogLevel         slog.Level
	// LogFormat is LogAuto unless set.
	LogFormat LogFormat

	Policy Policy
	// Ablate lists the components switched off.
	Ablate []Component
	// SmoothingMax bounds the Smoothing state; 0 keeps the state
	// machine's default.
	SmoothingMax time.Duration
	// Lambda is the probing factor of the bandwidth clamp (paper Eq. 2);
	// 0 keeps the estimator's default.
	Lambda float64
	// DefaultBufferBytes is the buffer estimate used before any cell has
	// history; 0 keeps the estimator's default.
	DefaultBufferBytes uint64
	// BurstGap is the idle gap that splits downlink packet trains; 0
	// keeps the datapath's default.
	BurstGap time.Duration
	// DrainBurstBytes is the smallest downlink packet train that counts as
	// the target cell draining its buffer, which ends Smoothing; 0 keeps
	// the state machine's default.
	DrainBurstBytes uint64
	// MaxFlows bounds the datapath's flow table; 0 keeps its default.
	MaxFlows uint32
	// PinDir, on a BPF filesystem, keeps the flow state across an unclean
	// exit, so that a restarted daemon still clamps the connections opened
	// before; empty keeps it in the process only.
	PinDir string
	// Fleet is the optional fleet store; off while its URL is empty.
	Fleet Fleet
}

// Fleet configures the fleet store (package fleet): a NATS server with
// JetStream through which hosts share what they learn about cells.
type Fleet struct {
	// URL is one or more server URLs, comma-separated; empty: no fleet.
	URL string
	// Network names the mobile network (its PLMN, for example): cells
	// are only shared within one network.
	Network string
	// Host names this host among the fleet; empty: the host name.
	Host string
	// Bucket is the key-value bucket; empty: fleet.DefaultBucket.
	Bucket string
	// CredsFile is a NATS credentials file; CAFile, CertFile and KeyFile
	// configure TLS.
	CredsFile, CAFile, CertFile, KeyFile string
	// MaxAge is how old a peer's entry may be to count; 0: the fleet
	// package's default.
	MaxAge time.Duration
	// MaxBytes bounds the bucket when this host creates it (or finds it
	// unbounded); 0: fleet.DefaultMaxBytes.
	MaxBytes int64
}

// Enabled reports whether component c is on.
func (c Config) Enabled(component Component) bool {
	return !slices.Contains(c.Ablate, component)
}

// Default returns the configuration before any file or flag.
func Default() Config {
	return Config{
		Diag:             []string{DefaultDiag()},
		DiagSubscription: rrc.FollowAuto,
		Mode:             ModeEnforce,
		Listen:           DefaultListen,
		StateDir:         defaultStateDir(),
		PinDir:           DefaultPinDir,
		LogLevel:         slog.LevelInfo,
		Policy:           PolicyM2HO,
	}
}

// DefaultDiag is the default diag input: unix:RUNTIME/diag.sock, where
// RUNTIME is the unit's RuntimeDirectory= ($RUNTIME_DIRECTORY) under
// systemd and DefaultRuntimeDir elsewhere.
func DefaultDiag() string {
	dir, _, _ := strings.Cut(os.Getenv("RUNTIME_DIRECTORY"), ":")
	if !filepath.IsAbs(dir) {
		dir = DefaultRuntimeDir
	}
	return "unix:" + filepath.Join(dir, DiagSocketName)
}

// defaultStateDir is the directory systemd made for the unit
// (StateDirectory=, passed as $STATE_DIRECTORY), so that the unit alone
// names it, and DefaultStateDir elsewhere.
func defaultStateDir() string {
	if dir := systemdStateDir(); dir != "" {
		return dir
	}
	return DefaultStateDir
}

// systemdStateDir is the unit's state directory, empty outside a unit
// that has one.
func systemdStateDir() string {
	// systemd lists one directory per StateDirectory= entry, separated
	// by colons; the unit has one.
	if dir, _, _ := strings.Cut(os.Getenv("STATE_DIRECTORY"), ":"); filepath.IsAbs(dir) {
		return filepath.Clean(dir)
	}
	return ""
}

// file is the YAML configuration file. Pointers tell "absent" from zero so
// that only the keys present override the defaults.
type file struct {
	Iface              *string        `yaml:"iface"`
	Diag               []string       `yaml:"diag"`
	DiagSubscription   *string        `yaml:"diag_subscription"`
	Mode               *string        `yaml:"mode"`
	Listen             *string        `yaml:"listen"`
	StateDir           *string        `yaml:"state_dir"`
	LogLevel           *string        `yaml:"log_level"`
	LogFormat          *string        `yaml:"log_format"`
	Policy             *string        `yaml:"policy"`
	Ablate             []string       `yaml:"ablate"`
	SmoothingMax       *time.Duration `yaml:"smoothing_max"`
	Lambda             *float64       `yaml:"lambda"`
	DefaultBufferBytes *uint64        `yaml:"default_buffer_bytes"`
	BurstGap           *time.Duration `yaml:"burst_gap"`
	DrainBurstBytes    *uint64        `yaml:"drain_burst_bytes"`
	MaxFlows           *uint32        `yaml:"max_flows"`
	PinDir             *string        `yaml:"pin_dir"`
	Fleet              *fleetFile     `yaml:"fleet"`
}

// fleetFile is the fleet: section of the file.
type fleetFile struct {
	URL       *string        `yaml:"url"`
	Network   *string        `yaml:"network"`
	Host      *string        `yaml:"host"`
	Bucket    *string        `yaml:"bucket"`
	CredsFile *string        `yaml:"creds"`
	CAFile    *string        `yaml:"tls_ca"`
	CertFile  *string        `yaml:"tls_cert"`
	KeyFile   *string        `yaml:"tls_key"`
	MaxAge    *time.Duration `yaml:"max_age"`
	MaxBytes  *int64         `yaml:"max_bytes"`
}

// LoadFile applies the YAML file at path over base. Unknown keys are
// errors: a misspelt key silently ignored would run the wrong experiment.
func LoadFile(path string, base Config) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config file: %w", err)
	}
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("config file %s: %s", path, oneLine(err))
	}
	cfg, err := f.apply(base)
	if err != nil {
		return Config{}, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, nil
}

func (f file) apply(cfg Config) (Config, error) {
	setValue(&cfg.Iface, f.Iface)
	if f.Diag != nil {
		cfg.Diag = slices.Clone(f.Diag)
	}
	if f.DiagSubscription != nil {
		follow, err := rrc.ParseFollow(*f.DiagSubscription)
		if err != nil {
			return Config{}, fmt.Errorf("diag_subscription: %w", err)
		}
		cfg.DiagSubscription = follow
	}
	if f.Mode != nil {
		cfg.Mode = Mode(*f.Mode)
	}
	setValue(&cfg.Listen, f.Listen)
	setValue(&cfg.StateDir, f.StateDir)
	if f.LogLevel != nil {
		level, err := parseLevel(*f.LogLevel)
		if err != nil {
			return Config{}, fmt.Errorf("log_level: %w", err)
		}
		cfg.LogLevel = level
	}
	if f.LogFormat != nil {
		format, err := parseLogFormat(*f.LogFormat)
		if err != nil || format == LogAuto {
			return Config{}, fmt.Errorf("log_format: must be text, json or journal, got %q", *f.LogFormat)
		}
		cfg.LogFormat = format
	}
	if f.Policy != nil {
		cfg.Policy = Policy(*f.Policy)
	}
	if f.Ablate != nil {
		cfg.Ablate = toComponents(f.Ablate)
	}
	setValue(&cfg.SmoothingMax, f.SmoothingMax)
	setValue(&cfg.Lambda, f.Lambda)
	setValue(&cfg.DefaultBufferBytes, f.DefaultBufferBytes)
	setValue(&cfg.BurstGap, f.BurstGap)
	setValue(&cfg.DrainBurstBytes, f.DrainBurstBytes)
	setValue(&cfg.MaxFlows, f.MaxFlows)
	setValue(&cfg.PinDir, f.PinDir)
	if ff := f.Fleet; ff != nil {
		setValue(&cfg.Fleet.URL, ff.URL)
		setValue(&cfg.Fleet.Network, ff.Network)
		setValue(&cfg.Fleet.Host, ff.Host)
		setValue(&cfg.Fleet.Bucket, ff.Bucket)
		setValue(&cfg.Fleet.CredsFile, ff.CredsFile)
		setValue(&cfg.Fleet.CAFile, ff.CAFile)
		setValue(&cfg.Fleet.CertFile, ff.CertFile)
		setValue(&cfg.Fleet.KeyFile, ff.KeyFile)
		setValue(&cfg.Fleet.MaxAge, ff.MaxAge)
		setValue(&cfg.Fleet.MaxBytes, ff.MaxBytes)
	}
	return cfg, nil
}

func setValue[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

func toComponents(names []string) []Component {
	out := make([]Component, 0, len(names))
	for _, n := range names {
		out = append(out, Component(strings.TrimSpace(n)))
	}
	return out
}

func parseLevel(s string) (slog.Level, error) {
	var level slog.Level
	switch strings.ToLower(s) {
	case "debug", "info", "warn", "error":
	default:
		return 0, fmt.Errorf("must be debug, info, warn or error, got %q", s)
	}
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return 0, err
	}
	return level, nil
}

// oneLine folds a multi-line error (yaml lists one problem per line) into
// a single line for the terminal and the journal.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// Validate checks every field; the error names the key at fault.
func (c Config) Validate() error {
	if c.Iface == "" {
		return errors.New("iface: the modem interface is required (--iface)")
	}
	if len(c.Iface) > maxIfaceName || strings.ContainsAny(c.Iface, "/ \t\n:") {
		return fmt.Errorf("iface: %q is not a valid interface name", c.Iface)
	}
	if len(c.Diag) == 0 {
		return errors.New("diag: at least one diag input is required")
	}
	for _, uri := range c.Diag {
		if err := validateDiagURI(uri); err != nil {
			return fmt.Errorf("diag %q: %w", uri, err)
		}
	}
	if c.Mode != ModeEnforce && c.Mode != ModeObserve {
		return fmt.Errorf("mode: must be enforce or observe, got %q", c.Mode)
	}
	if err := validateHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if c.StateDir == "" {
		return errors.New("state_dir: must not be empty")
	}
	// Under a unit with StateDirectory=, only that directory is writable
	// (ProtectSystem=strict) and the unit's other commands find the state
	// there: another one named here would split the state in two places.
	if dir := systemdStateDir(); dir != "" && filepath.Clean(c.StateDir) != dir {
		return fmt.Errorf("state_dir: the unit's StateDirectory= (%s, $STATE_DIRECTORY) is the state directory under systemd; remove state_dir and --state-dir, got %q", dir, c.StateDir)
	}
	if c.Policy != PolicyM2HO && c.Policy != PolicyFreeze {
		return fmt.Errorf("policy: must be m2ho or freeze, got %q", c.Policy)
	}
	for _, a := range c.Ablate {
		if _, err := ParseComponent(string(a)); err != nil {
			return fmt.Errorf("ablate: %w", err)
		}
	}
	if c.SmoothingMax < 0 || c.SmoothingMax >= maxSmoothing {
		return fmt.Errorf("smoothing_max: must be 0 (default) or below %v, got %v", maxSmoothing, c.SmoothingMax)
	}
	if !(c.Lambda >= 0 && c.Lambda <= maxLambda) { // also rejects NaN
		return fmt.Errorf("lambda: must be between 0 (default) and %d, got %v", maxLambda, c.Lambda)
	}
	if c.DefaultBufferBytes != 0 && c.DefaultBufferBytes < minDefaultBuffer {
		return fmt.Errorf("default_buffer_bytes: must be 0 (default) or at least %d, got %d", minDefaultBuffer, c.DefaultBufferBytes)
	}
	if c.MaxFlows > maxFlows {
		return fmt.Errorf("max_flows: must be 0 (default) or at most %d, got %d", maxFlows, c.MaxFlows)
	}
	if c.BurstGap < 0 || c.BurstGap > maxBurstGap {
		return fmt.Errorf("burst_gap: must be between 0 (default) and %v, got %v", maxBurstGap, c.BurstGap)
	}
	if c.DrainBurstBytes > maxDrainBurst {
		return fmt.Errorf("drain_burst_bytes: must be 0 (default) or at most %d, got %d", maxDrainBurst, c.DrainBurstBytes)
	}
	if c.PinDir != "" && !filepath.IsAbs(c.PinDir) {
		return fmt.Errorf("pin_dir: must be an absolute path or empty, got %q", c.PinDir)
	}
	if err := c.Fleet.validate(); err != nil {
		return fmt.Errorf("fleet.%w", err)
	}
	return nil
}

// fleetSchemes are the URL schemes of the NATS client.
var fleetSchemes = []string{"nats", "tls", "ws", "wss"}

// Bounds of fleet.max_age: an entry younger than a minute is no history,
// one older than a year describes another network.
const (
	minFleetMaxAge = time.Minute
	maxFleetMaxAge = 366 * 24 * time.Hour
)

// minFleetMaxBytes is the smallest bucket bound: at about 1 KB an entry,
// a MiB holds a thousand cells, ten vehicles' worth; a smaller bucket
// would refuse most of a fleet's entries from the start, and is more
// likely a unit mistaken (KiB for MiB) than a wish.
const minFleetMaxBytes = 1 << 20

// validate checks the fleet section; its errors begin with the key.
func (f Fleet) validate() error {
	if f.URL == "" {
		if f != (Fleet{}) {
			return errors.New("url: required when other fleet keys are set (--fleet)")
		}
		return nil
	}
	for u := range strings.SplitSeq(f.URL, ",") {
		parsed, err := url.Parse(strings.TrimSpace(u))
		if err != nil || !slices.Contains(fleetSchemes, parsed.Scheme) || parsed.Host == "" {
			return fmt.Errorf("url: %q is not a NATS server URL (nats://HOST:PORT, tls://, ws://, wss://)", u)
		}
	}
	if !fleet.NameRE.MatchString(f.Network) {
		return fmt.Errorf("network: required with a fleet, 1 to 64 letters, digits, _ or - (the PLMN, for example 001-01), got %q", f.Network)
	}
	for key, v := range map[string]string{"host": f.Host, "bucket": f.Bucket} {
		if v != "" && !fleet.NameRE.MatchString(v) {
			return fmt.Errorf("%s: must be 1 to 64 letters, digits, _ or -, got %q", key, v)
		}
	}
	for key, path := range map[string]string{"creds": f.CredsFile, "tls_ca": f.CAFile, "tls_cert": f.CertFile, "tls_key": f.KeyFile} {
		if path != "" && !filepath.IsAbs(path) {
			return fmt.Errorf("%s: must be an absolute path, got %q", key, path)
		}
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return errors.New("tls_cert: a client certificate needs its key (tls_key), and a key its certificate")
	}
	if f.MaxAge != 0 && (f.MaxAge < minFleetMaxAge || f.MaxAge > maxFleetMaxAge) {
		return fmt.Errorf("max_age: must be 0 (default) or between %v and %v, got %v", minFleetMaxAge, maxFleetMaxAge, f.MaxAge)
	}
	if f.MaxBytes != 0 && f.MaxBytes < minFleetMaxBytes {
		return fmt.Errorf("max_bytes: must be 0 (default, %d MiB) or at least %d bytes (1 MiB), got %d", fleet.DefaultMaxBytes>>20, minFleetMaxBytes, f.MaxBytes)
	}
	return nil
}

// diagSchemes are the inputs m2hod reads. Only the scheme is checked
// here; the input itself parses the rest when the daemon opens it.
var diagSchemes = []string{"unix", "udp", "gsmtap", "jsonl", "qmdl", "serial", "pcap"}

func validateDiagURI(uri string) error {
	scheme, rest, ok := strings.Cut(uri, ":")
	if !ok || !slices.Contains(diagSchemes, scheme) {
		return errors.New("unknown input (use unix:, udp://, gsmtap://, jsonl:, qmdl:, serial: or pcap:)")
	}
	if rest == "" {
		return errors.New("missing address or path")
	}
	return nil
}

func validateHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if host != "" && net.ParseIP(host) == nil && host != "localhost" {
		return fmt.Errorf("%q: host must be an IP address or localhost", addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil || port == "" {
		return fmt.Errorf("%q: bad port", addr)
	}
	return nil
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// flagValues holds the raw flag values before they are merged.
type flagValues struct {
	configPath, iface, mode, listen, stateDir, pinDir, logLevel, logFormat, policy, ablate string
	diag                                                                                   stringList
	diagSubscription                                                                       string
	smoothingMax, burstGap                                                                 time.Duration
	lambda                                                                                 float64
	defaultBuffer, drainBurst                                                              uint64
	maxFlows                                                                               uint
	version                                                                                bool
	fleet                                                                                  Fleet
}

// newFlagSet declares the flags into v. The flag set prints nothing: Parse
// reports errors and prints the usage for -h itself.
func newFlagSet(v *flagValues) *flag.FlagSet {
	def := Default()
	fs := flag.NewFlagSet("m2hod", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.BoolVar(&v.version, "version", false, "print the version and exit")
	fs.StringVar(&v.configPath, "config", "", "YAML configuration `file` (flags override it)")
	fs.StringVar(&v.iface, "iface", "", "modem `interface` (wwan0, rmnet_data0, usb0, ...)")
	fs.Var(&v.diag, "diag", "diag input `URI`, repeatable (unix:, udp://, gsmtap://, jsonl:, qmdl:, serial:, pcap:; default "+DefaultDiag()+")")
	fs.StringVar(&v.diagSubscription, "diag-subscription", def.DiagSubscription.String(), "SIM `subscription` of a multi-SIM modem to follow: auto (the one carrying data) or an index from 0")
	fs.StringVar(&v.mode, "mode", string(def.Mode), "enforce or observe (observe never changes a packet)")
	fs.StringVar(&v.listen, "listen", def.Listen, "HTTP `address` for /metrics, /healthz and /status")
	fs.StringVar(&v.stateDir, "state-dir", def.StateDir, "`directory` of the per-cell estimate store")
	fs.StringVar(&v.logLevel, "log-level", strings.ToLower(def.LogLevel.String()), "debug, info, warn or error")
	fs.StringVar(&v.logFormat, "log-format", "", "text, json or journal (default: journal when stderr is the journal, else text)")
	fs.StringVar(&v.policy, "policy", string(def.Policy), "m2ho or freeze (zero-window baseline)")
	fs.StringVar(&v.ablate, "ablate", "", "comma-separated components to switch off: prediction, suppression, bandwidth_clamp, ramp")
	fs.DurationVar(&v.smoothingMax, "smoothing-max", 0, "maximum Smoothing duration (0: default)")
	fs.Float64Var(&v.lambda, "lambda", 0, "bandwidth clamp probing factor, paper Eq. 2 (0: default)")
	fs.Uint64Var(&v.defaultBuffer, "default-buffer", 0, fmt.Sprintf("buffer estimate in `bytes` before any cell history, at least %d (0: default)", minDefaultBuffer))
	fs.DurationVar(&v.burstGap, "burst-gap", 0, "idle gap that ends a downlink burst (0: default)")
	fs.Uint64Var(&v.drainBurst, "drain-burst", 0, fmt.Sprintf("smallest downlink burst in `bytes` that ends Smoothing, at most %d (0: default)", maxDrainBurst))
	fs.UintVar(&v.maxFlows, "max-flows", 0, fmt.Sprintf("size of the datapath flow table, at most %d (0: default)", maxFlows))
	fs.StringVar(&v.pinDir, "pin-dir", def.PinDir, "`directory` on the BPF filesystem keeping flows across an unclean exit (empty: none)")
	fs.StringVar(&v.fleet.URL, "fleet", "", "fleet store: NATS server `URL`s with JetStream, comma-separated (nats://HOST:PORT; empty: none)")
	fs.StringVar(&v.fleet.Network, "fleet-network", "", "`name` of the mobile network whose cells the fleet shares (its PLMN, for example 001-01)")
	fs.StringVar(&v.fleet.Host, "fleet-host", "", "`name` of this host in the fleet (default: the host name)")
	fs.StringVar(&v.fleet.Bucket, "fleet-bucket", "", "fleet key-value `bucket` (default "+fleet.DefaultBucket+")")
	fs.StringVar(&v.fleet.CredsFile, "fleet-creds", "", "NATS credentials `file` for the fleet store")
	fs.StringVar(&v.fleet.CAFile, "fleet-tls-ca", "", "CA certificates `file` to verify the fleet store")
	fs.StringVar(&v.fleet.CertFile, "fleet-tls-cert", "", "client certificate `file` for the fleet store")
	fs.StringVar(&v.fleet.KeyFile, "fleet-tls-key", "", "client key `file` for the fleet store")
	fs.DurationVar(&v.fleet.MaxAge, "fleet-max-age", 0, "oldest fleet entry that counts (0: default "+fleet.DefaultMaxAge.String()+")")
	fs.Int64Var(&v.fleet.MaxBytes, "fleet-max-bytes", 0, fmt.Sprintf("size bound in `bytes` of the fleet bucket when this host creates it, at least %d (0: default, %d MiB)", minFleetMaxBytes, fleet.DefaultMaxBytes>>20))
	return fs
}

// ErrCommandLine marks the errors of Parse that the command line itself
// caused (an unknown flag, a value of the wrong type, an extra argument),
// as opposed to a configuration that reads well but is wrong.
var ErrCommandLine = errors.New("command line")

// ErrVersion is what Parse returns for --version, as flag.ErrHelp for -h:
// the caller prints the version and exits.
var ErrVersion = errors.New("version requested")

// Parse builds the configuration from the command line arguments (without
// the program name). For -h it writes the usage to usageOut (nil:
// os.Stderr) and returns flag.ErrHelp; a bad flag gets a one-line error and
// no usage, which would bury the reason.
func Parse(args []string, usageOut io.Writer) (Config, error) {
	if usageOut == nil {
		usageOut = os.Stderr
	}
	var v flagValues
	fs := newFlagSet(&v)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(usageOut)
			fmt.Fprintln(usageOut, "usage: m2hod --iface IFACE [flags]\n       m2hod decode [--raw] URI\n       m2hod version\nflags:")
			fs.PrintDefaults()
			return Config{}, err
		}
		return Config{}, fmt.Errorf("%w: %s (m2hod -h lists the flags)", ErrCommandLine, oneLine(err))
	}
	if v.version {
		return Config{}, ErrVersion
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("%w: unexpected argument %q", ErrCommandLine, fs.Arg(0))
	}
	cfg := Default()
	if v.configPath != "" {
		var err error
		if cfg, err = LoadFile(v.configPath, cfg); err != nil {
			return Config{}, err
		}
	}
	var applyErr error
	fs.Visit(func(f *flag.Flag) {
		if applyErr == nil {
			applyErr = v.apply(f.Name, &cfg)
		}
	})
	if applyErr != nil {
		return Config{}, applyErr
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return cfg, nil
}

// apply copies the flag called name over cfg.
func (v *flagValues) apply(name string, cfg *Config) error {
	switch name {
	case "iface":
		cfg.Iface = v.iface
	case "diag":
		cfg.Diag = slices.Clone(v.diag)
	case "diag-subscription":
		follow, err := rrc.ParseFollow(v.diagSubscription)
		if err != nil {
			return fmt.Errorf("--diag-subscription: %w", err)
		}
		cfg.DiagSubscription = follow
	case "mode":
		cfg.Mode = Mode(v.mode)
	case "listen":
		cfg.Listen = v.listen
	case "state-dir":
		cfg.StateDir = v.stateDir
	case "log-level":
		level, err := parseLevel(v.logLevel)
		if err != nil {
			return fmt.Errorf("--log-level: %w", err)
		}
		cfg.LogLevel = level
	case "log-format":
		format, err := parseLogFormat(v.logFormat)
		if err != nil || format == LogAuto {
			return fmt.Errorf("--log-format: must be text, json or journal, got %q", v.logFormat)
		}
		cfg.LogFormat = format
	case "policy":
		cfg.Policy = Policy(v.policy)
	case "ablate":
		cfg.Ablate = nil
		if v.ablate != "" {
			cfg.Ablate = toComponents(strings.Split(v.ablate, ","))
		}
	case "smoothing-max":
		cfg.SmoothingMax = v.smoothingMax
	case "lambda":
		cfg.Lambda = v.lambda
	case "default-buffer":
		cfg.DefaultBufferBytes = v.defaultBuffer
	case "burst-gap":
		cfg.BurstGap = v.burstGap
	case "drain-burst":
		cfg.DrainBurstBytes = v.drainBurst
	case "max-flows":
		// Checked before the conversion, which would wrap.
		if v.maxFlows > maxFlows {
			return fmt.Errorf("--max-flows: must be 0 (default) or at most %d, got %d", maxFlows, v.maxFlows)
		}
		cfg.MaxFlows = uint32(v.maxFlows)
	case "pin-dir":
		cfg.PinDir = v.pinDir
	case "fleet":
		cfg.Fleet.URL = v.fleet.URL
	case "fleet-network":
		cfg.Fleet.Network = v.fleet.Network
	case "fleet-host":
		cfg.Fleet.Host = v.fleet.Host
	case "fleet-bucket":
		cfg.Fleet.Bucket = v.fleet.Bucket
	case "fleet-creds":
		cfg.Fleet.CredsFile = v.fleet.CredsFile
	case "fleet-tls-ca":
		cfg.Fleet.CAFile = v.fleet.CAFile
	case "fleet-tls-cert":
		cfg.Fleet.CertFile = v.fleet.CertFile
	case "fleet-tls-key":
		cfg.Fleet.KeyFile = v.fleet.KeyFile
	case "fleet-max-age":
		cfg.Fleet.MaxAge = v.fleet.MaxAge
	case "fleet-max-bytes":
		cfg.Fleet.MaxBytes = v.fleet.MaxBytes
	}
	return nil
}
