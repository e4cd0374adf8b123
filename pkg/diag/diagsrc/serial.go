package diagsrc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
)

// Serial port timing.
const (
	// maskTimeout bounds the wait for the modem's LOG_CONFIG answer.
	maskTimeout = 3 * time.Second
	// Reconnection backoff after the port fails or disappears.
	minReconnectDelay = 200 * time.Millisecond
	maxReconnectDelay = 5 * time.Second
)

// ReasonSerialLost counts sessions on a serial port that ended in error.
const ReasonSerialLost = "serial_port_lost"

// SerialSource reads a live modem's DIAG port. It sets the log mask after
// every (re)connection and keeps retrying while the device is missing, so
// a modem that resets or is replugged comes back by itself.
type SerialSource struct {
	name, path string
	opts       Options
	log        *slog.Logger
	counters   counterSet
	// Codes are the log codes enabled on the modem.
	codes []uint16
}

func newSerialSource(name, path string, opts Options) *SerialSource {
	return &SerialSource{name: name, path: path, opts: opts, codes: qcdiag.DefaultLogCodes,
		log: opts.Logger.With("diag", name)}
}

// Name returns the URI the source was opened from.
func (s *SerialSource) Name() string { return s.name }

// Counters are the DIAG framing counts over all connections so far.
func (s *SerialSource) Counters() qcdiag.Counters { return s.counters.snapshot() }

// Run reads until ctx ends; port failures are logged and retried.
func (s *SerialSource) Run(ctx context.Context, out chan<- diag.Event) error {
	delay := minReconnectDelay
	for {
		streamed, err := s.session(ctx, out)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if streamed {
			delay = minReconnectDelay
		}
		s.opts.Stats.CountError(ReasonSerialLost)
		s.log.Warn("diag port unavailable, retrying", "port", s.path, "err", err, "retry_in", delay)
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
		delay = min(2*delay, maxReconnectDelay)
	}
}

// session runs one connection: open, enable logging, stream. It reports
// whether logging was enabled, which resets the backoff.
func (s *SerialSource) session(ctx context.Context, out chan<- diag.Event) (bool, error) {
	dev, err := qcdiag.OpenSerial(s.path)
	if err != nil {
		return false, err
	}
	defer dev.Close()
	// Closing the device is what unblocks a pending read on cancel.
	stop := context.AfterFunc(ctx, func() { dev.Close() })
	defer stop()
	reader := qcdiag.NewReader(dev, s.opts.Stats)
	s.counters.attach(reader)
	defer s.counters.detach()
	if err := qcdiag.EnableLogs(dev, reader, s.codes, maskTimeout); err != nil {
		return false, err
	}
	s.log.Info("diag logging enabled", "port", s.path, "codes", fmt.Sprintf("%04X", s.codes))
	err = newPump(s.opts, out).run(ctx, reader)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true, err
	}
	return true, fmt.Errorf("read %s: %w", s.path, err)
}
