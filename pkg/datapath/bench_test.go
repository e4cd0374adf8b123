//go:build bench

package datapath

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/internal/tcptest"
)

// fillFlows adds n idle flows besides the benchmarked one, so that lookups
// run against a table holding n+1 flows.
func fillFlows(tb testing.TB, d *Datapath, n int) {
	tb.Helper()
	keys, states := syntheticFlows(n)
	insertFlows(tb, d, keys, states)
}

// packetBench is one datapath of BenchmarkPacket, tracking a number of
// flows, with the fixture flow whose packets the cases send.
type packetBench struct {
	d       *Datapath
	s       segment
	flowKey m2hoFlowKey
	// data is the ingress data segment; its TSecr is what RTT stamps match
	data                                       segment
	ackFrame, sackFrame, dataFrame, notIPFrame []byte
	// ackL4Off is the offset of ackFrame's TCP header
	ackL4Off int
	// restoredEgress runs the egress program on ackFrame as built, even
	// when the kernel repeats it on a packet an earlier run clamped
	restoredEgress *ebpf.Program
	// rearmedMatch and rearmedNoMatch run the ingress program after
	// giving the fixture flow one stamp again, which dataFrame's TSecr
	// matches or not, so that every repeat looks the stamps up
	rearmedMatch, rearmedNoMatch *ebpf.Program
}

// newPacketBench loads a detached datapath tracking flows flows: flows-1
// idle ones, then the fixture flow after its handshake.
func newPacketBench(tb testing.TB, flows int) *packetBench {
	tb.Helper()
	p := &packetBench{d: loadDetached(tb, true, 65536)}
	tb.Cleanup(func() { require.NoError(tb, p.d.Close()) })
	if flows > 1 {
		fillFlows(tb, p.d, flows-1)
	}
	p.s = segment{timestamps: true, tsval: 1000, tsecr: 2000, localPort: 40000, remotePort: 443}
	handshake(tb, p.d, p.s, 7, 7)
	p.flowKey = fixtureFlowKey(p.s.localPort, p.s.remotePort)
	p.ackFrame, p.ackL4Off = hostACK(p.s, 65535, 0).build(tb)
	// the duplicate ACKs a loss provokes carry SACK blocks after the
	// timestamps
	sackACK := hostACK(p.s, 65535, 0)
	sackACK.sack = true
	p.sackFrame, _ = sackACK.build(tb)
	p.data = peerData(p.s, 0, 1400)
	p.data.tsval, p.data.tsecr = 3000, 4000
	p.dataFrame, _ = p.data.build(tb)
	// version nibble 5: rejected at the first byte, so this measures the
	// fixed cost of running a program under BPF_PROG_RUN
	p.notIPFrame = append([]byte{0x50}, p.ackFrame[1:]...)
	p.restoredEgress = referenceTCProgram(tb, restoreAndTailCall(tb, p.d.objs.M2hoEgress, p.ackFrame, p.ackL4Off)...)
	p.rearmedMatch = referenceTCProgram(tb, p.rearmStampAndTailCall(tb, p.data.tsecr)...)
	p.rearmedNoMatch = referenceTCProgram(tb, p.rearmStampAndTailCall(tb, p.data.tsecr+1)...)
	return p
}

// rearmStampAndTailCall returns the instructions that give the fixture
// flow a single stamp of tsval, as stampFor does, and tail-call the
// ingress program. The stamp's sent time is fixed when the program is
// built; only the RTT sample's value grows with it.
func (p *packetBench) rearmStampAndTailCall(tb testing.TB, tsval uint32) asm.Instructions {
	tb.Helper()
	slot, _ := flowSlot(tb, p.d, p.flowKey)
	var (
		bucket m2hoFlowBucket
		entry  m2hoFlowEntry
		stamp  m2hoTsStamp
	)
	position := int(slot % flowBucketSlots)
	stateOff := int(unsafe.Offsetof(bucket.Entries)) + position*int(unsafe.Sizeof(entry)) + int(unsafe.Offsetof(entry.State))
	lastTsecrOff := int16(stateOff + int(unsafe.Offsetof(entry.State.LastTsecr)))
	stampsOff := int16(stateOff + int(unsafe.Offsetof(entry.State.Stamps)))
	insns := asm.Instructions{
		asm.StoreImm(asm.RFP, -4, int64(slot/flowBucketSlots), asm.Word),
		asm.LoadMapPtr(asm.R1, p.d.objs.FlowTable.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "tail_call"),
		asm.StoreImm(asm.R0, lastTsecrOff, 0, asm.Word),
		asm.StoreImm(asm.R0, stampsOff+int16(unsafe.Offsetof(stamp.Tsval)), int64(int32(tsval)), asm.Word),
	}
	for i := range entry.State.Stamps {
		sentOff := stampsOff + int16(i*int(unsafe.Sizeof(stamp))+int(unsafe.Offsetof(stamp.Sent)))
		sentAt := int64(0) // a free stamp
		if i == 0 {
			sentAt = int64(int32(stampTimeNow()))
		}
		insns = append(insns, asm.StoreImm(asm.R0, sentOff, sentAt, asm.Word))
	}
	call := tailCall(tb, p.d.objs.M2hoIngress)
	call[0] = call[0].WithSymbol("tail_call")
	return append(insns, call...)
}

// TestBenchRestoredEgressClampsEveryRepeat checks what the "_restored" cases of
// BenchmarkPacket rest on: with the ACK put back before every repeat, the
// clamp rewrites it every time, and a run's output is the clamped ACK with
// a valid checksum.
func TestBenchRestoredEgressClampsEveryRepeat(t *testing.T) {
	const repeats, clampBytes = 100, 20000
	p := newPacketBench(t, 1)
	require.NoError(t, p.d.SetClamp(clampBytes, time.Now().Add(time.Hour)))
	_, _, err := p.restoredEgress.Benchmark(p.ackFrame, repeats, nil)
	require.NoError(t, err)
	c, err := p.d.Counters()
	require.NoError(t, err)
	assert.Equal(t, uint64(repeats), c[m2hoCounterIdCNT_CLAMP_APPLIED])

	verdict, out := runProg(t, p.restoredEgress, p.ackFrame)
	assert.Equal(t, int32(verdictPass), verdict)
	assert.Equal(t, uint16(clampBytes>>7), tcpWindow(out, p.ackL4Off), "clamped to the bytes at the fixture's scale 7")
	assert.True(t, tcpChecksumOK(out, p.ackL4Off, false, 0))
}

