package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/pkg/datapath"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
)

// rbAllocSenderEnv makes the test binary send rb_alloc events instead of
// running the tests: "ADDR BATCH EVENTS PER_SECOND". The sender is a
// process of its own, so that the benchmark's CPU figures are the
// daemon's alone.
const rbAllocSenderEnv = "M2HO_BENCH_RB_ALLOC_SENDER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(rbAllocSenderEnv); spec != "" {
		if err := sendRBAllocs(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// rbAllocJSON is an rb_alloc event of two milliseconds of slots holding
// one burst, as a modem bridge sends it.
const rbAllocJSON = `{"v":1,"type":"rb_alloc","cell":{"rat":"nr","pci":1,"arfcn":632628},"slot_us":500,"slots":[[106,106],[106,106],[40,106],[0,106]]}`

// sendRBAllocs sends events rb_alloc events at perSecond, batch of them
// per datagram, paced as the end-to-end overhead benchmark paces them.
func sendRBAllocs(spec string) error {
	var addr string
	var batch, events, perSecond int
	if _, err := fmt.Sscan(spec, &addr, &batch, &events, &perSecond); err != nil {
		return fmt.Errorf("%s: %w", rbAllocSenderEnv, err)
	}
	conn, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	datagram := []byte(strings.Repeat(rbAllocJSON+"\n", batch))
	ticker := time.NewTicker(5 * time.Millisecond)
	defer ticker.Stop()
	start := time.Now()
	for sent := 0; sent < events; {
		now := <-ticker.C
		for due := min(events, int(now.Sub(start).Seconds()*float64(perSecond))); sent+batch <= due; sent += batch {
			if _, err := conn.Write(datagram); err != nil {
				return err
			}
		}
	}
	return nil
}

// downloadDatapath is the fake datapath with a download under way: its
// ingress byte counter grows with wall-clock time and one flow takes RTT
// samples, so that the sampler does what it does during a download.
type downloadDatapath struct {
	*fakeDatapath
	start          time.Time
	bytesPerSecond float64
}

func (d *downloadDatapath) IngressBytes() (uint64, error) {
	return uint64(time.Since(d.start).Seconds() * d.bytesPerSecond), nil
}

func (d *downloadDatapath) Flows() ([]datapath.Flow, error) {
	samples := uint64(time.Since(d.start) / (20 * time.Millisecond))
	return []datapath.Flow{{
		Local:     netip.MustParseAddrPort("10.0.0.2:40000"),
		Remote:    netip.MustParseAddrPort("192.0.2.1:443"),
		RTTLatest: 20 * time.Millisecond, RTTMin: 20 * time.Millisecond, SRTT: 20 * time.Millisecond,
		RTTSamples: samples,
	}}, nil
}

// processCPU is the CPU time this process used so far, its children not
// included.
func processCPU(tb testing.TB) time.Duration {
	var ru unix.Rusage
	require.NoError(tb, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRBAllocStream: the daemon's CPU time per rb_alloc event, from
// the UDP input through the loop and the sampler, on a fake datapath (the
// BPF map reads are left out) with a download's byte counter, and the
// events paced at 200 a second by another process: one per datagram, as
// the testbed's emulator sends them, or ten per datagram every 50 ms, as
// a DIAG port delivers them. The daemon runs on one thread, as m2hod
// does. cpu-% is its share of a core while the events stream, idle-cpu-%
// while they do not (its own timers and byte samples), and cpu-us/event
// what each event adds to the idle daemon.
func BenchmarkRBAllocStream(b *testing.B) {
	for _, batch := range []int{1, 10} {
		name := "one_per_datagram"
		if batch > 1 {
			name = "batched_50ms"
		}
		b.Run(name, func(b *testing.B) { benchmarkRBAllocStream(b, batch) })
	}
}

func benchmarkRBAllocStream(b *testing.B, batch int) {
	const (
		perSecond = 200
		// settle lets the daemon's start-up pass before the idle
		// window measures it.
		settle     = time.Second
		idleWindow = 2 * time.Second
	)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	cfg := testConfig(b)
	cfg.Diag = []string{"udp://127.0.0.1:0"}
	dp := &downloadDatapath{fakeDatapath: newFakeDatapath(), start: time.Now(), bytesPerSecond: 2.5e6}
	d, err := open(cfg, nil, opener{
		datapath: func(datapath.Options) (datapathAPI, error) { return dp, nil },
		source:   realOpener.source,
	})
	require.NoError(b, err)
	addr := d.sources[0].(*diag.UDPSource).Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(b, d.Run(ctx)) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	received := func() uint64 {
		events, _ := d.inputs[0].Stats.Snapshot()
		for _, c := range events {
			if c.Label == string(diag.TypeRBAlloc) {
				return c.Value
			}
		}
		return 0
	}

	time.Sleep(settle)
	cpuBefore, start := processCPU(b), time.Now()
	time.Sleep(idleWindow)
	idle := (processCPU(b) - cpuBefore).Seconds() / time.Since(start).Seconds()

	events := max(b.N/batch, 1) * batch
	sender := exec.Command(os.Args[0])
	sender.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %d", rbAllocSenderEnv, addr, batch, events, perSecond))
	sender.Stderr = os.Stderr
	// The sender's exit is awaited on its standard output, which reaches
	// end of file then, in the runtime's poller: a thread blocked in
	// wait(2) all along would make the runtime hand the daemon's P
	// between threads, which m2hod never does.
	exited, err := sender.StdoutPipe()
	require.NoError(b, err)
	b.ResetTimer()
	cpuBefore, start = processCPU(b), time.Now()
	require.NoError(b, sender.Start())
	_, err = io.Copy(io.Discard, exited)
	require.NoError(b, err)
	require.NoError(b, sender.Wait())
	for received() < uint64(events) {
		time.Sleep(time.Millisecond)
	}
	cpu, wall := processCPU(b)-cpuBefore, time.Since(start)
	b.StopTimer()
	b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu-%")
	b.ReportMetric(100*idle, "idle-cpu-%")
	b.ReportMetric((cpu.Seconds()-idle*wall.Seconds())*1e6/float64(events), "cpu-us/event")
}

// BenchmarkHandleRBAlloc is the loop's share of an rb_alloc event: the
// estimator's slot-burst detector and the state machine, each event
// followed by the byte sample its slots ask for.
func BenchmarkHandleRBAlloc(b *testing.B) {
	d, err := open(testConfig(b), nil, opener{
		datapath: func(datapath.Options) (datapathAPI, error) { return newFakeDatapath(), nil },
		source:   func(string, diagsrc.Options) (diag.Source, error) { return &chanSource{}, nil },
	})
	require.NoError(b, err)
	defer func() { require.NoError(b, d.Close()) }()
	ev, err := diag.ParseJSON([]byte(rbAllocJSON))
	require.NoError(b, err)
	var rx uint64
	b.ReportAllocs()
	for b.Loop() {
		d.handleEvent(ev)
		rx += 10_000
		d.est.AddBytes(time.Now(), rx)
	}
}
