package diag

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// MaxDatagram bounds one UDP datagram of JSON events. A larger datagram is
// counted as "udp_truncated" and dropped whole, since its last line is cut.
const MaxDatagram = 16 << 10

// ReceiveBufferBytes is the socket receive buffer ListenUDP asks for. A
// diag stream is bursty (slot allocations every few milliseconds, floods
// of measurement reports around a handover) while the reader may wait for
// the daemon's event queue; at 10,000 events per second the default of
// about 200 KiB (a few hundred datagrams with the kernel's per-packet
// overhead) overflows within tens of milliseconds of such a wait.
const ReceiveBufferBytes = 4 << 20

// Error reasons of the UDP and JSON lines inputs.
const (
	ReasonUDPTruncated = "udp_truncated"
	ReasonLineTooLong  = "json_line_too_long"
)

// UDPSource receives version-1 JSON events over UDP: one event per
// datagram, or several separated by newlines.
type UDPSource struct {
	name  string
	conn  *net.UDPConn
	stats *Stats
	now   func() time.Time
}

// ListenUDP binds addr (host:port) and returns the source; binding happens
// here so that a busy port is reported when the daemon starts.
func ListenUDP(name, addr string, stats *Stats) (*UDPSource, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("diag %s: resolve %q: %w", name, addr, err)
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("diag %s: listen: %w", name, err)
	}
	if err := setReceiveBuffer(conn, ReceiveBufferBytes); err != nil {
		conn.Close()
		return nil, fmt.Errorf("diag %s: %w", name, err)
	}
	if stats == nil {
		stats = &Stats{}
	}
	return &UDPSource{name: name, conn: conn, stats: stats, now: time.Now}, nil
}

// datagramConn is a UDP or unix datagram socket.
type datagramConn interface {
	SyscallConn() (syscall.RawConn, error)
	SetReadBuffer(bytes int) error
}

// setReceiveBuffer sizes the socket's receive buffer. SO_RCVBUFFORCE,
// allowed with CAP_NET_ADMIN (m2hod needs it for the datapath anyway),
// passes over net.core.rmem_max, which is 208 KiB on many systems;
// without the capability the buffer is the largest rmem_max allows.
func setReceiveBuffer(conn datagramConn, size int) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	var sockErr error
	if err := raw.Control(func(fd uintptr) {
		sockErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size)
	}); err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	if errors.Is(sockErr, unix.EPERM) {
		sockErr = conn.SetReadBuffer(size)
	}
	if sockErr != nil {
		return fmt.Errorf("set receive buffer to %d bytes: %w", size, sockErr)
	}
	return nil
}

// Name returns the URI the source was opened from.
func (s *UDPSource) Name() string { return s.name }

// Addr is the bound local address (useful when the port was 0).
func (s *UDPSource) Addr() net.Addr { return s.conn.LocalAddr() }

// Close releases the socket of a source that was never Run.
func (s *UDPSource) Close() error { return s.conn.Close() }

// Run delivers events until ctx is cancelled; it owns and closes the socket.
func (s *UDPSource) Run(ctx context.Context, out chan<- Event) error {
	return s.receive(ctx, eachEvent(ctx, out, s.stats))
}

// RunBatches is Run delivering the events of each datagram together.
func (s *UDPSource) RunBatches(ctx context.Context, out chan<- []Event) error {
	return s.receive(ctx, wholeDatagram(ctx, out, s.stats))
}

func (s *UDPSource) receive(ctx context.Context, deliver deliverer) error {
	stop := context.AfterFunc(ctx, func() { s.conn.Close() })
	defer stop()
	defer s.conn.Close()
	// One byte more than accepted, so that the kernel's truncation flag
	// and an exactly full buffer cannot be confused.
	r, err := newDatagramReader(s.conn, MaxDatagram+1, 0)
	if err != nil {
		return fmt.Errorf("diag %s: %w", s.name, err)
	}
	for {
		datagram, _, flags, err := r.next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("diag %s: read: %w", s.name, err)
		}
		if flags&syscall.MSG_TRUNC != 0 || len(datagram) > MaxDatagram {
			s.stats.CountError(ReasonUDPTruncated)
			continue
		}
		if err := deliver(datagram, s.now()); err != nil {
			return err
		}
	}
}

// deliverer parses the JSON records of a datagram received at received
// and passes its events on. It fails only when ctx ends.
type deliverer func(datagram []byte, received time.Time) error

// eachEvent delivers a datagram's events one by one, as Run does.
func eachEvent(ctx context.Context, out chan<- Event, stats *Stats) deliverer {
	// Reused from datagram to datagram: the events are sent as values.
	var evs []Event
	return func(datagram []byte, received time.Time) error {
		evs = datagramEvents(evs[:0], datagram, received, stats)
		for _, ev := range evs {
			select {
			case out <- ev:
				stats.CountEvent(ev.Type)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// The buffer does not keep the datagram's events alive.
		clear(evs)
		return nil
	}
}

// wholeDatagram delivers a datagram's events in one slice, as RunBatches
// does. It fills cap(out)+2 slices in turn, so that a datagram costs no
// allocation of its events: one the receiver may still work on, cap(out)
// queued, and the one being filled (see BatchSource). The events are
// counted as parsed, before the receiver has them (see BatchSource), and
// the slice is the receiver's once sent.
func wholeDatagram(ctx context.Context, out chan<- []Event, stats *Stats) deliverer {
	bufs := make([][]Event, cap(out)+2)
	next := 0
	return func(datagram []byte, received time.Time) error {
		// The receiver is done with this slice's previous events; they
		// are not kept alive by it.
		clear(bufs[next])
		evs := datagramEvents(bufs[next][:0], datagram, received, stats)
		if len(evs) == 0 {
			return nil
		}
		bufs[next], next = evs, (next+1)%len(bufs)
		stats.countEvents(evs)
		select {
		case out <- evs:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// datagramEvents appends to evs the events of a datagram's JSON records,
// one per line. Blank lines are skipped and bad records counted.
func datagramEvents(evs []Event, datagram []byte, received time.Time, stats *Stats) []Event {
	for line := range bytes.SplitSeq(datagram, []byte{'\n'}) {
		if ev, ok := parseLine(line, received, stats); ok {
			evs = append(evs, ev)
		}
	}
	return evs
}

// deliverLine parses one JSON record and sends it; blank lines are skipped
// and bad ones counted. It fails only when ctx ends.
func deliverLine(ctx context.Context, line []byte, received time.Time, stats *Stats, out chan<- Event) error {
	ev, ok := parseLine(line, received, stats)
	if !ok {
		return nil
	}
	select {
	case out <- ev:
		stats.CountEvent(ev.Type)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// parseLine parses one JSON record, stamped received unless it carries
// its time. It reports false for a blank line and for a bad record, which
// it counts.
func parseLine(line []byte, received time.Time, stats *Stats) (Event, bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return Event{}, false
	}
	ev, err := ParseJSON(line)
	if err != nil {
		stats.CountError(ErrorReason(err, ReasonJSONSyntax))
		return Event{}, false
	}
	if ev.Time.IsZero() {
		ev.Time = received
	}
	return ev, true
}