// TestBenchRearmedIngressMatchesEveryRepeat checks what the "_rearmed" cases
// of BenchmarkPacket rest on: every repeat takes an RTT sample when the
// stamp matches the segment's TSecr, and none when it does not.
func TestBenchRearmedIngressMatchesEveryRepeat(t *testing.T) {
	const repeats = 100
	p := newPacketBench(t, 1)
	samples := func() uint64 {
		c, err := p.d.Counters()
		require.NoError(t, err)
		return c[m2hoCounterIdCNT_RTT_SAMPLES]
	}
	before := samples()
	_, _, err := p.rearmedNoMatch.Benchmark(p.dataFrame, repeats, nil)
	require.NoError(t, err)
	assert.Equal(t, before, samples(), "a stamp the TSecr does not match")
	_, _, err = p.rearmedMatch.Benchmark(p.dataFrame, repeats, nil)
	require.NoError(t, err)
	assert.Equal(t, before+repeats, samples(), "a matching stamp")
	_, entry := flowSlot(t, p.d, p.flowKey)
	assert.Equal(t, before+repeats, entry.State.RttSamples)
}

// restoreAndTailCall returns the instructions that write back the TCP
// window and checksum of frame (the TCP header at l4Off) as built, then
// tail-call target. The kernel repeats a program on one packet, which a
// clamp rewrites once and then leaves alone; restored, every repeat is the
// unclamped ACK again, and the clamp rewrites it every time.
func restoreAndTailCall(tb testing.TB, target *ebpf.Program, frame []byte, l4Off int) asm.Instructions {
	tb.Helper()
	// the window, then the checksum: four bytes
	asBuilt := binary.NativeEndian.Uint32(frame[l4Off+tcpWindowOffset:])
	return append(storeBytes(l4Off+tcpWindowOffset, int64(int32(asBuilt)), asm.Word), tailCall(tb, target)...)
}

// storeBytes returns the instructions that write value, of size bytes, at
// offset into the packet whose context is in R6, with bpf_skb_store_bytes.
func storeBytes(offset int, value int64, size asm.Size) asm.Instructions {
	return asm.Instructions{
		asm.StoreImm(asm.RFP, -8, value, size),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, int32(offset)),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -8),
		asm.Mov.Imm(asm.R4, int32(size.Sizeof())),
		asm.Mov.Imm(asm.R5, 0),
		asm.FnSkbStoreBytes.Call(),
	}
}

// tailCall returns the instructions that tail-call target with the context
// in R6; a failed tail call falls through.
func tailCall(tb testing.TB, target *ebpf.Program) asm.Instructions {
	tb.Helper()
	progs, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = progs.Close() })
	require.NoError(tb, progs.Put(uint32(0), target))
	return asm.Instructions{
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, progs.FD()),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnTailCall.Call(),
	}
}

// stampFor gives the fixture flow one stamp, of tsval, taken now, and
// makes the next ingress TSecr be looked up.
func (p *packetBench) stampFor(b *testing.B, tsval uint32) {
	slot, _ := flowSlot(b, p.d, p.flowKey)
	_, entry := p.d.table.slot(slot)
	entry.State.LastTsecr = 0
	entry.State.Stamps = [len(entry.State.Stamps)]m2hoTsStamp{{
		Tsval: tsval,
		Sent:  stampTimeNow(),
	}}
}

// stampTimeNow is the clock as the programs record a stamp's sent time
// (stamp_time in bpf/m2ho.c).
func stampTimeNow() uint32 {
	return uint32(monotonicNow()>>m2hoTsStampUnitTS_STAMP_SHIFT) | 1
}

// startSuppression opens a handover epoch in which the fixture flow has
// data outstanding, and lets its first ACK through: the same ACK is a
// duplicate from then on.
func (p *packetBench) startSuppression(b *testing.B) {
	require.NoError(b, p.d.ClearClamp())
	frame, _ := peerData(p.s, 100000, 1000).build(b)
	p.d.ingress(b, frame)
	_, err := p.d.StartSuppression(time.Now().Add(time.Hour))
	require.NoError(b, err)
	p.d.egress(b, p.ackFrame)
}

// packetCase is one path of BenchmarkPacket.
type packetCase struct {
	name  string
	prog  func(*packetBench) *ebpf.Program
	frame func(*packetBench) []byte
	setup func(*packetBench, *testing.B)
	// perRun, when set, runs before each individually timed run;
	// otherwise the kernel repeats the program n times.
	perRun func(*packetBench, *testing.B)
}

// run returns the case's mean cost of n packets on p, as timed by the
// kernel.
func (c packetCase) run(b *testing.B, p *packetBench, n int) time.Duration {
	prog, frame := c.prog(p), c.frame(p)
	if c.perRun == nil {
		_, per, err := prog.Benchmark(frame, n, nil)
		require.NoError(b, err)
		return per
	}
	var total time.Duration
	for range n {
		c.perRun(p, b)
		_, per, err := prog.Benchmark(frame, 1, nil)
		require.NoError(b, err)
		total += per
	}
	return total / time.Duration(n)
}

// packetRounds is the number of alternating rounds BenchmarkPacket splits
// each case into.
const packetRounds = 10

