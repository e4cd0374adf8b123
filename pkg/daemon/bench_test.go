//go:build bench

package daemon

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/config"
	"github.com/m2ho/m2ho/pkg/datapath"
)

// signallingDatapath is the real datapath that reports each clamp write
// once the BPF map holds it.
type signallingDatapath struct {
	datapathAPI
	written chan time.Time
}

func (s *signallingDatapath) SetClamp(bytes uint32, deadline time.Time) error {
	err := s.datapathAPI.SetClamp(bytes, deadline)
	s.written <- time.Now()
	return err
}

func (s *signallingDatapath) ClearClamp() error {
	err := s.datapathAPI.ClearClamp()
	s.written <- time.Now()
	return err
}

// BenchmarkEventToMapUpdate measures the time from a JSON event leaving a
// UDP socket to the end of the BPF map update it causes, through the UDP
// input, the loop, the state machine and the datapath. Each iteration is
// one prediction (A3: the clamp is written) and its cancellation (A1: the
// clamp is cleared). Reports p50 and p99 in microseconds.
func BenchmarkEventToMapUpdate(b *testing.B) {
	nstest.RequireRoot(b)
	ue, peer := nstest.NewNS(b, "bench-ue"), nstest.NewNS(b, "bench-peer")
	nstest.Pair(b, ue, peer, nstest.Link{AIfname: "wwan0", BIfname: "eth0"})

	cfg := config.Default()
	cfg.Iface = "wwan0"
	cfg.Diag = []string{"udp://127.0.0.1:5599"}
	cfg.Listen = "127.0.0.1:0"
	cfg.StateDir = b.TempDir()
	written := make(chan time.Time, 64)
	var d *Daemon
	var sender net.Conn
	require.NoError(b, ue.Do(func() error {
		op := realOpener
		op.datapath = func(o datapath.Options) (datapathAPI, error) {
			dp, err := realOpener.datapath(o)
			if err != nil {
				return nil, err
			}
			return &signallingDatapath{datapathAPI: dp, written: written}, nil
		}
		var err error
		if d, err = open(cfg, nil, op); err != nil {
			return err
		}
		sender, err = net.Dial("udp", "127.0.0.1:5599")
		return err
	}))
	defer sender.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(b, <-done)
	}()

	events := [][]byte{
		[]byte(`{"v":1,"type":"meas_report","event":"A3","serving":{"rat":"nr","pci":1,"arfcn":632628},"neighbor":{"rat":"nr","pci":2,"arfcn":632628}}`),
		[]byte(`{"v":1,"type":"meas_report","event":"A1","serving":{"rat":"nr","pci":1,"arfcn":632628}}`),
	}
	var latencies []time.Duration
	measure := func(event []byte) {
		// Drop writes not caused by this event (lease renewals).
		for len(written) > 0 {
			<-written
		}
		sent := time.Now()
		if _, err := sender.Write(event); err != nil {
			b.Fatal(err)
		}
		select {
		case at := <-written:
			latencies = append(latencies, at.Sub(sent))
		case <-time.After(2 * time.Second):
			b.Fatal("no map update within 2 s of the event")
		}
	}
	for b.Loop() {
		for _, ev := range events {
			measure(ev)
		}
	}
	slices.Sort(latencies)
	b.ReportMetric(float64(percentile(latencies, 0.50).Nanoseconds())/1e3, "p50-us")
	b.ReportMetric(float64(percentile(latencies, 0.99).Nanoseconds())/1e3, "p99-us")
}

// percentile returns the p-quantile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}
