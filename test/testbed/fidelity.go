package testbed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/topo"
	"github.com/m2ho/m2ho/test/traffic"
)

// FidelityConfig chooses the link of the fidelity measurement.
type FidelityConfig struct {
	// CapacityMbps and OneWayDelay are the constant link of the TCP check.
	CapacityMbps float64
	OneWayDelay  time.Duration
	// TCPDuration is the TCP check's length; the first quarter (slow
	// start) is left out of the throughput.
	TCPDuration time.Duration
	// FloodDuration is how long the UDP flood that finds the highest
	// packet rate lasts.
	FloodDuration time.Duration
	OutDir        string
	Log           *slog.Logger
}

// FidelityReport is how faithfully the emulator reproduces a link.
type FidelityReport struct {
	// The flood: 1500-byte IP packets through an unlimited cell.
	FloodOfferedPPS   float64 `json:"flood_offered_pps"`
	FloodForwardedPPS float64 `json:"flood_forwarded_pps"`
	FloodMbps         float64 `json:"flood_mbps"`

	// The TCP check against a constant capacity C and delay D.
	CapacityBps float64 `json:"capacity_bps"`
	GoodputBps  float64 `json:"goodput_bps"`
	// IPRateBps is the goodput with TCP/IP headers (1500/1448), the rate
	// the capacity is spent at.
	IPRateBps    float64       `json:"ip_rate_bps"`
	OneWayDelay  time.Duration `json:"one_way_delay_ns"`
	MinRTT       time.Duration `json:"min_rtt_ns"`
	TimingP50    time.Duration `json:"timing_p50_ns"`
	TimingP99    time.Duration `json:"timing_p99_ns"`
	TCPRetrans   uint32        `json:"tcp_retrans"`
	GoodputRatio float64       `json:"goodput_over_capacity"`
	IPRateRatio  float64       `json:"ip_rate_over_capacity"`
	RTTRatio     float64       `json:"min_rtt_over_2d"`
}

// MeasureFidelity runs the flood and the TCP check.
func MeasureFidelity(ctx context.Context, cfg FidelityConfig) (*FidelityReport, error) {
	r := &FidelityReport{}
	if err := flood(ctx, cfg, r); err != nil {
		return nil, fmt.Errorf("flood: %w", err)
	}
	sc := &scenario.Scenario{
		Name: "fidelity", Duration: cfg.TCPDuration, Scale: 1, InitialCell: "constant",
		Cells: []scenario.Cell{{
			Name: "constant", RAT: diag.RATNR, Band: diag.BandSub6, PCI: 1, ARFCN: 627264,
			Capacity: scenario.CapacitySpec{ConstantMbps: cfg.CapacityMbps},
			// Two bandwidth-delay products: enough for CUBIC's sawtooth
			// to keep the link busy.
			BufferBytes: int(2 * cfg.CapacityMbps * 1e6 / 8 * (2 * cfg.OneWayDelay).Seconds()),
			DelayDown:   cfg.OneWayDelay, DelayUp: cfg.OneWayDelay,
		}},
		// A report far away keeps the timeline non-empty and harmless.
		Timeline: []scenario.Event{{At: cfg.TCPDuration - time.Second, Type: scenario.TypeReport, Reports: []scenario.Report{{Event: diag.EventA1}}}},
	}
	raw, err := sc.Marshal()
	if err != nil {
		return nil, err
	}
	if sc, err = scenario.Parse(raw); err != nil {
		return nil, err
	}
	res, err := Run(ctx, Config{Scenario: sc, Variant: Variant{CC: "cubic"}, OutDir: filepath.Join(cfg.OutDir, "tcp"), Log: cfg.Log})
	if err != nil {
		return nil, fmt.Errorf("tcp check: %w", err)
	}
	m := res.Measurements
	from := cfg.TCPDuration / 4
	var first, last = -1, -1
	for i, g := range m.Goodput {
		if g.At >= from && first < 0 {
			first = i
		}
		last = i
	}
	if first < 0 || last <= first {
		return nil, errors.New("tcp check recorded too few goodput samples")
	}
	a, b := m.Goodput[first], m.Goodput[last]
	r.CapacityBps = cfg.CapacityMbps * 1e6
	r.GoodputBps = float64(b.Bytes-a.Bytes) * 8 / (b.At - a.At).Seconds()
	r.IPRateBps = r.GoodputBps * traffic.IPPerPayload
	r.OneWayDelay = cfg.OneWayDelay
	for _, s := range m.TCPInfo {
		if s.MinRTT > 0 && (r.MinRTT == 0 || s.MinRTT < r.MinRTT) {
			r.MinRTT = s.MinRTT
		}
		r.TCPRetrans = max(r.TCPRetrans, s.Retrans)
	}
	r.TimingP50, r.TimingP99 = res.Fidelity.DownlinkP50, res.Fidelity.DownlinkP99
	r.GoodputRatio = r.GoodputBps / r.CapacityBps
	r.IPRateRatio = r.IPRateBps / r.CapacityBps
	r.RTTRatio = float64(r.MinRTT) / float64(2*cfg.OneWayDelay)
	return r, nil
}