// BenchmarkPacket reports the programs' cost per packet (as timed by the
// kernel in BPF_PROG_RUN) with 1 tracked flow ("ns/packet") and with
// 65,536 ("ns/packet_65536"), and the ratio of the two ("65536/1"). Two
// datapaths, one per table size, stay loaded side by side; each case runs
// in rounds that alternate between them, and every figure is the median
// over the rounds, so that load elsewhere on the machine falls on both
// sizes alike. (The framework's ns/op covers both sizes and their setup;
// the ns/packet figures are the kernel's own timing.)
// Paths that leave their input unchanged run in one kernel repeat loop.
// The clamp rewrite changes the packet and the RTT match consumes its
// stamp, so those run once per syscall ("_single"), which adds the kernel's
// per-call timer overhead; the "_single" references on unchanged paths
// measure that overhead, and the difference is the path's own cost.
// The clamp also runs repeated ("_restored"): a program in front puts the
// ACK's window and checksum back and tail-calls the egress program, so
// that every repeat is clamped; against the clamp-off ACK behind the same
// program, that is what the rewrite adds to an ACK.
// "empty_program" is BPF_PROG_RUN's own cost, which every figure includes;
// "clock_read_program" adds one bpf_ktime_get_ns call, the precise clock
// every ingress packet reads, so the two are the floor under any ingress
// program here; "window_rewrite_program" adds the two helper calls of a
// window rewrite instead, what a clamped ACK costs beyond
// "egress_ack_clamp_off" (which the kernel can repeat, unlike the rewrite),
// and its "_single" form against "empty_program_single" what the same
// calls cost once per syscall, as in "egress_ack_clamp_on_single";
// "egress_not_ip_baseline" adds a program that rejects the packet at its
// first byte, and "ingress_not_ip_baseline" what ingress does for every
// packet (clock read, burst accounting, byte counter).
func BenchmarkPacket(b *testing.B) {
	nstest.RequireRoot(b)
	one, many := newPacketBench(b, 1), newPacketBench(b, 65536)
	empty, clockRead := referenceTCProgram(b), referenceTCProgram(b, asm.FnKtimeGetNs.Call())
	windowRewrite := referenceTCProgram(b, windowRewriteCalls(one.ackL4Off)...)
	emptyProg := func(*packetBench) *ebpf.Program { return empty }
	clockReadProg := func(*packetBench) *ebpf.Program { return clockRead }
	windowRewriteProg := func(*packetBench) *ebpf.Program { return windowRewrite }
	egress := func(p *packetBench) *ebpf.Program { return p.d.objs.M2hoEgress }
	ingress := func(p *packetBench) *ebpf.Program { return p.d.objs.M2hoIngress }
	restoredEgress := func(p *packetBench) *ebpf.Program { return p.restoredEgress }
	rearmedMatch := func(p *packetBench) *ebpf.Program { return p.rearmedMatch }
	rearmedNoMatch := func(p *packetBench) *ebpf.Program { return p.rearmedNoMatch }
	ack := func(p *packetBench) []byte { return p.ackFrame }
	sack := func(p *packetBench) []byte { return p.sackFrame }
	data := func(p *packetBench) []byte { return p.dataFrame }
	notIP := func(p *packetBench) []byte { return p.notIPFrame }
	noop := func(*packetBench, *testing.B) {}
	clampOff := func(p *packetBench, b *testing.B) { require.NoError(b, p.d.ClearClamp()) }
	clampOn := func(p *packetBench, b *testing.B) {
		require.NoError(b, p.d.SetClamp(20000, time.Now().Add(time.Hour)))
	}

	cases := []packetCase{
		{name: "empty_program", prog: emptyProg, frame: ack},
		{name: "clock_read_program", prog: clockReadProg, frame: ack},
		{name: "window_rewrite_program", prog: windowRewriteProg, frame: ack},
		{name: "empty_program_single", prog: emptyProg, frame: ack, perRun: noop},
		{name: "window_rewrite_program_single", prog: windowRewriteProg, frame: ack, perRun: noop},
		{name: "egress_not_ip_baseline", prog: egress, frame: notIP},
		// every ingress packet reads the clock and joins a burst before
		// parsing: the difference from the egress baseline
		{name: "ingress_not_ip_baseline", prog: ingress, frame: notIP},
		{name: "egress_ack_clamp_off", prog: egress, frame: ack, setup: clampOff},
		{name: "egress_ack_clamp_off_single", prog: egress, frame: ack, perRun: noop},
		{name: "egress_ack_clamp_on_single", prog: egress, frame: ack, setup: clampOn, perRun: noop},
		// the clamp-off and clamp-on ACK, each put back as built before
		// every repeat: their difference is what the clamp's rewrite
		// adds to an ACK while the kernel repeats the program
		{name: "egress_ack_clamp_off_restored", prog: restoredEgress, frame: ack, setup: clampOff},
		{name: "egress_ack_clamp_on_restored", prog: restoredEgress, frame: ack, setup: clampOn},
		{name: "egress_dupack_suppressed", prog: egress, frame: ack, setup: (*packetBench).startSuppression},
		{name: "egress_dupack_sack_suppressed", prog: egress, frame: sack, setup: (*packetBench).startSuppression},
		{name: "ingress_data", prog: ingress, frame: data,
			setup: func(p *packetBench, b *testing.B) { require.NoError(b, p.d.StopSuppression()) }},
		// a stamp still awaiting its echo
		{name: "ingress_data_rtt_no_match_single", prog: ingress, frame: data,
			perRun: func(p *packetBench, b *testing.B) { p.stampFor(b, p.data.tsecr+1) }},
		{name: "ingress_data_rtt_match_single", prog: ingress, frame: data,
			perRun: func(p *packetBench, b *testing.B) { p.stampFor(b, p.data.tsecr) }},
		// the same two, repeated: a program in front gives the flow
		// its stamp again before every repeat
		{name: "ingress_data_rtt_no_match_rearmed", prog: rearmedNoMatch, frame: data},
		{name: "ingress_data_rtt_match_rearmed", prog: rearmedMatch, frame: data},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			for _, p := range []*packetBench{one, many} {
				if bc.setup != nil {
					bc.setup(p, b)
				}
			}
			n := max(b.N/packetRounds, 1)
			oneNs := make([]float64, 0, packetRounds)
			manyNs := make([]float64, 0, packetRounds)
			ratios := make([]float64, 0, packetRounds)
			b.ResetTimer()
			for round := range packetRounds {
				var perOne, perMany time.Duration
				// neither size always runs first
				if round%2 == 0 {
					perOne, perMany = bc.run(b, one, n), bc.run(b, many, n)
				} else {
					perMany, perOne = bc.run(b, many, n), bc.run(b, one, n)
				}
				oneNs = append(oneNs, float64(perOne.Nanoseconds()))
				manyNs = append(manyNs, float64(perMany.Nanoseconds()))
				ratios = append(ratios, float64(perMany)/float64(perOne))
			}
			b.ReportMetric(quantile(oneNs, 0.5), "ns/packet")
			b.ReportMetric(quantile(manyNs, 0.5), "ns/packet_65536")
			b.ReportMetric(quantile(ratios, 0.5), "65536/1")
		})
	}
	for _, p := range []*packetBench{one, many} {
		c, err := p.d.Counters()
		require.NoError(b, err)
		require.Zero(b, c[m2hoCounterIdCNT_MALFORMED])
		require.Zero(b, c[m2hoCounterIdCNT_MAP_FULL])
	}
}

// windowRewriteCalls are the helper calls with which the egress program
// rewrites the window of the TCP header at l4Off (rewrite_tcp_window in
// bpf/lib/csum.h): the checksum update, then the store. The values are
// constants; the helpers cost the same whatever they write.
func windowRewriteCalls(l4Off int) asm.Instructions {
	const oldWindow, newWindow = 0xffff, 0x1000
	return append(asm.Instructions{
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, int32(l4Off+tcpChecksumOffset)),
		asm.Mov.Imm(asm.R3, oldWindow),
		asm.Mov.Imm(asm.R4, newWindow),
		asm.Mov.Imm(asm.R5, 2),
		asm.FnL4CsumReplace.Call(),
	}, storeBytes(l4Off+tcpWindowOffset, newWindow, asm.Half)...)
}

// quantile returns the q-quantile (0 <= q < 1) of values, which it sorts:
// the value that a fraction q of them lie below.
func quantile(values []float64, q float64) float64 {
	slices.Sort(values)
	return values[int(q*float64(len(values)))]
}

