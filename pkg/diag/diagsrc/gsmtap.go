package diagsrc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/gsmtap"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
)

// maxGSMTAPDatagram is the largest UDP payload; RRC containers (UE
// capabilities) can take several kilobytes.
const maxGSMTAPDatagram = 65535

// ReasonCaptureUndecodable counts capture packets gopacket could not
// decode at all.
const ReasonCaptureUndecodable = "capture_undecodable_packet"

// gsmtapDecoder turns GSMTAP and QCSuper NR datagrams into events. It is
// shared by the live and capture inputs; it serialises access to the
// stateful RRC decoder.
type gsmtapDecoder struct {
	// mu serialises the listeners of the GSMTAP and QCSuper NR ports,
	// which share one joiner and one ordered output.
	mu sync.Mutex
	*pump
}

func newGSMTAPDecoder(opts Options, out chan<- diag.Event) *gsmtapDecoder {
	return &gsmtapDecoder{pump: newPump(opts, out)}
}

// datagram handles one payload received at (or captured at) t on port.
func (d *gsmtapDecoder) datagram(ctx context.Context, port uint16, payload []byte, t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	rec := record{Time: t, Length: len(payload), Version: "-"}
	var msg diag.RRCMessage
	var ok bool
	var err error
	switch port {
	case gsmtap.QCSuperNRPort:
		rec.Kind = "qcsuper-nr"
		msg, ok, err = d.joiner.Add(qcdiag.LogPacket{Code: qcdiag.CodeNRRRCOTA, Time: t, Payload: payload})
		if len(payload) > 0 {
			rec.Version = "v" + strconv.Itoa(int(payload[0]))
		}
	default:
		rec.Kind = "gsmtap"
		msg, ok, err = gsmtap.Parse(payload)
		if len(payload) > 0 {
			rec.Version = "v" + strconv.Itoa(int(payload[0]))
		}
	}
	if d.pacer != nil {
		if werr := d.pacer.wait(ctx, t); werr != nil {
			return werr
		}
	}
	switch {
	case err != nil:
		rec.Note = diag.ErrorReason(err, gsmtap.ReasonMalformed)
		d.sink.stats.CountError(rec.Note)
	case ok:
		if msg.Time.IsZero() {
			msg.Time = t
		}
		rec.Time = msg.Time
		rec.RRC = &msg
		n, err := d.sink.deliver(ctx, msg)
		if err != nil {
			return err
		}
		rec.Events = n
	default:
		rec.Note = "not_rrc_for_m2ho"
	}
	if d.observe != nil {
		return d.observe(rec)
	}
	return nil
}

// GSMTAPSource listens for GSMTAP (and QCSuper NR RRC) datagrams.
type GSMTAPSource struct {
	name        string
	gsmtapConn  *net.UDPConn
	qcsuperConn *net.UDPConn
	opts        Options
}

// listenGSMTAP binds addr for GSMTAP and the same host on port 47928 for
// QCSuper's NR RRC (on an ephemeral port when addr's port is 0).
func listenGSMTAP(name, addr string, opts Options) (*GSMTAPSource, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("diag %s: %w", name, err)
	}
	nrPort := strconv.Itoa(gsmtap.QCSuperNRPort)
	if port == "0" {
		nrPort = "0"
	}
	g, err := listenUDP(name, addr)
	if err != nil {
		return nil, err
	}
	q, err := listenUDP(name, net.JoinHostPort(host, nrPort))
	if err != nil {
		g.Close()
		return nil, err
	}
	return &GSMTAPSource{name: name, gsmtapConn: g, qcsuperConn: q, opts: opts}, nil
}

func listenUDP(name, addr string) (*net.UDPConn, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("diag %s: resolve %q: %w", name, addr, err)
	}
	c, err := net.ListenUDP("udp", ua)
	if err != nil {
		return nil, fmt.Errorf("diag %s: listen: %w", name, err)
	}
	return c, nil
}

// Name returns the URI the source was opened from.
func (s *GSMTAPSource) Name() string { return s.name }

// Addrs are the bound GSMTAP and QCSuper NR addresses.
func (s *GSMTAPSource) Addrs() (gsmtapAddr, qcsuperNRAddr net.Addr) {
	return s.gsmtapConn.LocalAddr(), s.qcsuperConn.LocalAddr()
}

// Close releases the sockets of a source that was never Run.
func (s *GSMTAPSource) Close() error {
	return errors.Join(s.gsmtapConn.Close(), s.qcsuperConn.Close())
}

// Run receives until ctx ends; it owns and closes the sockets.
func (s *GSMTAPSource) Run(ctx context.Context, out chan<- diag.Event) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	dec := newGSMTAPDecoder(s.opts, out)
	errs := make(chan error, 2)
	recv := func(conn *net.UDPConn, port uint16) {
		errs <- s.receive(ctx, conn, port, dec)
	}
	go recv(s.gsmtapConn, gsmtap.Port)
	go recv(s.qcsuperConn, gsmtap.QCSuperNRPort)
	err := <-errs
	cancel()
	<-errs
	return err
}

func (s *GSMTAPSource) receive(ctx context.Context, conn *net.UDPConn, port uint16, dec *gsmtapDecoder) error {
	buf := make([]byte, maxGSMTAPDatagram+1)
	for {
		n, _, flags, _, err := conn.ReadMsgUDP(buf, nil)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("diag %s: read: %w", s.name, err)
		}
		if flags&syscall.MSG_TRUNC != 0 || n > maxGSMTAPDatagram {
			s.opts.Stats.CountError(diag.ReasonUDPTruncated)
			continue
		}
		// The RRC decoder may keep what it is given; buf is reused.
		if err := dec.datagram(ctx, port, append([]byte(nil), buf[:n]...), time.Now().UTC()); err != nil {
			return err
		}
	}
}

// PcapSource reads GSMTAP and QCSuper NR datagrams from a capture file.
type PcapSource struct {
	name, path string
	opts       Options
}

func newPcapSource(name, path string, opts Options) (*PcapSource, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("diag input %s: %w", name, err)
	}
	return &PcapSource{name: name, path: path, opts: opts}, nil
}

// Name returns the URI the source was opened from.
func (s *PcapSource) Name() string { return s.name }

// Run reads the capture once and returns nil at its end.
func (s *PcapSource) Run(ctx context.Context, out chan<- diag.Event) error {
	f, err := openInput(ctx, s.path)
	if err != nil {
		return openError(ctx, s.name, err)
	}
	defer f.Close()
	dec := newGSMTAPDecoder(s.opts, out)
	skipped, err := gsmtap.ReadCapture(f, func(d gsmtap.Datagram) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.DstPort != gsmtap.Port && d.DstPort != gsmtap.QCSuperNRPort {
			return nil
		}
		// The capture reuses its buffer for the next packet, and decoded
		// messages may be kept by the RRC decoder.
		return dec.datagram(ctx, d.DstPort, append([]byte(nil), d.Payload...), d.Time)
	})
	for range skipped {
		s.opts.Stats.CountError(ReasonCaptureUndecodable)
	}
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		// A read interrupted by the end of ctx fails with its own error.
		return ctxErr
	}
	return fmt.Errorf("diag %s: %w", s.name, err)
}
