package datapath

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/nstest"
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
	const (
		window    = 100 * time.Millisecond
		settle    = 10 * time.Millisecond
		minRounds = 30
	)
	server, ue := vethPair(b)
	if !offloads {
		for _, ns := range []*nstest.NS{server, ue} {
			require.NoError(b, ns.SetOffloads(context.Background(), "veth0", false))
		}
	}
	srv := startBulkServer(b, server, fmt.Sprintf("%s:%d", serverAddr, uePort))
	dp := loadDetached(b, false, 0)
	b.Cleanup(func() { require.NoError(b, dp.Close()) })
	passXDP, emptyTC := passXDPProgram(b), emptyTCProgram(b)
	ifindex := ifindexIn(b, ue, "veth0")

	hooks := []struct {
		name   string
		prog   *ebpf.Program
		attach func() (link.Link, error)
	}{
		{"tc_empty", emptyTC, func() (link.Link, error) {
			return link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: emptyTC, Attach: ebpf.AttachTCXIngress})
		}},
		{"tc_m2ho_ingress", dp.objs.M2hoIngress, func() (link.Link, error) {
			return link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: dp.objs.M2hoIngress, Attach: ebpf.AttachTCXIngress})
		}},
		{"xdp_generic_pass", passXDP, func() (link.Link, error) {
			return link.AttachXDP(link.XDPOptions{Interface: ifindex, Program: passXDP, Flags: link.XDPGenericMode})
		}},
		{"xdp_native_pass", passXDP, func() (link.Link, error) {
			return link.AttachXDP(link.XDPOptions{Interface: ifindex, Program: passXDP, Flags: link.XDPDriverMode})
		}},
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	received, _ := download(b, ctx, ue, fmt.Sprintf("%s:%d", serverAddr, uePort))
	<-srv.conns
	time.Sleep(200 * time.Millisecond)
	rate := func() float64 {
		time.Sleep(settle)
		start, begin := received(), time.Now()
		time.Sleep(window)
		return float64(received()-start) / time.Since(begin).Seconds()
	}

	attachHook := func(name string, attach func() (link.Link, error)) link.Link {
		var l link.Link
		require.NoError(b, ue.Do(func() error {
			var err error
			l, err = attach()
			return err
		}), name)
		return l
	}

	ratios := make([][]float64, len(hooks))
	b.ResetTimer()
	for round := range max(b.N, minRounds) {
		for h, hook := range hooks {
			var bare, hooked float64
			measureHooked := func() {
				l := attachHook(hook.name, hook.attach)
				hooked = rate()
				require.NoError(b, l.Close())
			}
			// alternate the order, so that neither window always
			// follows the other's transition
			if round%2 == 0 {
				bare = rate()
				measureHooked()
			} else {
				measureHooked()
				bare = rate()
			}
			if bare > 0 {
				ratios[h] = append(ratios[h], hooked/bare)
			}
		}
	}
	b.StopTimer()
	for h, hook := range hooks {
		require.NotEmpty(b, ratios[h], "the flow never moved")
		slices.Sort(ratios[h])
		b.ReportMetric(ratios[h][len(ratios[h])/2], hook.name+"_median_ratio")
	}
	// the programs' own time per packet in this traffic, after the
	// windows since the statistics slow every run down
	for _, hook := range hooks {
		l := attachHook(hook.name, hook.attach)
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