// referenceTCProgram returns a tc program that runs body, with the context
// in R6, and returns TC_ACT_UNSPEC: what body costs on its own. With no
// body, it is BPF_PROG_RUN's figure for a program that does nothing, which
// every other figure includes.
func referenceTCProgram(tb testing.TB, body ...asm.Instruction) *ebpf.Program {
	tb.Helper()
	insns := asm.Instructions{asm.Mov.Reg(asm.R6, asm.R1)}
	insns = append(insns, body...)
	insns = append(insns, asm.Mov.Imm(asm.R0, -1), asm.Return())
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.SchedCLS,
		License:      "Dual BSD/GPL",
		Instructions: insns,
	})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = prog.Close() })
	return prog
}

// BenchmarkPacketParallel reports the ingress data cost per packet
// (ns/packet, the mean over CPUs as timed by the kernel in BPF_PROG_RUN)
// while every CPU the process may use runs the program at once, each on a
// flow of its own as with receive-side scaling. Next to the single-CPU
// BenchmarkPacket figure it shows the cost of the cache lines all CPUs
// write (the downlink burst in progress).
func BenchmarkPacketParallel(b *testing.B) {
	nstest.RequireRoot(b)
	cpus := tcptest.AllowedCPUs(b)
	d := loadDetached(b, true, 65536)
	b.Cleanup(func() { require.NoError(b, d.Close()) })
	frames := make([][]byte, len(cpus))
	for i := range frames {
		s := segment{timestamps: true, tsval: 1000, tsecr: 2000, localPort: uint16(41000 + i), remotePort: 443}
		handshake(b, d, s, 7, 7)
		data := peerData(s, 0, 1400)
		data.tsval, data.tsecr = 3000, 4000
		frames[i], _ = data.build(b)
	}
	perPacket := make([]time.Duration, len(cpus))
	errs := make([]error, len(cpus))
	b.ResetTimer()
	var wg sync.WaitGroup
	for i, cpu := range cpus {
		wg.Go(func() {
			if errs[i] = tcptest.PinThread(cpu); errs[i] != nil {
				return
			}
			_, perPacket[i], errs[i] = d.objs.M2hoIngress.Benchmark(frames[i], b.N, nil)
		})
	}
	wg.Wait()
	b.StopTimer()
	var total time.Duration
	for i := range cpus {
		require.NoError(b, errs[i], "CPU %d", cpus[i])
		total += perPacket[i]
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(len(cpus)), "ns/packet")
	b.ReportMetric(float64(len(cpus)), "cpus")
}

// BenchmarkPacketColdFlows reports the cost per packet (ns/packet, as
// timed by the kernel in BPF_PROG_RUN) when consecutive packets belong to
// different flows, visited in a fixed random order over more flow state
// than the CPU caches hold, as on a router carrying many connections: each
// packet then finds its flow entry and hash bucket out of cache. Every
// packet is its own run, so the figure includes the per-call overhead that
// the "_single" cases of BenchmarkPacket measure warm.
func BenchmarkPacketColdFlows(b *testing.B) {
	nstest.RequireRoot(b)
	// 40,000 flows: about 7 MB of flow entries, several times the L2 cache
	const flows = 40000
	d := loadDetached(b, true, 65536)
	b.Cleanup(func() { require.NoError(b, d.Close()) })
	acks := make([][]byte, flows)
	data := make([][]byte, flows)
	for i := range flows {
		s := segment{timestamps: true, tsval: 1000, tsecr: 2000, localPort: uint16(1024 + i), remotePort: 443}
		handshake(b, d, s, 7, 7)
		acks[i], _ = hostACK(s, 65535, 0).build(b)
		seg := peerData(s, 0, 1400)
		seg.tsval, seg.tsecr = 3000, 4000
		data[i], _ = seg.build(b)
	}
	order := rand.New(rand.NewPCG(1, 2)).Perm(flows)
	cases := []struct {
		name   string
		prog   *ebpf.Program
		frames [][]byte
	}{
		{name: "egress_ack_clamp_off", prog: d.objs.M2hoEgress, frames: acks},
		{name: "ingress_data", prog: d.objs.M2hoIngress, frames: data},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			var total time.Duration
			for k := range b.N {
				_, per, err := bc.prog.Benchmark(bc.frames[order[k%flows]], 1, nil)
				require.NoError(b, err)
				total += per
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/packet")
		})
	}
}

// Windows of the veth throughput benchmarks, which switch the receiver's
// hooks between windows.
const (
	vethWindow = 100 * time.Millisecond
	// vethSettle lets the flow run a little after each switch, so that the
	// switch itself falls outside the window.
	vethSettle = 10 * time.Millisecond
)

// startVethDownload starts one CUBIC bulk TCP download from server to ue
// over the veth pair of nstest.ServerUEPair, its sender and receiver bound to cpu
// unless it is tcptest.AnyCPU, lets it ramp up, and returns a reader of
// the bytes the receiving socket has taken in so far. The count is the
// kernel's (TCP_INFO bytes_received), so that a window's figure does not
// depend on when the reading goroutine last ran. The download ends with the
// benchmark.
func startVethDownload(b *testing.B, server, ue *nstest.NS, cpu int) (received func() uint64) {
	b.Helper()
	addr := fmt.Sprintf("%s:%d", nstest.ServerAddr, nstest.ServerPort)
	srv := tcptest.StartBulkServerWrites(b, server, addr, tcptest.BulkWriteSize, cpu)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	_, conn := tcptest.DownloadOn(b, ctx, ue, addr, cpu)
	<-srv.Conns
	time.Sleep(200 * time.Millisecond)
	return func() uint64 {
		info, err := tcptest.TCPInfo(conn)
		require.NoError(b, err)
		return info.Bytes_received
	}
}

// settledWindow lets the flow settle after a switch, then measures one
// window: the bytes received and the window's length.
func settledWindow(received func() uint64) (bytes float64, elapsed time.Duration) {
	time.Sleep(vethSettle)
	n, elapsed := tcptest.ReceivedIn(vethWindow, received)
	return float64(n[0]), elapsed
}

// pairRatio measures a window of the base state and one of the trial
// state, in an order that alternates with round so that neither state
// always follows the other's switch, and returns the trial's rate over the
// base's; ok is false when the base window moved nothing.
func pairRatio(round int, base, trial func() float64) (ratio float64, ok bool) {
	var baseRate, trialRate float64
	if round%2 == 0 {
		baseRate = base()
		trialRate = trial()
	} else {
		trialRate = trial()
		baseRate = base()
	}
	if baseRate == 0 {
		return 0, false
	}
	return trialRate / baseRate, true
}