// floodSenders is the number of concurrent flood senders.
const floodSenders = 3

// floodPayload makes 1500-byte IP packets (20 IP + 8 UDP + 1472).
const floodPayload = 1472

// flood offers 1500-byte UDP packets as fast as one sender can through a
// cell with no capacity limit, and counts what the emulator forwards.
func flood(ctx context.Context, cfg FidelityConfig, r *FidelityReport) error {
	sc := &scenario.Scenario{
		Name: "flood", Duration: time.Hour, Scale: 1, InitialCell: "unlimited",
		Cells: []scenario.Cell{{
			Name: "unlimited", RAT: diag.RATNR, Band: diag.BandSub6, PCI: 1, ARFCN: 627264,
			Capacity:    scenario.CapacitySpec{ConstantMbps: 100000},
			BufferBytes: 64 << 20,
		}},
	}
	raw, err := sc.Marshal()
	if err != nil {
		return err
	}
	if sc, err = scenario.Parse(raw); err != nil {
		return err
	}
	tb, err := topo.Create(topo.Options{})
	if err != nil {
		return err
	}
	defer tb.Close()
	emulator, err := emu.New(emu.Config{Scenario: sc, ServerIface: topo.EmuServerIface, UEIface: topo.EmuUEIface, InEmu: tb.Emu.Do, Log: cfg.Log})
	if err != nil {
		return err
	}
	defer emulator.Close()
	if _, err := emulator.Start(); err != nil {
		return err
	}
	var rx *net.UDPConn
	if err := tb.UE.Do(func() error {
		var err error
		rx, err = net.ListenUDP("udp", &net.UDPAddr{IP: tb.ReceiverAddr, Port: 9000})
		return err
	}); err != nil {
		return err
	}
	defer rx.Close()
	// Several senders, so that the emulator rather than one sending
	// thread is the limit.
	senders := make([]*net.UDPConn, floodSenders)
	for i := range senders {
		if err := tb.Server.Do(func() error {
			var err error
			senders[i], err = net.DialUDP("udp", nil, &net.UDPAddr{IP: tb.ReceiverAddr, Port: 9000})
			return err
		}); err != nil {
			return err
		}
		defer senders[i].Close()
	}

	emuCtx, stopEmu := context.WithCancel(ctx)
	defer stopEmu()
	emuDone := make(chan error, 1)
	go func() { emuDone <- emulator.Run(emuCtx) }()
	var received atomic.Uint64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := rx.Read(buf); err != nil {
				return
			}
			received.Add(1)
		}
	}()
	var offered atomic.Uint64
	start := time.Now()
	deliveredBefore := emulator.Downlink.Count()
	var wg sync.WaitGroup
	for _, tx := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := make([]byte, floodPayload)
			for time.Since(start) < cfg.FloodDuration && ctx.Err() == nil {
				if _, err := tx.Write(payload); err == nil {
					offered.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	// Let the last packets through before counting.
	time.Sleep(50 * time.Millisecond)
	forwarded := emulator.Downlink.Count() - deliveredBefore
	stopEmu()
	if err := <-emuDone; err != nil {
		return err
	}
	r.FloodOfferedPPS = float64(offered.Load()) / elapsed.Seconds()
	r.FloodForwardedPPS = float64(forwarded) / elapsed.Seconds()
	r.FloodMbps = r.FloodForwardedPPS * 1500 * 8 / 1e6
	cfg.Log.Info("flood", "offered_pps", int(r.FloodOfferedPPS), "forwarded_pps", int(r.FloodForwardedPPS), "received", received.Load())
	return ctx.Err()
}

// Write stores the report as JSON in dir.
func (r *FidelityReport) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	return WriteJSON(filepath.Join(dir, "fidelity-report.json"), r)
}
