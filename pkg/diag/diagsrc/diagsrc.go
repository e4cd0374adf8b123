// Package diagsrc opens the diag inputs of DESIGN.md by URI: JSON events
// (udp://, jsonl:), Qualcomm DIAG streams (qmdl:, serial:) and GSMTAP
// (gsmtap://, pcap:). DIAG and GSMTAP inputs yield RRC messages, which the
// configured diag.RRCDecoder turns into events.
package diagsrc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/m2ho/m2ho/pkg/diag"
)

// Options configure the inputs.
type Options struct {
	// Stats counts events and errors of every input (nil: a private one).
	Stats *diag.Stats
	// RRC decodes RRC messages into events; nil yields no events from
	// DIAG and GSMTAP inputs (Decode's raw listing still works).
	RRC diag.RRCDecoder
	// Logger receives warnings such as a lost serial device (nil: the
	// default logger).
	Logger *slog.Logger
	// Realtime replays recorded DIAG streams at the pace of their
	// timestamps instead of as fast as possible.
	Realtime bool
	// Stdin is read by jsonl:- (nil: os.Stdin).
	Stdin io.Reader

	// observe receives every DIAG packet or GSMTAP datagram (Decode's
	// raw listing).
	observe func(record) error
	// drops warns about what the input drops; Open sets it.
	drops *dropWarner
}

func (o Options) withDefaults() Options {
	if o.Stats == nil {
		o.Stats = &diag.Stats{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Stdin == nil {
		o.Stdin = os.Stdin
	}
	return o
}

// Default listening addresses; hosts default to loopback so that nothing
// off the machine can feed the daemon unless asked to.
const (
	DefaultUDPPort    = 5599
	defaultListenHost = "127.0.0.1"
)

// ErrBadURI marks a URI that names no input m2hod reads: no scheme, an
// unknown one, or an input the caller cannot use. Commands report it as a
// usage mistake, not as an input that failed.
var ErrBadURI = errors.New("not a diag input")

// Open returns the input the URI names:
//
//	udp://HOST:PORT     JSON events over UDP (default 127.0.0.1:5599)
//	jsonl:PATH, jsonl:- JSON events, one per line, from a file or stdin
//	qmdl:PATH           recorded Qualcomm DIAG stream (.qmdl, .mi2log)
//	serial:DEV          live Qualcomm DIAG port; the log mask is set
//	gsmtap://HOST:PORT  GSMTAP over UDP (default 127.0.0.1:4729), plus
//	                    QCSuper's NR RRC on port 47928 of the same host
//	pcap:PATH           pcap or pcapng file of GSMTAP / QCSuper NR RRC
//
// Network inputs bind here, so a busy port fails Open rather than Run.
func Open(uri string, opts Options) (diag.Source, error) {
	opts = opts.withDefaults()
	opts.drops = newDropWarner(opts.Logger, uri)
	name, rest, ok := strings.Cut(uri, ":")
	if !ok || rest == "" {
		return nil, fmt.Errorf("diag input %q: %w: want SCHEME:..., one of %s", uri, ErrBadURI, schemeNames())
	}
	sc, ok := schemeOf(name)
	if !ok {
		return nil, fmt.Errorf("diag input %q: %w: unknown scheme %q", uri, ErrBadURI, name)
	}
	return sc.open(uri, rest, opts)
}

// listenAddr turns the part after "scheme:" of //HOST:PORT into an
// address, filling in the loopback host and the default port.
func listenAddr(uri, rest string, defaultPort int) (string, error) {
	hostport, ok := strings.CutPrefix(rest, "//")
	if !ok {
		return "", fmt.Errorf("diag input %q: want %s//HOST:PORT", uri, uri[:len(uri)-len(rest)])
	}
	hostport = strings.TrimSuffix(hostport, "/")
	if hostport == "" {
		return net.JoinHostPort(defaultListenHost, strconv.Itoa(defaultPort)), nil
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		// No port given.
		host, port = strings.Trim(hostport, "[]"), strconv.Itoa(defaultPort)
	}
	if host == "" {
		host = defaultListenHost
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 && port != "0" {
		return "", fmt.Errorf("diag input %q: bad port %q", uri, port)
	}
	return net.JoinHostPort(host, port), nil
}

// jsonlFile opens its file when run, so that Open of a missing file is
// reported once by Run like every other read error.
type jsonlFile struct {
	name, path string
	stats      *diag.Stats
}

func (s *jsonlFile) Name() string { return s.name }

func (s *jsonlFile) Run(ctx context.Context, out chan<- diag.Event) error {
	f, err := openInput(ctx, s.path)
	if err != nil {
		return openError(ctx, s.name, err)
	}
	defer f.Close()
	return diag.NewJSONLSource(s.name, f, s.stats).Run(ctx, out)
}

// openError is the error of Run when openInput fails: ctx.Err() if ctx
// ended the wait for a writer, else the failure, naming the input.
func openError(ctx context.Context, name string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return ctxErr
	}
	return fmt.Errorf("diag %s: %w", name, err)
}

// rrcSink turns RRC messages into events through the decoder and sends
// them on out.
type rrcSink struct {
	decoder diag.RRCDecoder
	stats   *diag.Stats
	drops   *dropWarner
	out     chan<- diag.Event
}

// drop counts one message the input could not use, for reason.
func (s rrcSink) drop(reason string) {
	s.stats.CountError(reason)
	s.drops.note(reason)
}

// ReasonRRCDecode labels decoder failures that do not carry a reason.
const ReasonRRCDecode = "rrc_decode"

// deliver decodes msg and sends its events; it fails only when ctx ends.
// It returns how many events msg produced.
func (s rrcSink) deliver(ctx context.Context, msg diag.RRCMessage) (int, error) {
	if s.decoder == nil {
		return 0, nil
	}
	events, err := s.decoder.Decode(msg)
	if err != nil {
		s.drop(diag.ErrorReason(err, ReasonRRCDecode))
	}
	for _, ev := range events {
		if ev.Time.IsZero() {
			ev.Time = msg.Time
		}
		select {
		case s.out <- ev:
			s.stats.CountEvent(ev.Type)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return len(events), nil
}