// The receiver's states that BenchmarkVethThroughput alternates.
const (
	vethDetached = iota
	// vethReference has the benchmark's referencePrograms on both hooks.
	vethReference
	vethM2HO
	vethStates
)

// compareObjectEnv names the variable that names another build's bpf2go
// object (for instance one saved with git show
// REV:pkg/datapath/m2ho_bpfel.o) for the veth benchmarks to weigh this
// build's programs against.
const compareObjectEnv = "M2HO_COMPARE_OBJECT"

// referencePrograms are what the veth throughput benchmarks weigh m2ho's
// programs against, besides detached hooks: by default a program that does
// nothing, on both hooks, which splits what the hooks cost on their own
// from what the programs in them cost; with compareObjectEnv set, the
// programs of that build, which weighs a change to the programs in one
// run, each against the same detached windows.
type referencePrograms struct {
	name            string
	ingress, egress *ebpf.Program
}

// newReferencePrograms returns the reference the environment asks for.
func newReferencePrograms(b *testing.B) referencePrograms {
	b.Helper()
	if object := os.Getenv(compareObjectEnv); object != "" {
		other := otherBuild(b, object)
		return referencePrograms{name: "other_build", ingress: other[0], egress: other[1]}
	}
	empty := referenceTCProgram(b)
	return referencePrograms{name: "empty_hooks", ingress: empty, egress: empty}
}

// otherBuild loads the programs of another build's bpf2go object,
// configured as Open configures this build's, ingress then egress. Its
// burst ring is drained, as readBursts drains this build's.
func otherBuild(b *testing.B, object string) [2]*ebpf.Program {
	b.Helper()
	spec, err := ebpf.LoadCollectionSpec(object)
	require.NoError(b, err)
	_, err = configureSpec(spec, false, DefaultBurstGap, DefaultMaxFlows)
	require.NoError(b, err)
	other, err := ebpf.NewCollection(spec)
	require.NoError(b, err)
	b.Cleanup(other.Close)
	if ring := other.Maps["bursts"]; ring != nil {
		drainRing(b, ring)
	}
	programs := [2]*ebpf.Program{other.Programs["m2ho_ingress"], other.Programs["m2ho_egress"]}
	require.NotNil(b, programs[0], "%s has no m2ho_ingress", object)
	require.NotNil(b, programs[1], "%s has no m2ho_egress", object)
	return programs
}

// drainRing reads and drops every record of a ring buffer until the
// benchmark ends. It wakes when the programs force a wake-up, so that,
// like a ring that m2hod drains, the ring never stays full.
func drainRing(b *testing.B, ring *ebpf.Map) {
	r, err := ringbuf.NewReader(ring)
	require.NoError(b, err)
	done := make(chan error, 1)
	go func() {
		var record ringbuf.Record
		for {
			if err := r.ReadInto(&record); err != nil {
				if errors.Is(err, ringbuf.ErrClosed) {
					err = nil
				}
				done <- err
				return
			}
		}
	}()
	b.Cleanup(func() {
		assert.NoError(b, r.Close())
		assert.NoError(b, <-done)
	})
}

// vethOrders are the orders of the states within a round, taken in turn:
// every state comes first, second and last, after each of the others,
// equally often, so that no state always follows another's switch.
var vethOrders = [...][vethStates]int{
	{vethDetached, vethReference, vethM2HO}, {vethReference, vethM2HO, vethDetached}, {vethM2HO, vethDetached, vethReference},
	{vethDetached, vethM2HO, vethReference}, {vethM2HO, vethReference, vethDetached}, {vethReference, vethDetached, vethM2HO},
}

// vethReceiver is the receiving end of a veth download, whose hooks a
// benchmark switches between the vethStates.
type vethReceiver struct {
	dp        *Datapath
	ns        *nstest.NS
	ifindex   int
	reference referencePrograms
	state     int
}

// newVethReceiver opens a datapath on veth0 in ue, attached, and returns
// it in state vethM2HO; reference has the programs of state
// vethReference.
func newVethReceiver(b *testing.B, ue *nstest.NS, reference referencePrograms) *vethReceiver {
	b.Helper()
	dp := openOnVeth(b, ue)
	readBursts(b, dp)
	return &vethReceiver{dp: dp, ns: ue, ifindex: ifindexIn(b, ue, "veth0"), reference: reference, state: vethM2HO}
}

// readBursts reads, until the benchmark ends, the bursts that dp's
// programs report, as m2hod does: a ring that nobody drains fills up, and
// from a quarter full on, every burst wakes a reader with an interrupt of
// its own.
func readBursts(b *testing.B, dp *Datapath) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- dp.ReadBursts(ctx, func(Burst) {}) }()
	b.Cleanup(func() {
		cancel()
		assert.NoError(b, <-done)
	})
}

// set attaches what state want calls for, unless it is attached already.
// The objects stay loaded, so no verifier run falls next to a window.
func (r *vethReceiver) set(b *testing.B, want int) {
	b.Helper()
	if want == r.state {
		return
	}
	switch want {
	case vethDetached:
		attachOnly(b, r.dp, r.ns, r.ifindex, nil, nil)
	case vethReference:
		attachOnly(b, r.dp, r.ns, r.ifindex, r.reference.ingress, r.reference.egress)
	default:
		attachOnly(b, r.dp, r.ns, r.ifindex, r.dp.objs.M2hoIngress, r.dp.objs.M2hoEgress)
	}
	r.state = want
}

// reportRunTime attaches m2ho's programs and reports their own time per
// packet in the receiver's traffic, without BPF_PROG_RUN's harness; the
// kernel's run-time statistics add two clock reads to every run.
func (r *vethReceiver) reportRunTime(b *testing.B) {
	r.set(b, vethM2HO)
	reportRunTime(b, map[string]*ebpf.Program{"ingress": r.dp.objs.M2hoIngress, "egress": r.dp.objs.M2hoEgress})
}

// vethComparisons are the ratios the veth throughput benchmarks report: the
// overall cost, then its two parts, the reference's and what m2ho's
// programs cost beyond it.
type vethComparisons [3]struct {
	name        string
	trial, base int
}

// comparisons returns the vethComparisons with ref.
func (ref referencePrograms) comparisons() vethComparisons {
	return vethComparisons{
		{"attached/detached", vethM2HO, vethDetached},
		{ref.name + "/detached", vethReference, vethDetached},
		{"m2ho/" + ref.name, vethM2HO, vethReference},
	}
}

