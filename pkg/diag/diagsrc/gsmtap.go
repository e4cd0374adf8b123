package diagsrc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
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
//
// Every message is stamped with the time of its datagram (the receive
// time, or the capture's timestamp), even when a GSMTAP v3 header carries
// the modem's: v2 headers carry none, and a feed mixes both versions (SCAT
// sends LTE RRC as v3 from EARFCN 16384 on, as v2 below), so stamping v3
// with the modem's clock would put two clocks, and steps backwards, into
// one stream of events. SCAT's pcap files carry the modem's time as their
// timestamps, so both clocks agree there.
type gsmtapDecoder struct {
	// mu serialises the listeners of the GSMTAP and QCSuper NR ports,
	// which share one joiner and one ordered output.
	mu sync.Mutex
	*pump
}

func newGSMTAPDecoder(opts Options, out chan<- diag.Event) *gsmtapDecoder {
	return &gsmtapDecoder{pump: newPump(opts, out)}
}

// datagram handles one payload received at (or captured at) t on port,
// of the SIM subscription sub.
func (d *gsmtapDecoder) datagram(ctx context.Context, port uint16, sub uint8, payload []byte, t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	rec := record{Time: t, Length: len(payload), Version: "-"}
	var msg diag.RRCMessage
	var ok bool
	var err error
	switch port {
	case gsmtap.QCSuperNRPort:
		rec.Kind = "qcsuper-nr"
		msg, ok, err = d.joiner.Add(qcdiag.LogPacket{Code: qcdiag.CodeNRRRCOTA, Time: t, Payload: payload, Subscription: sub})
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
		d.sink.drop(rec.Note)
	case ok:
		msg.Time, msg.Subscription = t, sub
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

// gsmtapReadBuffer is the socket receive buffer asked for: SCAT replaying
// a file sends thousands of datagrams a second, more than the default
// buffer holds while the decoder catches up.
const gsmtapReadBuffer = 4 << 20

// GSMTAPSource listens for GSMTAP (and QCSuper NR RRC) datagrams.
type GSMTAPSource struct {
	name string
	// gsmtapConns receive GSMTAP, indexed by SIM subscription.
	gsmtapConns []*net.UDPConn
	qcsuperConn *net.UDPConn
	opts        Options
}

// listenGSMTAP binds addr for GSMTAP and the same host on port 47928 for
// QCSuper's NR RRC (on an ephemeral port when addr's port is 0). SCAT
// sends a second SIM subscription's GSMTAP to the next IPv4 address on
// the same port (127.0.0.2 by default): on a loopback host, where every
// 127/8 address is local, that address is bound too.
func listenGSMTAP(name, addr string, opts Options) (_ *GSMTAPSource, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("diag %s: %w", name, err)
	}
	nrPort := strconv.Itoa(gsmtap.QCSuperNRPort)
	if port == "0" {
		nrPort = "0"
	}
	s := &GSMTAPSource{name: name, opts: opts}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	g, err := listenUDP(name, addr)
	if err != nil {
		return nil, err
	}
	s.gsmtapConns = append(s.gsmtapConns, g)
	if second, ok := secondSubscriptionAddr(g.LocalAddr().(*net.UDPAddr)); ok {
		c, err := listenUDP(name, second.String())
		if err != nil {
			return nil, fmt.Errorf("%w (the second SIM subscription's address)", err)
		}
		s.gsmtapConns = append(s.gsmtapConns, c)
	}
	if s.qcsuperConn, err = listenUDP(name, net.JoinHostPort(host, nrPort)); err != nil {
		return nil, err
	}
	return s, nil
}

// secondSubscriptionAddr is where SCAT sends the second subscription when
// it sends the first to first: the next IPv4 address, same port; only
// for loopback addresses, the only ones sure to be local.
func secondSubscriptionAddr(first *net.UDPAddr) (netip.AddrPort, bool) {
	ap := first.AddrPort()
	a := ap.Addr().Unmap()
	if !a.Is4() || !a.IsLoopback() || a.As4()[3] == 255 {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a.Next(), ap.Port()), true
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
	// The kernel caps the size at net.core.rmem_max; a smaller buffer
	// only makes bursts more likely to be lost and counted.
	_ = c.SetReadBuffer(gsmtapReadBuffer)
	return c, nil
}

// Name returns the URI the source was opened from.
func (s *GSMTAPSource) Name() string { return s.name }

// Close releases the sockets of a source that was never Run.
func (s *GSMTAPSource) Close() error {
	var errs []error
	for _, c := range append(slices.Clone(s.gsmtapConns), s.qcsuperConn) {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// Run receives until ctx ends; it owns and closes the sockets.
func (s *GSMTAPSource) Run(ctx context.Context, out chan<- diag.Event) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	dec := newGSMTAPDecoder(s.opts, out)
	receivers := len(s.gsmtapConns) + 1
	errs := make(chan error, receivers)
	for sub, conn := range s.gsmtapConns {
		go func() { errs <- s.receive(ctx, conn, gsmtap.Port, uint8(sub), dec) }()
	}
	go func() { errs <- s.receive(ctx, s.qcsuperConn, gsmtap.QCSuperNRPort, 0, dec) }()
	err := <-errs
	cancel()
	for range receivers - 1 {
		<-errs
	}
	return err
}

func (s *GSMTAPSource) receive(ctx context.Context, conn *net.UDPConn, port uint16, sub uint8, dec *gsmtapDecoder) error {
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
			dec.sink.drop(diag.ReasonUDPTruncated)
			continue
		}
		// The RRC decoder may keep what it is given; buf is reused.
		if err := dec.datagram(ctx, port, sub, append([]byte(nil), buf[:n]...), time.Now().UTC()); err != nil {
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
	read := 0
	otherPorts := map[uint16]int{}
	skipped, err := gsmtap.ReadCapture(f, func(d gsmtap.Datagram) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.DstPort != gsmtap.Port && d.DstPort != gsmtap.QCSuperNRPort {
			otherPorts[d.DstPort]++
			return nil
		}
		read++
		// The capture reuses its buffer for the next packet, and decoded
		// messages may be kept by the RRC decoder.
		sub := gsmtap.Subscription(gsmtap.SCATBaseAddr, d.DstAddr)
		return dec.datagram(ctx, d.DstPort, sub, append([]byte(nil), d.Payload...), d.Time)
	})
	for range skipped {
		dec.sink.drop(ReasonCaptureUndecodable)
	}
	s.opts.drops.flush()
	if read == 0 && len(otherPorts) > 0 {
		// SCAT's -P moves the port of its pcap files as well.
		s.opts.Logger.Warn("capture has no datagram to the GSMTAP ports", "input", s.name,
			"ports", []uint16{gsmtap.Port, gsmtap.QCSuperNRPort}, "udp_to_other_ports", otherPorts)
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
