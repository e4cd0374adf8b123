//go:build bench

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/diag"
)

// measureWindow is how long each overhead benchmark watches the daemon:
// CPU times come in 10-ms ticks, so 10 s resolves a tenth of a percent.
const measureWindow = 10 * time.Second

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat; it is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// procCPU returns the user and system CPU time of pid.
func procCPU(t testing.TB, pid int) (user, system time.Duration) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// Fields after the command name, which is in parentheses and may
	// contain spaces: utime and stime are fields 14 and 15 of the line.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, err := strconv.ParseUint(fields[11], 10, 64)
	require.NoError(t, err)
	stime, err := strconv.ParseUint(fields[12], 10, 64)
	require.NoError(t, err)
	return time.Duration(utime) * time.Second / clockTicks, time.Duration(stime) * time.Second / clockTicks
}

// memory is a process's resident memory, in bytes, from /proc/PID/status.
type memory struct {
	rss, peak uint64
	// anon is what the process allocated (heap, stacks); file is mapped
	// files, which for m2hod are mostly the BPF maps it mmaps (the flow
	// table): kernel memory counted against every process mapping it.
	anon, file uint64
}

// procMemory reads pid's resident memory.
func procMemory(t testing.TB, pid int) memory {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	defer f.Close()
	var m memory
	fields := map[string]*uint64{"VmRSS": &m.rss, "VmHWM": &m.peak, "RssAnon": &m.anon, "RssFile": &m.file}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		dst := fields[key]
		if !ok || dst == nil {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		require.NoError(t, err)
		*dst = kb << 10
	}
	require.NoError(t, sc.Err())
	return m
}

// udpReceiveBufferErrors returns the namespace's count of UDP datagrams
// the kernel dropped because a socket's receive buffer was full
// (RcvbufErrors in /proc/net/snmp).
func udpReceiveBufferErrors(t testing.TB, ns *nstest.NS) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := ns.Run(ctx, "cat", "/proc/net/snmp")
	require.NoError(t, err)
	// The Udp section is a line of names followed by a line of values.
	var names []string
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = fields
			continue
		}
		for i, name := range names {
			if name == "RcvbufErrors" && i < len(fields) {
				n, err := strconv.ParseUint(fields[i], 10, 64)
				require.NoError(t, err)
				return n
			}
		}
	}
	require.FailNow(t, "no Udp RcvbufErrors in /proc/net/snmp", out)
	return 0
}

// reportOverhead runs load for measureWindow and reports m2hod's CPU use in
// percent of one core (system time includes the softirq work, such as
// the BPF programs, that the kernel happened to run on m2hod's threads)
// and its memory.
func reportOverhead(b *testing.B, d *daemonProc, load func(stop <-chan struct{})) {
	pid := d.cmd.Process.Pid
	for b.Loop() {
		stop := make(chan struct{})
		loadDone := make(chan struct{})
		userBefore, systemBefore := procCPU(b, pid)
		start := time.Now()
		go func() {
			defer close(loadDone)
			load(stop)
		}()
		time.Sleep(measureWindow)
		close(stop)
		<-loadDone
		user, system := procCPU(b, pid)
		user, system = user-userBefore, system-systemBefore
		wall := time.Since(start).Seconds()
		mem := procMemory(b, pid)
		b.ReportMetric(100*(user+system).Seconds()/wall, "cpu-%")
		b.ReportMetric(100*user.Seconds()/wall, "user-%")
		b.ReportMetric(100*system.Seconds()/wall, "sys-%")
		b.ReportMetric(float64(mem.rss)/(1<<20), "rss-MiB")
		b.ReportMetric(float64(mem.peak)/(1<<20), "peak-rss-MiB")
		b.ReportMetric(float64(mem.anon)/(1<<20), "anon-MiB")
		b.ReportMetric(float64(mem.file)/(1<<20), "mapped-MiB")
	}
}

// BenchmarkOverheadDownload: m2hod's CPU and memory while one TCP download
// runs at full veth speed through the modem interface.
func BenchmarkOverheadDownload(b *testing.B) {
	bed := newBed(b)
	d := bed.startDaemon(b, b.TempDir())
	dl := bed.startDownload(b, 0)
	before, burstsBefore := dl.received.Load(), d.status().Datapath.Counters["bursts"]
	start := time.Now()
	reportOverhead(b, d, func(stop <-chan struct{}) { <-stop })
	elapsed := time.Since(start).Seconds()
	b.ReportMetric(float64(dl.received.Load()-before)*8/elapsed/1e9, "Gbit/s")
	b.ReportMetric(float64(d.status().Datapath.Counters["bursts"]-burstsBefore)/elapsed, "bursts/s")
}

// rbAllocPerSecond is the rate of rb_alloc events in the evaluation's
// downloads (about 160 a second), rounded up.
const rbAllocPerSecond = 200

// BenchmarkOverheadDownloadRBAlloc: m2hod's CPU and memory during a paced
// download with the modem's slot allocations streaming in, as on a router
// whose DIAG port reports every downlink grant: the case a router's CPU
// budget is about (under 1% of a core, under 20 MiB anonymous memory; the
// flow table's mapped pages are reported apart, as mapped-MiB). The
// events come one per datagram, as the testbed's emulator sends them with
// --diag-flush 0, or in batches every 50 ms, as a DIAG port delivers log
// packets per USB transfer and as the emulator sends them by default
// (emu.DIAGPortFlush). floor-cpu-% is a bare Go receiver of the same
// datagrams (bareReceiver): what the wake-ups alone cost on this host,
// which no work m2hod saves can go below.
func BenchmarkOverheadDownloadRBAlloc(b *testing.B) {
	for _, batch := range []int{1, rbAllocPerSecond / 20} {
		name := "one_per_datagram"
		if batch > 1 {
			name = "batched_50ms"
		}
		b.Run(name, func(b *testing.B) { overheadDownloadRBAlloc(b, batch) })
	}
}