// reportTotalRatios reports, for each of comparisons, the ratio of the
// total rates of its two states over rounds[c], with its 95% interval.
func reportTotalRatios(b *testing.B, comparisons vethComparisons, rounds func(c int) []vethRound) {
	for c, cmp := range comparisons {
		r := rounds(c)
		b.ReportMetric(totalRatio(r, seq(len(r)), cmp.trial, cmp.base), cmp.name)
		low, high := totalRatioInterval(r, cmp.trial, cmp.base)
		b.ReportMetric(low, cmp.name+"_ci95_low")
		b.ReportMetric(high, cmp.name+"_ci95_high")
	}
}

// BenchmarkVethThroughput runs one CUBIC bulk TCP flow over a veth pair and
// alternates short windows with the programs attached to the receiver's
// interface, detached, and with the referencePrograms in their place.
// Each round measures one window of each, and the benchmark reports
// medians of the per-round ratios: on a shared machine, other load shifts
// the windows of a round alike but changes from one round to the next,
// which a ratio of totals would fold in. The m2ho windows over the
// detached ones are the overall cost; the reference's over the detached
// ones split off what the hooks themselves cost, whatever runs in them, or
// what another build costs. The ratios of the total rates are reported
// too, each with its 95% interval over the rounds: a 100 ms window's rate
// varies by about 20% on this shared machine, so one run places a ratio
// only within a few percent. any_cpu leaves the sender and the receiver
// to the scheduler; one_cpu binds both to one CPU, which then does all of
// the flow's work, as on a single-core router; its windows spread half as
// far. BenchmarkVethThroughputSharedCPU measures what the programs cost a
// flow that shares its CPU with another.
func BenchmarkVethThroughput(b *testing.B) {
	b.Run("any_cpu", func(b *testing.B) { benchmarkVethThroughput(b, tcptest.AnyCPU) })
	b.Run("one_cpu", func(b *testing.B) { benchmarkVethThroughput(b, lastCPU(b)) })
}

// benchmarkVethThroughput is BenchmarkVethThroughput with the download's
// sender and receiver bound to cpu unless it is tcptest.AnyCPU.
func benchmarkVethThroughput(b *testing.B, cpu int) {
	// minRounds is the least number of rounds, whatever b.N, so that the
	// medians have noise to average over.
	const minRounds = 100
	server, ue := nstest.ServerUEPair(b)
	reference := newReferencePrograms(b)
	receiver := newVethReceiver(b, ue, reference)
	received := startVethDownload(b, server, ue, cpu)

	var rounds []vethRound
	b.ResetTimer()
	for round := range max(b.N, minRounds) {
		var measured vethRound
		for _, st := range vethOrders[round%len(vethOrders)] {
			receiver.set(b, st)
			bytes, elapsed := settledWindow(received)
			measured[st] = vethWindowResult{bytes: bytes, seconds: elapsed.Seconds()}
		}
		rounds = append(rounds, measured)
	}
	b.StopTimer()
	overall := roundRatios(rounds, vethM2HO, vethDetached)
	programs := roundRatios(rounds, vethM2HO, vethReference)
	require.NotEmpty(b, overall, "the flow never moved")
	require.NotEmpty(b, programs, "the flow never moved")
	all := seq(len(rounds))
	b.ReportMetric(totalRate(rounds, all, vethM2HO)*8/1e9, "attached_Gbit/s")
	b.ReportMetric(totalRate(rounds, all, vethDetached)*8/1e9, "detached_Gbit/s")
	reportTotalRatios(b, reference.comparisons(), func(int) []vethRound { return rounds })
	b.ReportMetric(quantile(overall, 0.5), "median_pair_ratio")
	b.ReportMetric(quantile(overall, 0.25), "p25_pair_ratio")
	b.ReportMetric(quantile(overall, 0.75), "p75_pair_ratio")
	b.ReportMetric(quantile(roundRatios(rounds, vethReference, vethDetached), 0.5), reference.name+"_median_ratio")
	b.ReportMetric(quantile(programs, 0.5), "m2ho_over_"+reference.name+"_median_ratio")
	receiver.reportRunTime(b)
	c, err := receiver.dp.Counters()
	require.NoError(b, err)
	require.Positive(b, c[m2hoCounterIdCNT_INGRESS_PACKETS])
}

// BenchmarkVethThroughputSharedCPU measures the ratios of
// BenchmarkVethThroughput/one_cpu with most of the machine's swings taken
// out. Two CUBIC downloads, each over its own veth pair, run at once, their
// senders and receivers bound to one CPU, which then also does both pairs'
// veth and TCP receive work (a veth transmit runs the receive path on the
// sending CPU). In each window one pair's receiver has the trial state of
// a comparison and the other's the base state; the next window swaps
// them, so that a difference between the pairs cancels. The two flows
// take turns on the CPU, and whatever slows the CPU in a window slows
// both: the ratio of their rates in one window varies about half as much
// as one flow's rate from window to window (window_log_ratio_sd against
// window_log_rate_sd). The ratio measures what the trial state costs a
// flow that competes for its CPU; BenchmarkVethThroughput/one_cpu
// measures a flow alone on it. pair0/pair1 is the median ratio of the two
// pairs with the states' effects cancelled, near 1 when the pairs share
// the CPU evenly.
func BenchmarkVethThroughputSharedCPU(b *testing.B) {
	const minRounds = 50
	cpu := lastCPU(b)
	reference := newReferencePrograms(b)
	comparisons := reference.comparisons()
	var receivers [2]*vethReceiver
	var received [2]func() uint64
	for i := range receivers {
		server, ue := nstest.ServerUEPair(b)
		receivers[i] = newVethReceiver(b, ue, reference)
		received[i] = startVethDownload(b, server, ue, cpu)
	}

	var rounds [len(vethComparisons{})][]vethRound
	var pairRatios, logRatios, logRates []float64
	b.ResetTimer()
	for round := range max(b.N, minRounds) {
		for c, cmp := range comparisons {
			var measured vethRound
			pair0OverPair1 := 1.0
			for swap := range 2 {
				trial := (round + swap) % 2
				receivers[trial].set(b, cmp.trial)
				receivers[1-trial].set(b, cmp.base)
				time.Sleep(vethSettle)
				bytes, elapsed := tcptest.ReceivedIn(vethWindow, received[0], received[1])
				require.Positive(b, bytes[0]*bytes[1], "a flow stopped")
				measured[cmp.trial].add(float64(bytes[trial]), elapsed.Seconds())
				measured[cmp.base].add(float64(bytes[1-trial]), elapsed.Seconds())
				pair0OverPair1 *= float64(bytes[0]) / float64(bytes[1])
				logRatios = append(logRatios, math.Log(float64(bytes[trial])/float64(bytes[1-trial])))
				logRates = append(logRates, math.Log(float64(bytes[0])/elapsed.Seconds()))
			}
			rounds[c] = append(rounds[c], measured)
			pairRatios = append(pairRatios, math.Sqrt(pair0OverPair1))
		}
	}
	b.StopTimer()
	detached := rounds[0] // attached/detached: the detached windows
	b.ReportMetric(totalRate(detached, seq(len(detached)), vethDetached)*8/1e9, "detached_Gbit/s")
	reportTotalRatios(b, comparisons, func(c int) []vethRound { return rounds[c] })
	for c, cmp := range comparisons {
		b.ReportMetric(quantile(roundRatios(rounds[c], cmp.trial, cmp.base), 0.5), cmp.name+"_median_round")
	}
	b.ReportMetric(quantile(pairRatios, 0.5), "pair0/pair1")
	b.ReportMetric(stddev(logRatios), "window_log_ratio_sd")
	b.ReportMetric(stddev(logRates), "window_log_rate_sd")
	// one pair attached, the other not
	receivers[1].set(b, vethDetached)
	receivers[0].reportRunTime(b)
}

