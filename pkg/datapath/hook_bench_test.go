//go:build bench

package datapath

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/internal/tcptest"
)

// BenchmarkVethIngressHook weighs the hooks the ingress measurement could
// run at, by single-flow TCP throughput over veth: m2ho_ingress at tc
// (TCX) and a tc program that does nothing, against one that does nothing
// but pass the packet at XDP,
// in the generic (skb) mode that modem drivers without XDP support get and
// in veth's native mode. A hook whose empty program already costs more
// throughput than the whole tc program cannot host a faster variant of it.
// Windows with a hook alternate with windows without any, and each hook
// reports the median ratio of its windows to the hook-less windows next to
// them, as BenchmarkVethThroughput does. With offloads on, the receiver
// sees GRO-merged packets as from a NIC; with them off, MTU-sized linear
// packets as from most modem drivers.
func BenchmarkVethIngressHook(b *testing.B) {
	for _, offloads := range []bool{true, false} {
		b.Run(fmt.Sprintf("offloads=%t", offloads), func(b *testing.B) { benchmarkIngressHook(b, offloads) })
	}
}

func benchmarkIngressHook(b *testing.B, offloads bool) {
	// minRounds is the least number of rounds, each a pair of windows per
	// hook, whatever b.N.
	const minRounds = 30
	server, ue := nstest.ServerUEPair(b)
	if !offloads {
		for _, ns := range []*nstest.NS{server, ue} {
			require.NoError(b, ns.SetOffloads("veth0", false))
		}
	}
	dp := loadDetached(b, false, 0)
	b.Cleanup(func() { require.NoError(b, dp.Close()) })
	readBursts(b, dp)
	passXDP, emptyTC := passXDPProgram(b), referenceTCProgram(b)
	ifindex := ifindexIn(b, ue, "veth0")

	tcIngress := func(prog *ebpf.Program) (link.Link, error) {
		return link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: ebpf.AttachTCXIngress})
	}
	xdp := func(mode link.XDPAttachFlags) func(*ebpf.Program) (link.Link, error) {
		return func(prog *ebpf.Program) (link.Link, error) {
			return link.AttachXDP(link.XDPOptions{Interface: ifindex, Program: prog, Flags: mode})
		}
	}
	type ingressHook struct {
		name   string
		prog   *ebpf.Program
		attach func(*ebpf.Program) (link.Link, error)
	}
	hooks := []ingressHook{
		{"tc_empty", emptyTC, tcIngress},
		{"tc_m2ho_ingress", dp.objs.M2hoIngress, tcIngress},
		{"xdp_generic_pass", passXDP, xdp(link.XDPGenericMode)},
		{"xdp_native_pass", passXDP, xdp(link.XDPDriverMode)},
	}

	received := startVethDownload(b, server, ue, tcptest.AnyCPU)
	rate := func() float64 {
		bytes, elapsed := settledWindow(received)
		return bytes / elapsed.Seconds()
	}

	attachHook := func(h ingressHook) link.Link {
		var l link.Link
		require.NoError(b, ue.Do(func() error {
			var err error
			l, err = h.attach(h.prog)
			return err
		}), h.name)
		return l
	}

	ratios := make([][]float64, len(hooks))
	b.ResetTimer()
	for round := range max(b.N, minRounds) {
		for h, hook := range hooks {
			hooked := func() float64 {
				l := attachHook(hook)
				defer func() { require.NoError(b, l.Close()) }()
				return rate()
			}
			if ratio, ok := pairRatio(round, rate, hooked); ok {
				ratios[h] = append(ratios[h], ratio)
			}
		}
	}
	b.StopTimer()
	for h, hook := range hooks {
		require.NotEmpty(b, ratios[h], "the flow never moved")
		b.ReportMetric(quantile(ratios[h], 0.5), hook.name+"_median_ratio")
	}
	// the programs' own time per packet in this traffic, after the
	// windows since the statistics slow every run down
	for _, hook := range hooks {
		l := attachHook(hook)
		reportRunTime(b, map[string]*ebpf.Program{hook.name: hook.prog})
		require.NoError(b, l.Close())
	}
}

// passXDPProgram returns an XDP program that only returns XDP_PASS.
func passXDPProgram(tb testing.TB) *ebpf.Program {
	tb.Helper()
	const xdpPass = 2
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		License:      "Dual BSD/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()},
	})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = prog.Close() })
	return prog
}