func overheadDownloadRBAlloc(b *testing.B, batch int) {
	bed := newBed(b)
	d := bed.startDaemon(b, b.TempDir())
	floor := bed.startBareReceiver(b)
	d.send(measReport(diag.EventA2, sub6A, diag.Cell{})) // the serving cell
	dl := bed.startDownload(b, pacing)
	rbAlloc := fmt.Sprintf(`{"v":1,"type":"rb_alloc","cell":%s,"slot_us":500,"slots":[[106,106],[106,106],[40,106],[0,106]]}`,
		cellJSON(sub6A))
	datagram := []byte(strings.Repeat(rbAlloc+"\n", batch))
	sent := 0
	before := dl.received.Load()
	floorUser, floorSystem := procCPU(b, floor.pid)
	start := time.Now()
	reportOverhead(b, d, func(stop <-chan struct{}) {
		ticker := time.NewTicker(5 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-ticker.C:
				for due := int(now.Sub(start).Seconds() * rbAllocPerSecond); sent+batch <= due; sent += batch {
					d.sendRaw(datagram)
					floor.send(datagram)
				}
			}
		}
	})
	elapsed := time.Since(start)
	user, system := procCPU(b, floor.pid)
	b.ReportMetric(100*(user-floorUser+system-floorSystem).Seconds()/elapsed.Seconds(), "floor-cpu-%")
	b.ReportMetric(float64(dl.received.Load()-before)*8/elapsed.Seconds()/1e6, "Mbit/s")
	b.ReportMetric(float64(d.status().Diag.Events[string(diag.TypeRBAlloc)])/elapsed.Seconds(), "rb_alloc/s")
}

// bareReceiverAddr is where the bare receiver listens, beside m2hod's
// diag input.
const bareReceiverAddr = "127.0.0.1:5598"

// bareReceiverProc is the test binary running as a bare receiver (see
// bareReceiver) in the ue namespace.
type bareReceiverProc struct {
	t    testing.TB
	pid  int
	conn net.Conn
}

// startBareReceiver starts a bare receiver, to be sent the same datagrams
// as m2hod at the same moments: its CPU time is the floor m2hod's is
// compared to.
func (b *bed) startBareReceiver(t testing.TB) *bareReceiverProc {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := b.ue.Command(ctx, self)
	cmd.Env = append(os.Environ(), bareReceiverEnv+"="+bareReceiverAddr)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	// A datagram sent before the receiver binds would be refused, and
	// the refusal reported by a later write.
	require.Eventually(t, func() bool { return receiverBound(t, b.ue) }, 5*time.Second, 20*time.Millisecond,
		"the bare receiver did not bind %s", bareReceiverAddr)
	r := &bareReceiverProc{t: t, pid: cmd.Process.Pid}
	require.NoError(t, b.ue.Do(func() error {
		r.conn, err = net.Dial("udp", bareReceiverAddr)
		return err
	}))
	t.Cleanup(func() { r.conn.Close() })
	return r
}

// receiverBound says whether a UDP socket in ns is bound to the bare
// receiver's port.
func receiverBound(t testing.TB, ns *nstest.NS) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := ns.Run(ctx, "cat", "/proc/net/udp")
	require.NoError(t, err)
	_, port, _ := strings.Cut(bareReceiverAddr, ":")
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	return strings.Contains(out, fmt.Sprintf(":%04X ", n))
}

func (r *bareReceiverProc) send(payload []byte) {
	_, err := r.conn.Write(payload)
	require.NoError(r.t, err)
}

// BenchmarkOverheadEventFlood: m2hod's CPU and memory under 10,000 diag
// events per second, each a prediction or its cancellation (so each one
// writes the datapath).
func BenchmarkOverheadEventFlood(b *testing.B) {
	bed := newBed(b)
	d := bed.startDaemon(b, b.TempDir())
	events := [][]byte{
		[]byte(measReport(diag.EventA3, sub6A, sub6B)),
		[]byte(measReport(diag.EventA1, sub6A, diag.Cell{})),
	}
	const perSecond = 10000
	sent := 0
	dropsBefore := udpReceiveBufferErrors(b, bed.ue)
	reportOverhead(b, d, func(stop <-chan struct{}) {
		// Catch up with the target rate at every tick, so that a late
		// wake-up of this sender does not lower the rate.
		ticker := time.NewTicker(time.Millisecond)
		defer ticker.Stop()
		start := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-ticker.C:
				for due := int(now.Sub(start).Seconds() * perSecond); sent < due; sent++ {
					d.sendRaw(events[sent%len(events)])
				}
			}
		}
	})
	st := d.status()
	received := st.Diag.Events[string(diag.TypeMeasReport)]
	b.ReportMetric(float64(sent)/measureWindow.Seconds(), "events/s")
	b.ReportMetric(100*float64(received)/float64(max(sent, 1)), "received-%")
	b.ReportMetric(float64(udpReceiveBufferErrors(b, bed.ue)-dropsBefore), "rcvbuf-drops")
}

// BenchmarkOverheadIdle: m2hod's CPU and memory with no traffic and no
// events, the floor the other figures compare to.
func BenchmarkOverheadIdle(b *testing.B) {
	bed := newBed(b)
	d := bed.startDaemon(b, b.TempDir())
	reportOverhead(b, d, func(stop <-chan struct{}) { <-stop })
}
