package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/config"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/report"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/topo"
	"github.com/m2ho/m2ho/test/traffic"
)

// shortScenario is 10 s on a 20 Mbit/s cell, then a handover at 5 s to a
// 40 Mbit/s cell whose source releases its context out of order into a
// small target buffer.
func shortScenario(t *testing.T, receiver string) *scenario.Scenario {
	t.Helper()
	sc := &scenario.Scenario{
		Name: "ci-short", Duration: 10 * time.Second, Scale: 1, InitialCell: "a",
		Cells: []scenario.Cell{
			{Name: "a", RAT: diag.RATNR, PCI: 1, ARFCN: 627264, Capacity: scenario.CapacitySpec{ConstantMbps: 20},
				BufferBytes: 150000, DelayDown: 15 * time.Millisecond, DelayUp: 15 * time.Millisecond},
			{Name: "b", RAT: diag.RATNR, PCI: 2, ARFCN: 2079167, Capacity: scenario.CapacitySpec{ConstantMbps: 40},
				BufferBytes: 300000, DelayDown: 15 * time.Millisecond, DelayUp: 15 * time.Millisecond},
		},
		Timeline: []scenario.Event{{
			At: 5 * time.Second, Type: scenario.TypeHandover, Kind: diag.HOSCGAdd, Source: "a", Target: "b",
			MeasEvent: diag.EventB1, ContextRelease: &scenario.ContextRelease{HeldPackets: 6}, TargetBufferBytes: 20000,
		}},
		Traffic: scenario.Traffic{Receiver: receiver},
	}
	raw, err := sc.Marshal()
	require.NoError(t, err)
	sc, err = scenario.Parse(raw)
	require.NoError(t, err)
	return sc
}

