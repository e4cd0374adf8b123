// Package traffic runs the testbed's TCP traffic: bulk senders with a
// congestion control chosen per socket, a receiver that counts bytes,
// goodput sampled every 100 ms, the sender's TCP_INFO every 10 ms, and an
// optional pcap capture written by the testbed itself.
package traffic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/test/rtprio"
)

// Namespace runs a function inside a network namespace; sockets opened
// there stay in it (topo.Namespace.Do).
type Namespace func(func() error) error

// Sampling periods of the measurements.
const (
	GoodputPeriod = 100 * time.Millisecond
	TCPInfoPeriod = 10 * time.Millisecond
)

// writeChunk is what one write of a bulk sender offers the socket.
const writeChunk = 256 << 10

// Receiver accepts connections and counts the bytes it reads.
type Receiver struct {
	ln    net.Listener
	bytes atomic.Uint64
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

// Listen opens a receiver on addr (host:port) inside ns.
func Listen(ns Namespace, addr string) (*Receiver, error) {
	r := &Receiver{}
	err := ns(func() error {
		var err error
		r.ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("receiver on %s: %w", addr, err)
	}
	return r, nil
}

// Bytes is the number of bytes received so far, over all connections.
func (r *Receiver) Bytes() uint64 { return r.bytes.Load() }

// Serve accepts and drains connections until Close.
func (r *Receiver) Serve() {
	for {
		conn, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		r.conns = append(r.conns, conn)
		r.mu.Unlock()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			buf := make([]byte, writeChunk)
			for {
				n, err := conn.Read(buf)
				r.bytes.Add(uint64(n))
				if err != nil {
					return
				}
			}
		}()
	}
}

// Close stops accepting and closes every connection.
func (r *Receiver) Close() {
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// Sender is a set of bulk TCP flows.
type Sender struct {
	conns []*net.TCPConn
	sent  atomic.Uint64
}

// Dial opens flows connections to addr from inside ns, each with the
// congestion control cc (cubic, bbr, reno: any the kernel allows).
func Dial(ctx context.Context, ns Namespace, addr, cc string, flows int) (*Sender, error) {
	s := &Sender{}
	dialer := net.Dialer{
		Timeout: 5 * time.Second,
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
			})
			if serr != nil {
				return fmt.Errorf("congestion control %q: %w", cc, serr)
			}
			return err
		},
	}
	err := ns(func() error {
		for range flows {
			conn, err := dialer.DialContext(ctx, "tcp", addr)
			if err != nil {
				return err
			}
			s.conns = append(s.conns, conn.(*net.TCPConn))
		}
		return nil
	})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("dialing %s: %w", addr, err)
	}
	return s, nil
}

// Flows is the number of connections.
func (s *Sender) Flows() int { return len(s.conns) }

// Sent is the number of bytes the flows handed to the kernel.
func (s *Sender) Sent() uint64 { return s.sent.Load() }

// Run writes as fast as the flows take data until ctx ends.
func (s *Sender) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(s.conns))
	for i, c := range s.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, writeChunk)
			for ctx.Err() == nil {
				// A deadline lets a blocked write notice cancellation.
				if err := c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
					errs[i] = err
					return
				}
				n, err := c.Write(buf)
				s.sent.Add(uint64(n))
				if err != nil && !isTimeout(err) {
					if ctx.Err() == nil {
						errs[i] = fmt.Errorf("flow %d: %w", i, err)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TCPInfo reads the kernel's TCP_INFO of flow i.
func (s *Sender) TCPInfo(i int) (*unix.TCPInfo, error) {
	raw, err := s.conns[i].SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("raw conn: %w", err)
	}
	var info *unix.TCPInfo
	var ierr error
	if err := raw.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		return nil, fmt.Errorf("raw conn control: %w", err)
	}
	if ierr != nil {
		return nil, fmt.Errorf("TCP_INFO: %w", ierr)
	}
	return info, nil
}

// CongestionControl reads back the congestion control of flow i.
func (s *Sender) CongestionControl(i int) (string, error) {
	raw, err := s.conns[i].SyscallConn()
	if err != nil {
		return "", fmt.Errorf("raw conn: %w", err)
	}
	var cc string
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cc, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		return "", fmt.Errorf("raw conn control: %w", err)
	}
	return cc, gerr
}

// Close closes every flow.
func (s *Sender) Close() {
	for _, c := range s.conns {
		c.Close()
	}
}

// GoodputSample is the receiver's byte count at one sampling instant.
type GoodputSample struct {
	At    time.Duration `json:"at_ns"`
	Bytes uint64        `json:"bytes"`
}