// stddev is the standard deviation of values.
func stddev(values []float64) float64 {
	var sum, squares float64
	for _, v := range values {
		sum += v
		squares += v * v
	}
	n := float64(len(values))
	mean := sum / n
	return math.Sqrt(max(squares/n-mean*mean, 0))
}

// vethWindowResult is what windows of one state of the hooks moved.
type vethWindowResult struct {
	bytes, seconds float64
}

// add counts one more window in w.
func (w *vethWindowResult) add(bytes, seconds float64) {
	w.bytes += bytes
	w.seconds += seconds
}

// vethRound holds a round's window of each state.
type vethRound [vethStates]vethWindowResult

// roundRatios returns, for every round whose window of state den moved
// anything, the rate of its window of state num over that of den.
func roundRatios(rounds []vethRound, num, den int) []float64 {
	var ratios []float64
	for _, r := range rounds {
		if r[den].bytes > 0 {
			ratios = append(ratios, r[num].bytes/r[num].seconds/(r[den].bytes/r[den].seconds))
		}
	}
	return ratios
}

// totalRate is the rate of state over the rounds listed in picks (a round
// may be listed more than once): its bytes over its time.
func totalRate(rounds []vethRound, picks []int, state int) float64 {
	var bytes, seconds float64
	for _, i := range picks {
		bytes += rounds[i][state].bytes
		seconds += rounds[i][state].seconds
	}
	return bytes / seconds
}

// totalRatio is the total rate of state num over that of state den, over
// the rounds listed in picks.
func totalRatio(rounds []vethRound, picks []int, num, den int) float64 {
	return totalRate(rounds, picks, num) / totalRate(rounds, picks, den)
}

// seq returns the indices 0 to n-1, which list every round once.
func seq(n int) []int {
	indices := make([]int, n)
	for i := range indices {
		indices[i] = i
	}
	return indices
}

// totalRatioInterval returns the central 95% interval of totalRatio over
// all rounds, by the percentile bootstrap: the ratio of many samples of
// as many rounds, drawn with replacement. Whole rounds are drawn, so that
// the windows of one round, which share the machine's load of the moment,
// stay together. The fixed seed makes the interval a function of the
// windows alone.
func totalRatioInterval(rounds []vethRound, num, den int) (low, high float64) {
	const samples = 2000
	rng := rand.New(rand.NewPCG(1, 2))
	picks := make([]int, len(rounds))
	ratios := make([]float64, samples)
	for s := range ratios {
		for i := range picks {
			picks[i] = rng.IntN(len(rounds))
		}
		ratios[s] = totalRatio(rounds, picks, num, den)
	}
	return quantile(ratios, 0.025), quantile(ratios, 0.975)
}

func TestTotalRatio(t *testing.T) {
	// round builds a round from its m2ho and detached windows.
	round := func(m2hoBytes, m2hoSeconds, detachedBytes, detachedSeconds float64) vethRound {
		var r vethRound
		r[vethM2HO] = vethWindowResult{bytes: m2hoBytes, seconds: m2hoSeconds}
		r[vethDetached] = vethWindowResult{bytes: detachedBytes, seconds: detachedSeconds}
		return r
	}
	tests := []struct {
		name   string
		rounds []vethRound
		picks  []int
		want   float64
	}{
		{name: "one round", rounds: []vethRound{round(90, 1, 100, 1)}, picks: []int{0}, want: 0.9},
		// bytes over time of all windows (75 against 133.3 per second),
		// not the mean of the rounds' ratios (1 and 1/3)
		{name: "windows of unequal length",
			rounds: []vethRound{round(100, 1, 100, 1), round(50, 1, 300, 2)}, picks: []int{0, 1}, want: 75 / (400.0 / 3)},
		{name: "a round listed twice counts twice",
			rounds: []vethRound{round(100, 1, 100, 1), round(50, 1, 100, 1)}, picks: []int{1, 1, 0}, want: 200.0 / 300},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.InDelta(t, tc.want, totalRatio(tc.rounds, tc.picks, vethM2HO, vethDetached), 1e-12)
		})
	}
}

func TestRoundRatios(t *testing.T) {
	var moved, still vethRound
	moved[vethM2HO] = vethWindowResult{bytes: 50, seconds: 1}
	moved[vethDetached] = vethWindowResult{bytes: 300, seconds: 2}
	still[vethM2HO] = vethWindowResult{bytes: 50, seconds: 1}
	still[vethDetached] = vethWindowResult{seconds: 1}
	// rates, not bytes: 50 per second against 150; a detached window
	// that moved nothing leaves its round out
	assert.InDeltaSlice(t, []float64{1.0 / 3}, roundRatios([]vethRound{moved, still}, vethM2HO, vethDetached), 1e-12)
}