// TestRunMeasuresWhatItClaims runs a short scenario end to end and checks
// the harness's figures against independent counts: the receiver's bytes,
// the sender's acknowledged bytes, the emulator's delivered bytes, the
// link's capacity and the ground truth.
func TestRunMeasuresWhatItClaims(t *testing.T) {
	nstest.RequireRoot(t)
	tests := []struct {
		name     string
		receiver string
		pcap     bool
	}{
		{name: "receiver on the ue", receiver: scenario.ReceiverUE},
		{name: "receiver behind the ue on its lan, with pcap", receiver: scenario.ReceiverLAN, pcap: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := shortScenario(t, tt.receiver)
			out := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := Run(ctx, Config{Scenario: sc, Variant: Variant{CC: "cubic"}, OutDir: out, Pcap: tt.pcap})
			require.NoError(t, err)
			m := res.Measurements

			// Goodput series integrate to the receiver's byte count.
			at, bps := m.GoodputSeries()
			require.NotEmpty(t, at)
			var integrated float64
			prev := m.Goodput[0].At
			for i := range at {
				integrated += bps[i] / 8 * (at[i] - prev).Seconds()
				prev = at[i]
			}
			received := float64(m.ReceivedBytes)
			require.Greater(t, received, 1e6, "traffic flowed")
			assert.InDelta(t, received-float64(m.Goodput[0].Bytes), integrated, 1, "goodput integrates to the received bytes")

			// The sender's acknowledged bytes trail the receiver's count by
			// at most what is in flight.
			last := m.TCPInfo[len(m.TCPInfo)-1]
			assert.LessOrEqual(t, float64(last.BytesAcked), received+1)
			assert.Greater(t, float64(last.BytesAcked), received-1e6)
			assert.Equal(t, "cubic", res.Fidelity.CongestionCtl)

			// The emulator delivered at least the payload received, and not
			// much more (headers and a few retransmissions).
			payloadDelivered := float64(res.Truth.Totals.DeliveredBytes) * 1448 / 1500
			assert.GreaterOrEqual(t, payloadDelivered*1.001, received)
			assert.Less(t, payloadDelivered, received*1.15)

			// Goodput never exceeds capacity: 20 Mbit/s before, 40 after.
			before := (float64(bytesAtOrBefore(m.Goodput, 5*time.Second)) - float64(m.Goodput[0].Bytes)) * 8 / 5
			assert.Less(t, before, 20e6*1.02)
			assert.Greater(t, before, 20e6*0.5)

			// Samples at their periods (the median gap: a busy machine
			// delays the odd tick).
			assert.InDelta(t, traffic.GoodputPeriod, medianGap(m.Goodput, func(s traffic.GoodputSample) time.Duration { return s.At }), float64(20*time.Millisecond))
			assert.InDelta(t, traffic.TCPInfoPeriod, medianGap(m.TCPInfo, func(s traffic.TCPInfoSample) time.Duration { return s.At }), float64(5*time.Millisecond))

			// The ground truth has the handover with its packet fates.
			require.Len(t, res.Truth.Handovers, 1)
			ho := res.Truth.Handovers[0]
			assert.True(t, ho.Reordered)
			assert.Len(t, ho.Held, 6)
			for _, h := range ho.Held {
				assert.Greater(t, h.DeliveredAt, ho.CompleteAt, "held packets come through the target")
			}
			reorderDups := 0
			for _, d := range res.Truth.DupAcks {
				if d.Cause == emu.DupAckReorder {
					reorderDups++
				}
			}
			// Each packet released out of order makes at most one
			// duplicate ACK for a held one; a busy machine may leave the
			// sender idle across the command, then nothing is released.
			assert.LessOrEqual(t, reorderDups, ho.Released)
			if ho.Released > 0 {
				assert.Greater(t, reorderDups, 0, "the out-of-order release produced duplicate ACKs")
			}

			if tt.receiver == scenario.ReceiverLAN {
				// The receiver's ACKs read before the UE are the record of
				// what it generated; nothing on the UE drops any here, so
				// every duplicate it sent reached the uplink.
				assert.Equal(t, emu.GeneratedFromLANTap, res.Truth.GeneratedFrom)
				generated := map[uint32]int{}
				for _, d := range res.Truth.GeneratedDupAcks {
					generated[d.Ack]++
				}
				seen := map[uint32]int{}
				for _, d := range res.Truth.DupAcks {
					seen[d.Ack]++
				}
				assert.Equal(t, seen, generated, "duplicate ACKs per acknowledgement number, before and after the UE")
			} else {
				assert.Equal(t, emu.GeneratedFromModel, res.Truth.GeneratedFrom)
			}

			for _, f := range []string{GroundTruthFile, MeasurementsFile, FidelityFile} {
				assert.FileExists(t, filepath.Join(out, f))
			}
			again, err := ReadMeasurements(filepath.Join(out, MeasurementsFile))
			require.NoError(t, err)
			assert.Equal(t, m.ReceivedBytes, again.ReceivedBytes)

			if tt.pcap {
				// The capture saw the UE's side of the link: data and ACKs.
				f, err := os.Open(filepath.Join(out, PcapFile))
				require.NoError(t, err)
				defer f.Close()
				r, err := pcapgo.NewReader(f)
				require.NoError(t, err)
				frames := 0
				for {
					if _, _, err := r.ReadPacketData(); err != nil {
						break
					}
					frames++
				}
				assert.Greater(t, uint64(frames), res.Truth.Totals.DeliveredPackets/2)
			}

			hs, err := report.Analyze(sc, res.Truth, m)
			require.NoError(t, err)
			require.Len(t, hs, 1)
			assert.Greater(t, hs[0].ThroughputBps, 0.0)
			assert.Less(t, hs[0].ThroughputBps, 40e6)
			t.Logf("received %.1f MB, timing p50 %v p99 %v, handover: %+v", received/1e6, res.Fidelity.DownlinkP50, res.Fidelity.DownlinkP99, hs[0])
		})
	}
}

func medianGap[S any](samples []S, at func(S) time.Duration) time.Duration {
	var gaps []time.Duration
	for i := 1; i < len(samples); i++ {
		gaps = append(gaps, at(samples[i])-at(samples[i-1]))
	}
	if len(gaps) == 0 {
		return 0
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2]
}