// TCPInfoSample is the sender-side state of one flow at one instant.
type TCPInfoSample struct {
	At   time.Duration `json:"at_ns"`
	Flow int           `json:"flow"`
	// Cwnd and Ssthresh are in segments of SndMSS bytes.
	Cwnd     uint32        `json:"cwnd"`
	Ssthresh uint32        `json:"ssthresh"`
	SndMSS   uint32        `json:"snd_mss"`
	Retrans  uint32        `json:"total_retrans"`
	RTT      time.Duration `json:"rtt_ns"`
	MinRTT   time.Duration `json:"min_rtt_ns"`
	Unacked  uint32        `json:"unacked"`
	// BytesAcked is cumulative.
	BytesAcked uint64 `json:"bytes_acked"`
	// SndWnd is the receive window the receiver last advertised, in
	// bytes: where m2ho's clamp holds the sender, the clamp.
	SndWnd uint32 `json:"snd_wnd"`
}

// IPPerPayload converts TCP payload (goodput) to the IP bytes a link
// carries for full-sized segments with timestamps: 1448 payload bytes in
// a 1500-byte packet.
const IPPerPayload = 1500.0 / 1448.0

// Measurements is what one run recorded, times from the run's epoch.
type Measurements struct {
	Goodput []GoodputSample `json:"goodput"`
	TCPInfo []TCPInfoSample `json:"tcp_info"`
	// ReceivedBytes is the receiver's count when sampling stopped.
	ReceivedBytes uint64 `json:"received_bytes"`
	// TCPInfoErrors counts samples that could not be read.
	TCPInfoErrors int `json:"tcp_info_errors"`
	// SamplersRealtime is false when the samplers could not get real-time
	// threads (no privilege): gaps in the series are likelier then.
	SamplersRealtime bool `json:"samplers_realtime"`
}

// Measure samples goodput and TCP_INFO until ctx ends. epoch is time zero.
// Each sampler has its own real-time thread and sleeps on the monotonic
// clock, so that neither a loaded machine nor a slow TCP_INFO read (it
// takes the socket lock) leaves gaps in the other's series.
func Measure(ctx context.Context, epoch time.Time, r *Receiver, s *Sender) *Measurements {
	m := &Measurements{SamplersRealtime: true}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sampler := func(period time.Duration, sample func(at time.Duration)) {
		defer wg.Done()
		if err := rtprio.Lock(); err != nil {
			mu.Lock()
			m.SamplersRealtime = false
			mu.Unlock()
		}
		periodic(ctx, period, func() { sample(time.Since(epoch)) })
	}
	wg.Add(2)
	go sampler(GoodputPeriod, func(at time.Duration) {
		m.Goodput = append(m.Goodput, GoodputSample{At: at, Bytes: r.Bytes()})
	})
	go sampler(TCPInfoPeriod, func(at time.Duration) {
		for i := range s.Flows() {
			info, err := s.TCPInfo(i)
			if err != nil {
				m.TCPInfoErrors++
				continue
			}
			m.TCPInfo = append(m.TCPInfo, TCPInfoSample{
				At: at, Flow: i, Cwnd: info.Snd_cwnd, Ssthresh: info.Snd_ssthresh, SndMSS: info.Snd_mss,
				Retrans: info.Total_retrans, RTT: time.Duration(info.Rtt) * time.Microsecond,
				MinRTT:  time.Duration(info.Min_rtt) * time.Microsecond,
				Unacked: info.Unacked, BytesAcked: info.Bytes_acked, SndWnd: info.Snd_wnd,
			})
		}
	})
	wg.Wait()
	m.ReceivedBytes = m.Goodput[len(m.Goodput)-1].Bytes
	return m
}

// periodic calls sample now, every period after, and once more when ctx
// ends. A late tick is followed by the next one on the grid, not by a
// burst of catch-up samples.
func periodic(ctx context.Context, period time.Duration, sample func()) {
	next := rtprio.Now()
	for {
		sample()
		next = next.Add(period)
		if late := rtprio.Now().Sub(next); late > 0 {
			next = next.Add((late/period + 1) * period)
		}
		rtprio.SleepUntil(ctx, next)
		if ctx.Err() != nil {
			sample()
			return
		}
	}
}

// GoodputSeries turns cumulative samples into rates: each point is the
// mean goodput in bit/s over the interval that ends at its time.
func (m *Measurements) GoodputSeries() (at []time.Duration, bps []float64) {
	for i := 1; i < len(m.Goodput); i++ {
		prev, cur := m.Goodput[i-1], m.Goodput[i]
		dt := (cur.At - prev.At).Seconds()
		if dt <= 0 {
			continue
		}
		at = append(at, cur.At)
		bps = append(bps, float64(cur.Bytes-prev.Bytes)*8/dt)
	}
	return at, bps
}