func TestTotalRatioInterval(t *testing.T) {
	// noisyRounds draws n rounds whose m2ho windows move trueRatio of the
	// detached ones' rate, each window with its own noise of about 20%
	// on top of a load that the windows of one round share.
	noisyRounds := func(n int, trueRatio float64) []vethRound {
		rng := rand.New(rand.NewPCG(7, uint64(n)))
		noise := func() float64 { return math.Exp(0.2 * rng.NormFloat64()) }
		rounds := make([]vethRound, n)
		for i := range rounds {
			load := 25e9 * noise()
			for st := range rounds[i] {
				rate := load * noise()
				if st == vethM2HO {
					rate *= trueRatio
				}
				rounds[i][st] = vethWindowResult{bytes: rate * 0.1, seconds: 0.1}
			}
		}
		return rounds
	}

	t.Run("no noise", func(t *testing.T) {
		var r vethRound
		r[vethM2HO] = vethWindowResult{bytes: 97, seconds: 0.1}
		r[vethDetached] = vethWindowResult{bytes: 100, seconds: 0.1}
		low, high := totalRatioInterval([]vethRound{r, r, r}, vethM2HO, vethDetached)
		assert.InDelta(t, 0.97, low, 1e-12)
		assert.InDelta(t, 0.97, high, 1e-12)
	})
	t.Run("noisy windows", func(t *testing.T) {
		const trueRatio = 0.97
		few, many := noisyRounds(50, trueRatio), noisyRounds(800, trueRatio)
		fewLow, fewHigh := totalRatioInterval(few, vethM2HO, vethDetached)
		manyLow, manyHigh := totalRatioInterval(many, vethM2HO, vethDetached)
		for _, interval := range [][2]float64{{fewLow, fewHigh}, {manyLow, manyHigh}} {
			assert.Less(t, interval[0], trueRatio)
			assert.Greater(t, interval[1], trueRatio)
		}
		// the interval narrows as the square root of the rounds: four
		// times as narrow for sixteen times as many
		assert.InDelta(t, 4, (fewHigh-fewLow)/(manyHigh-manyLow), 1.2)
		// and lies around the estimate
		estimate := totalRatio(many, seq(len(many)), vethM2HO, vethDetached)
		assert.Less(t, manyLow, estimate)
		assert.Greater(t, manyHigh, estimate)
	})
}

// reportRunTime turns the kernel's per-program run-time statistics on for
// a second of traffic and reports each program's mean time per run
// ("<name>_ns/packet") and its runs per second.
func reportRunTime(b *testing.B, progs map[string]*ebpf.Program) {
	const window = time.Second
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Logf("no per-program statistics: %v", err)
		return
	}
	defer stats.Close()
	var names []string
	var programs []*ebpf.Program
	for name, prog := range progs {
		names = append(names, name)
		programs = append(programs, prog)
	}
	for i, t := range runTimes(b, programs, window) {
		if t.runs == 0 {
			continue
		}
		b.ReportMetric(t.ns/t.runs, names[i]+"_ns/packet")
		b.ReportMetric(t.runs/window.Seconds(), names[i]+"_packets/s")
	}
}

// programRunTime is a program's total run time and number of runs.
type programRunTime struct{ ns, runs float64 }

// runTimes returns what each program ran over window, from the kernel's
// run-time statistics, which the caller has turned on.
func runTimes(tb testing.TB, progs []*ebpf.Program, window time.Duration) []programRunTime {
	tb.Helper()
	before := make([]*ebpf.ProgramStats, len(progs))
	for i, prog := range progs {
		var err error
		before[i], err = prog.Stats()
		require.NoError(tb, err)
	}
	time.Sleep(window)
	times := make([]programRunTime, len(progs))
	for i, prog := range progs {
		after, err := prog.Stats()
		require.NoError(tb, err)
		times[i] = programRunTime{
			ns:   float64((after.Runtime - before[i].Runtime).Nanoseconds()),
			runs: float64(after.RunCount - before[i].RunCount),
		}
	}
	return times
}

// BenchmarkVethProgramTime weighs the programs against those of another
// build, the bpf2go object that M2HO_COMPARE_OBJECT names (for instance
// one saved with git show REV:pkg/datapath/m2ho_bpfel.o): on one live
// CUBIC download over veth, with the kernel's run-time statistics on, it
// attaches the two builds in turn, in alternating order, and reports each
// build's own time per packet in each direction and the median of the
// per-round ratios. A change that saves a few nanoseconds per packet shows
// here long before the throughput ratio of BenchmarkVethThroughput can
// resolve it. The statistics add their own clock reads to every run of
// either build. Without the variable, the benchmark skips.
func BenchmarkVethProgramTime(b *testing.B) {
	const (
		minRounds = 20
		settle    = 100 * time.Millisecond
		window    = 400 * time.Millisecond
	)
	otherObject := os.Getenv(compareObjectEnv)
	if otherObject == "" {
		b.Skip(compareObjectEnv + " names no object to compare with")
	}
	server, ue := nstest.ServerUEPair(b)
	dp := openOnVeth(b, ue)
	readBursts(b, dp)
	// each build's programs, ingress then egress
	builds := [2]struct {
		name     string
		programs [2]*ebpf.Program
	}{
		{"this", [2]*ebpf.Program{dp.objs.M2hoIngress, dp.objs.M2hoEgress}},
		{"other", otherBuild(b, otherObject)},
	}
	ifindex := ifindexIn(b, ue, "veth0")
	startVethDownload(b, server, ue, tcptest.AnyCPU)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	require.NoError(b, err)
	defer stats.Close()

	var totals [2][2]programRunTime // by build, then direction
	// measure attaches a build and returns its time per packet over one
	// window, in each direction.
	measure := func(build int) (perPacket [2]float64) {
		programs := builds[build].programs
		attachOnly(b, dp, ue, ifindex, programs[0], programs[1])
		time.Sleep(settle)
		for dir, t := range runTimes(b, programs[:], window) {
			require.Positive(b, t.runs, "the flow moved no packet")
			totals[build][dir].ns += t.ns
			totals[build][dir].runs += t.runs
			perPacket[dir] = t.ns / t.runs
		}
		return perPacket
	}
	var ratios [2][]float64 // by direction: this build's time over the other's
	b.ResetTimer()
	for round := range max(b.N, minRounds) {
		var perPacket [2][2]float64
		first := round % 2
		perPacket[first] = measure(first)
		perPacket[1-first] = measure(1 - first)
		for dir := range ratios {
			ratios[dir] = append(ratios[dir], perPacket[0][dir]/perPacket[1][dir])
		}
	}
	b.StopTimer()
	for dir, direction := range []string{"ingress", "egress"} {
		for build := range builds {
			b.ReportMetric(totals[build][dir].ns/totals[build][dir].runs, builds[build].name+"_"+direction+"_ns/packet")
		}
		b.ReportMetric(quantile(ratios[dir], 0.5), direction+"_this/other_median")
	}
}

// lastCPU returns the last CPU the test may run on, the one the veth
// benchmarks bind downloads to.
func lastCPU(tb testing.TB) int {
	tb.Helper()
	cpus := tcptest.AllowedCPUs(tb)
	return cpus[len(cpus)-1]
}

// attachOnly replaces whatever dp has attached to the interface ifindex in
// namespace ns with ingress and egress, or with nothing when they are nil.
func attachOnly(tb testing.TB, dp *Datapath, ns *nstest.NS, ifindex int, ingress, egress *ebpf.Program) {
	tb.Helper()
	require.NoError(tb, dp.attachment.detach())
	dp.attachment = detached{}
	if ingress == nil {
		return
	}
	require.NoError(tb, ns.Do(func() error {
		var err error
		dp.attachment, err = attach(ifindex, AttachTCX, ingress, egress)
		return err
	}))
}