func bytesAtOrBefore(samples []traffic.GoodputSample, t time.Duration) uint64 {
	var b uint64
	for _, s := range samples {
		if s.At <= t {
			b = s.Bytes
		}
	}
	return b
}

func TestParseVariant(t *testing.T) {
	tests := []struct {
		in      string
		want    Variant
		wantErr bool
	}{
		{in: "cubic", want: Variant{CC: "cubic"}},
		{in: "cubic+m2ho", want: Variant{CC: "cubic", M2HO: true}},
		{in: "bbr+m2ho", want: Variant{CC: "bbr", M2HO: true}},
		{in: "reno", want: Variant{CC: "reno"}},
		{in: "cubic+freeze", want: Variant{CC: "cubic", M2HO: true, Freeze: true}},
		{in: "cubic+m2ho-no-prediction", want: Variant{CC: "cubic", M2HO: true, Ablate: []config.Component{config.ComponentPrediction}}},
		{in: "cubic+m2ho-no-suppression-no-bandwidth_clamp", want: Variant{CC: "cubic", M2HO: true,
			Ablate: []config.Component{config.ComponentSuppression, config.ComponentBandwidthClamp}}},
		{in: "vegas", wantErr: true},
		{in: "cubic+mtcp", wantErr: true},
		{in: "cubic+m2ho-no-rtt", wantErr: true},
		{in: "cubic+freeze-no-prediction", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseVariant(tt.in)
		if tt.wantErr {
			assert.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, got)
		assert.Equal(t, tt.in, got.String())
	}
}

// TestRunCancelledRemovesEverything cancels a run midway, as SIGINT does in
// the command, and checks that nothing is left behind.
func TestRunCancelledRemovesEverything(t *testing.T) {
	nstest.RequireRoot(t)
	before := testbedNamespaces(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := Run(ctx, Config{Scenario: shortScenario(t, scenario.ReceiverUE), Variant: Variant{CC: "cubic"}, OutDir: t.TempDir()})
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, before, testbedNamespaces(t))
}

// testbedNamespaces lists this process's testbed namespaces.
func testbedNamespaces(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	prefix := fmt.Sprintf("%s%d-", topo.NamePrefix, os.Getpid())
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestEpochsReadTheSawtooth(t *testing.T) {
	// A sawtooth at scale 0.5: losses at 12, 16, 20 and 24 s, each
	// retransmitted over 50 ms (one episode, though ssthresh is the same
	// every time); after each the window climbs from 70 back to 100 in
	// 2 s, to 95 in 1.67 s.
	m := &traffic.Measurements{}
	retrans := uint32(0)
	for ms := 0; ms <= 24000; ms += 10 {
		at := time.Duration(ms) * time.Millisecond
		cwnd := uint32(100)
		if ms >= 12000 {
			phase := (ms - 12000) % 4000
			if phase < 50 {
				retrans++
			}
			if phase < 2000 {
				cwnd = 70 + uint32(30*phase/2000)
			}
		}
		m.TCPInfo = append(m.TCPInfo, traffic.TCPInfoSample{At: at, Cwnd: cwnd, Ssthresh: 70, Retrans: retrans})
		if ms%100 == 0 {
			// 10 Mbit/s of goodput
			m.Goodput = append(m.Goodput, traffic.GoodputSample{At: at, Bytes: uint64(ms) * 1250})
		}
	}
	r, err := epochs(m, 0.5, 10e6*traffic.IPPerPayload)
	require.NoError(t, err)
	assert.Equal(t, 4, r.Reductions, "12, 16, 20 and 24 s")
	assert.Equal(t, 4*time.Second, r.Epoch)
	assert.InDelta(t, 1.67, r.Recovery.Seconds(), 0.02, "back to 95 of 100; the last fall has no sample after it")
	assert.InDelta(t, 200, r.MaxCwndFull, 1e-9, "100 segments at scale 0.5")
	assert.InDelta(t, 1, r.GoodputRatio, 0.01)

	_, err = epochs(&traffic.Measurements{}, 1, 1)
	assert.Error(t, err)
}
