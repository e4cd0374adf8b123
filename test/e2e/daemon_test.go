package e2e

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/nstest"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/estimator"
)

// targetBuffer is the buffer estimate seeded for cell B: well below the
// receiver's own window, well above the estimator's floor.
const targetBuffer = 300000

// pacing keeps downloads at 400 Mbit/s: enough traffic for every
// measurement, without eating the shared CPU.
const pacing = 50 << 20

// withoutHold switches off the bandwidth hold, for tests of other parts
// of the policy. The bed's link is no cell: its RTT is a fraction of a
// millisecond, so the hold every sub-6 cell gets would clamp the download
// to the estimator's floor (64 KiB) from the first report naming its cell
// on (TestSub6CellHoldsBandwidthClamp), below every other clamp here.
var withoutHold = []string{"--ablate", "bandwidth_clamp"}

// unclamped reports a window the daemon did not lower.
func unclamped(w uint32) bool { return w > 2*targetBuffer }

// clampedTo reports a window within the clamp.
func clampedTo(limit uint32) func(uint32) bool {
	return func(w uint32) bool { return w <= limit }
}

// stateDirWithHistory is a state directory in which cell B's buffer is
// already learnt.
func stateDirWithHistory(t *testing.T) string {
	stateDir := t.TempDir()
	seedCells(t, stateDir, estimator.CellRecord{Cell: sub6B, BufferBytes: targetBuffer, Bursts: 10, Updated: time.Now()})
	return stateDir
}

// startWithHistory starts m2hod with cell B's buffer already learnt and a
// download running, captured on the wire, whose window is well above B's
// buffer.
func startWithHistory(t *testing.T, extra ...string) (*daemonProc, *download, *ackCapture) {
	b := newBed(t)
	d := b.startDaemon(t, stateDirWithHistory(t), extra...)
	wire := b.captureACKs(t)
	dl := b.startDownload(t, pacing)
	dl.waitWindow(5*time.Second, "open", unclamped)
	return d, dl, wire
}

// assertWireWindows checks every ACK the ue host sent during span.
func assertWireWindows(t *testing.T, wire *ackCapture, span time.Duration, what string, ok func(lo, hi uint32) bool) {
	t.Helper()
	from := time.Now()
	time.Sleep(span)
	acks := wire.between(from, time.Now())
	require.NotEmpty(t, acks, "ACKs on the wire")
	lo, hi := windowRange(acks)
	t.Logf("%d ACKs on the wire, windows %d..%d bytes (%s)", len(acks), lo, hi, what)
	assert.True(t, ok(lo, hi), "windows on the wire %d..%d: want %s", lo, hi, what)
}

func TestPredictedHandoverClampsToTargetEstimate(t *testing.T) {
	d, dl, wire := startWithHistory(t, withoutHold...)
	assertWireWindows(t, wire, 100*time.Millisecond, "open", func(lo, _ uint32) bool { return unclamped(lo) })

	d.send(measReport(diag.EventA3, sub6A, sub6B))
	st := d.waitStatus(time.Second, "preparation", func(s status) bool { return s.State == "preparation" })
	assert.Equal(t, uint32(targetBuffer), st.InForce.ClampBytes, "clamp = target cell's estimate")
	assert.Equal(t, "cell", st.InForce.ClampSource)
	assert.Equal(t, sub6A, st.Serving)
	// The command keeps Preparation beyond the prediction timeout.
	d.send(hoCommand(diag.HOPCell, sub6A, sub6B))
	w := dl.waitWindow(time.Second, "clamped", clampedTo(targetBuffer))
	t.Logf("sender's window: %d bytes under a %d-byte clamp", w, targetBuffer)
	assertWireWindows(t, wire, 200*time.Millisecond, "clamped, never closed", func(lo, hi uint32) bool {
		return lo > 0 && hi <= targetBuffer
	})

	st = d.status()
	assert.Equal(t, "preparation", st.State)
	assert.Positive(t, st.Datapath.Counters["clamp_applied"], "ACKs rewritten on the wire")
	assert.Equal(t, 1, st.Datapath.Flows)
}

func TestCommandAndCompletionDriveSmoothing(t *testing.T) {
	d, dl, _ := startWithHistory(t, withoutHold...)

	d.send(measReport(diag.EventA3, sub6A, sub6B))
	// The prediction starts suppressing the duplicates of holes, with no
	// epoch: the source cell's context release reorders data as the UE
	// applies the command, before the modem reports it.
	st := d.waitStatus(time.Second, "suppressing from the prediction", func(s status) bool {
		return s.State == "preparation" && s.InForce.Suppressing
	})
	assert.Zero(t, st.InForce.Epoch)
	d.send(hoCommand(diag.HOPCell, sub6A, sub6B))
	dl.waitWindow(time.Second, "clamped", clampedTo(targetBuffer))
	d.send(hoComplete(sub6B))

	// Smoothing ends within SmoothingMax (150 ms) at the latest.
	st = d.waitStatus(2*time.Second, "back to stable on the target", func(s status) bool {
		return s.State == "stable" && s.Serving == sub6B
	})
	assert.Equal(t, uint32(1), st.InForce.Epoch, "the handover's epoch, opened at the execution")
	assert.False(t, st.InForce.Suppressing, "suppression released")
	assert.Positive(t, st.Datapath.Counters["snapshots"], "the flow took its pre-handover snapshot")
	// A ramp may hold the clamp a few rounds longer, until the sender's
	// window fits under it.
	st = d.waitStatus(2*time.Second, "clamp released", func(s status) bool { return s.InForce.ClampBytes == 0 })
	assert.Equal(t, uint64(1), st.Machine.Counters.Predictions["confirmed"])
	assert.Equal(t, 1.0, d.metric(`m2hod_state_transitions_total{from="preparation",to="smoothing"}`))
	assert.Equal(t, 1.0, d.metric(`m2hod_state_transitions_total{from="smoothing",to="stable"}`))
	assert.Equal(t, 1.0, d.metric(`m2hod_handovers_total{kind="sub6_sub6"}`))
	assert.Equal(t, 1.0, d.metric(`m2hod_predictions_total{outcome="confirmed"}`))
	dl.waitWindow(time.Second, "open again", unclamped)
}

// startHeldHandover runs m2hod with the longest Smoothing allowed and a
// download, predicts and commands a handover to cell B, waits for the
// clamp, then pauses the download until it is drained: the downlink is
// held as the cells hold it across the completion, which the caller sends.
func startHeldHandover(t *testing.T) (*daemonProc, *download) {
	t.Helper()
	d, dl, _ := startWithHistory(t, "--smoothing-max", "190ms")
	d.send(measReport(diag.EventA3, sub6A, sub6B))
	d.send(hoCommand(diag.HOPCell, sub6A, sub6B))
	dl.waitWindow(time.Second, "clamped", clampedTo(targetBuffer))
	dl.paused.Store(true)
	dl.waitDrained(2 * time.Second)
	return d, dl
}

// TestSmoothingWaitsForForwardedData holds the downlink across the
// completion, as the cells do until the forwarded data reaches the target:
// while no packet of the flow has come in the new epoch, the flow has
// taken no snapshot, and Smoothing must still wait for it. Once data
// flows, Smoothing ends by what the data shows (the flow's own ACK
// releases it, or the first burst ends), not on its bound.
func TestSmoothingWaitsForForwardedData(t *testing.T) {
	d, dl := startHeldHandover(t)
	d.send(hoComplete(sub6B))
	d.waitLog(time.Second, "to=smoothing")
	// five ticks of the daemon's loop, each asking which flows are pending
	time.Sleep(50 * time.Millisecond)
	require.NotContains(t, d.log.String(), "from=smoothing", "Smoothing ended before the flow's first packet in the epoch")

	dl.paused.Store(false)
	d.waitLog(time.Second, "from=smoothing")
	log := d.log.String()
	assert.True(t, strings.Contains(log, "from=smoothing to=stable reason=flows_released") ||
		strings.Contains(log, "from=smoothing to=stable reason=burst_end"), "Smoothing ends by the data after the handover")
	st := d.waitStatus(time.Second, "back to stable on the target", func(s status) bool {
		return s.State == "stable" && s.Serving == sub6B
	})
	assert.Positive(t, st.Datapath.Counters["snapshots"], "the flow entered the epoch with its first packet")
	assert.Zero(t, st.Datapath.Counters["suppress_expired"])
}

// TestSmoothingSkipsClosedConnections ends the download before the
// completion: the host has acknowledged the server's FIN, so nothing more
// will arrive on the flow and Smoothing, with no other flow, ends at once
// instead of lasting to its bound.
func TestSmoothingSkipsClosedConnections(t *testing.T) {
	d, dl := startHeldHandover(t)
	require.NoError(t, dl.sender.Close())
	d.waitStatus(2*time.Second, "the flow closed", func(s status) bool {
		return s.Datapath.Counters["flow_closed"] == 1
	})

	d.send(hoComplete(sub6B))
	d.waitLog(time.Second, "from=smoothing")
	assert.Contains(t, d.log.String(), "from=smoothing to=stable reason=flows_released")
}

func TestA1CancelsPrediction(t *testing.T) {
	d, dl, _ := startWithHistory(t, withoutHold...)

	d.send(measReport(diag.EventA3, sub6A, sub6B))
	d.waitStatus(time.Second, "preparation", func(s status) bool { return s.State == "preparation" })
	d.send(measReport(diag.EventA1, sub6A, diag.Cell{}))
	st := d.waitStatus(time.Second, "stable", func(s status) bool { return s.State == "stable" })
	assert.Zero(t, st.InForce.ClampBytes)
	assert.Equal(t, 1.0, d.metric(`m2hod_predictions_total{outcome="cancelled_a1"}`))
	assert.Zero(t, d.metric(`m2hod_handovers_total{kind="sub6_sub6"}`))
	dl.waitWindow(time.Second, "open again", unclamped)
}

func TestMissingCommandTimesOut(t *testing.T) {
	d, dl, _ := startWithHistory(t, withoutHold...)

	sent := time.Now()
	d.send(measReport(diag.EventA3, sub6A, sub6B))
	d.waitStatus(time.Second, "preparation", func(s status) bool { return s.State == "preparation" })
	// 2*T2 with the default T2 of 146 ms.
	st := d.waitStatus(3*time.Second, "stable after the timeout", func(s status) bool { return s.State == "stable" })
	t.Logf("prediction timed out %v after the report", time.Since(sent).Round(time.Millisecond))
	assert.Zero(t, st.InForce.ClampBytes)
	assert.Equal(t, 1.0, d.metric(`m2hod_predictions_total{outcome="timed_out"}`))
	dl.waitWindow(time.Second, "open again", unclamped)
}

func TestMmWaveToSub6HoldsBandwidthClamp(t *testing.T) {
	b := newBed(t)
	d := b.startDaemon(t, t.TempDir())
	dl := b.startDownload(t, pacing)
	dl.waitWindow(5*time.Second, "open", unclamped)

	// Up to mmWave (an unpredicted command still works), then let the
	// estimator see the mmWave bandwidth.
	d.send(measReport(diag.EventA3, sub6A, sub6B))
	d.send(hoCommand(diag.HOPCell, sub6A, mmWaveC))
	d.send(hoComplete(mmWaveC))
	d.waitStatus(2*time.Second, "stable on mmWave", func(s status) bool { return s.State == "stable" && s.Serving == mmWaveC })
	dl.waitBytes(5*time.Second, 20<<20)

	// Down to sub-6: the handover's clamp stays until the estimator
	// measured a round on the sub-6 cell, then the bandwidth clamp (Eq. 2
	// on that cell) holds the window, renewed beyond one policy lease
	// (500 ms).
	d.send(measReport(diag.EventA2, mmWaveC, diag.Cell{}))
	d.send(hoCommand(diag.HOPCell, mmWaveC, sub6A))
	d.send(hoComplete(sub6A))
	assertBandwidthHeld(t, d, dl)
	assert.Equal(t, 1.0, d.metric(`m2hod_handovers_total{kind="mmwave_sub6"}`))

	// Back to mmWave: the sub-6 clamp ends.
	d.send(hoCommand(diag.HOPCell, sub6A, mmWaveC))
	d.send(hoComplete(mmWaveC))
	assertMmWaveHold(t, d, dl)
}

// assertMmWaveHold waits for the mmWave cell's hold: what the cell
// delivers over T2, on the bed far above the sub-6 clamp, so the
// download's window opens again.
func assertMmWaveHold(t *testing.T, d *daemonProc, dl *download) {
	t.Helper()
	st := d.waitStatus(3*time.Second, "the mmWave hold", func(s status) bool {
		return s.State == "stable" && s.Serving == mmWaveC && s.Machine.BandwidthHold &&
			s.InForce.ClampSource == "bandwidth" && unclamped(s.InForce.ClampBytes)
	})
	t.Logf("mmWave hold %d bytes", st.InForce.ClampBytes)
	dl.waitWindow(2*time.Second, "open again", unclamped)
}

// assertBandwidthHeld waits for the bandwidth hold's clamp, checks that
// it is renewed past a policy lease (500 ms), and that the download's
// window keeps within it.
func assertBandwidthHeld(t *testing.T, d *daemonProc, dl *download) status {
	t.Helper()
	st := d.waitStatus(2*time.Second, "bandwidth clamp", func(s status) bool {
		return s.State == "stable" && s.InForce.ClampSource == "bandwidth"
	})
	assert.True(t, st.Machine.BandwidthHold)
	time.Sleep(time.Second)
	st = d.status()
	require.Equal(t, "bandwidth", st.InForce.ClampSource, "still held after a lease")
	require.Positive(t, st.InForce.ClampBytes)
	t.Logf("bandwidth clamp %d bytes", st.InForce.ClampBytes)
	dl.waitWindow(time.Second, "within the bandwidth clamp", func(w uint32) bool { return w <= st.InForce.ClampBytes })
	return st
}

// TestSub6CellHoldsBandwidthClamp: a report naming the sub-6 cell that
// serves turns the bandwidth hold on, without any handover: Eq. 2 on
// what the cell delivers clamps the download once the estimator measured
// a round, renewed past a policy lease, and a handover to mmWave ends it:
// the mmWave cell's own hold lies far above it.
func TestSub6CellHoldsBandwidthClamp(t *testing.T) {
	b := newBed(t)
	d := b.startDaemon(t, t.TempDir())
	dl := b.startDownload(t, pacing)
	dl.waitWindow(5*time.Second, "open", unclamped)

	// A1 (the serving cell is good) predicts nothing: it only names the
	// cell.
	d.send(measReport(diag.EventA1, sub6A, diag.Cell{}))
	st := assertBandwidthHeld(t, d, dl)
	assert.Equal(t, sub6A, st.Serving)
	assert.Zero(t, d.metric(`m2hod_handovers_total{kind="sub6_sub6"}`))

	d.send(hoCommand(diag.HOPCell, sub6A, mmWaveC))
	d.send(hoComplete(mmWaveC))
	assertMmWaveHold(t, d, dl)
	assert.Equal(t, 1.0, d.metric(`m2hod_handovers_total{kind="sub6_mmwave"}`))
}

func TestObserveModeChangesNoPacket(t *testing.T) {
	d, dl, wire := startWithHistory(t, append([]string{"--mode", "observe"}, withoutHold...)...)

	d.send(measReport(diag.EventA3, sub6A, sub6B))
	d.send(hoCommand(diag.HOPCell, sub6A, sub6B))
	st := d.waitStatus(time.Second, "preparation", func(s status) bool { return s.State == "preparation" })
	assert.Equal(t, "observe", st.Mode)
	assert.Equal(t, uint32(targetBuffer), st.InForce.ClampBytes, "the policy is computed and shown")
	assertWireWindows(t, wire, 300*time.Millisecond, "untouched", func(lo, _ uint32) bool { return unclamped(lo) })
	assert.True(t, unclamped(dl.senderWindow()))
	d.send(hoComplete(sub6B))
	d.waitStatus(2*time.Second, "stable", func(s status) bool { return s.State == "stable" && s.Serving == sub6B })
	st = d.status()
	assert.Zero(t, st.Datapath.Counters["clamp_applied"])
	assert.Zero(t, st.Datapath.Counters["dupack_suppressed"])
	assert.Zero(t, st.Datapath.Counters["snapshots"], "no handover epoch reached the datapath")
	assert.Positive(t, st.Datapath.Counters["rtt_samples"], "measurement still runs")
}

// TestSIGHUPReloadsTheConfiguration changes the configuration file of a
// running m2hod and sends SIGHUP: a file that does not validate changes
// nothing and m2hod goes on, a valid one restarts it in place with the new
// settings. The restarted daemon takes over the pinned flow of the
// download opened before, and clamps it at the next predicted handover.
func TestSIGHUPReloadsTheConfiguration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m2hod.yaml")
	writeConfig := func(text string) { require.NoError(t, os.WriteFile(path, []byte(text), 0o600)) }
	writeConfig("mode: observe\n")
	b := newBed(t)
	d := b.startDaemon(t, stateDirWithHistory(t), "--config", path)
	dl := b.startDownload(t, pacing)
	dl.waitWindow(5*time.Second, "open", unclamped)
	d.waitStatus(2*time.Second, "the download tracked", func(s status) bool { return s.Datapath.Flows == 1 })
	assert.Equal(t, "observe", d.status().Mode)

	writeConfig("mode: enforce\nlambda: 99\n")
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
	d.waitLog(5*time.Second, "configuration not reloaded")
	assert.Contains(t, d.log.String(), "lambda: must be between")
	assert.True(t, d.running())
	assert.Equal(t, "observe", d.status().Mode, "the running configuration stays")

	writeConfig("mode: enforce\n")
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
	d.waitLog(10*time.Second, "configuration reloaded")
	d.waitHealthy(10 * time.Second)
	assert.Equal(t, "enforce", d.status().Mode)
	if b.pinDir != "" {
		taken := linesWith(d.log.String(), "took over pinned flows")
		if assert.Len(t, taken, 1) {
			assert.Contains(t, taken[0], "flows=1")
		}
	}

	d.send(measReport(diag.EventA3, sub6A, sub6B))
	d.send(hoCommand(diag.HOPCell, sub6A, sub6B))
	dl.waitWindow(2*time.Second, "clamped", clampedTo(targetBuffer))
	st := d.status()
	assert.Positive(t, st.Datapath.Counters["clamp_applied"])
	assert.Zero(t, st.Datapath.Counters["no_wscale"])
}

func TestSIGKILLWhileSuppressingRecovers(t *testing.T) {
	// The longest Smoothing allowed leaves time to kill inside it. With the
	// sender paused and drained no ACK passes the pre-handover sequence,
	// so no flow releases itself and Smoothing lasts its full duration.
	d, dl := startHeldHandover(t)
	d.send(hoComplete(sub6B))
	// The daemon's log shows the transition at once, faster than /status.
	d.waitLog(time.Second, "to=smoothing")
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGKILL))
	<-d.exited
	killed := time.Now()
	require.NotContains(t, d.log.String(), "from=smoothing", "killed while suppressing")

	dl.paused.Store(false)
	// Every policy had a deadline at most one lease (500 ms) ahead.
	dl.waitWindow(2*time.Second, "open again", unclamped)
	dl.waitBytes(2*time.Second, 10<<20)
	t.Logf("connection recovered %v after SIGKILL", time.Since(killed).Round(time.Millisecond))
}

// TestRestartAfterSIGKILLStillClamps kills m2hod during a download and
// starts it again: the pinned flow table still holds the connection's
// window scale, learnt from its SYN before the kill, so the next handover
// clamps the connection opened before the restart.
func TestRestartAfterSIGKILLStillClamps(t *testing.T) {
	b := newBed(t)
	if b.pinDir == "" {
		t.Skip("no BPF filesystem to pin the flows in")
	}
	stateDir := stateDirWithHistory(t)
	first := b.startDaemon(t, stateDir)
	dl := b.startDownload(t, pacing)
	dl.waitWindow(5*time.Second, "open", unclamped)
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	<-first.exited

	second := b.startDaemon(t, stateDir)
	second.waitLog(time.Second, "took over pinned flows")
	assert.Contains(t, second.log.String(), "flows=1")
	second.send(measReport(diag.EventA3, sub6A, sub6B))
	second.send(hoCommand(diag.HOPCell, sub6A, sub6B))
	dl.waitWindow(time.Second, "clamped", clampedTo(targetBuffer))
	st := second.status()
	assert.Zero(t, st.Datapath.Counters["no_wscale"], "the window scale survived the restart")
}

func TestGarbageOnDiagSocket(t *testing.T) {
	b := newBed(t)
	d := b.startDaemon(t, t.TempDir())

	garbage := [][]byte{
		[]byte("{"),
		[]byte(`{"v":2,"type":"meas_report"}`),
		[]byte(`{"v":1,"type":"teleport"}`),
		[]byte(`{"v":1,"type":"meas_report","event":"Z9"}`),
		[]byte(`{"v":1,"type":"ho_command","kind":"pcell","target":{"rat":"wifi","pci":1,"arfcn":1}}`),
		[]byte("\x00\x01\x02\xff"),
		[]byte("null"),
		[]byte(`[1,2,3]`),
	}
	for range 50 {
		random := make([]byte, 512)
		_, _ = rand.Read(random)
		garbage = append(garbage, random)
	}
	for _, g := range garbage {
		d.sendRaw(g)
	}
	st := d.waitStatus(2*time.Second, "every datagram counted", func(s status) bool {
		var errs uint64
		for _, n := range s.Diag.Errors {
			errs += n
		}
		return errs >= uint64(len(garbage))
	})
	t.Logf("diag errors by reason: %v", st.Diag.Errors)
	assert.Zero(t, st.Diag.Events[string(diag.TypeMeasReport)])

	// Still alive and still working.
	d.send(measReport(diag.EventA3, sub6A, sub6B))
	d.waitStatus(time.Second, "preparation", func(s status) bool { return s.State == "preparation" })
	assert.True(t, d.running())
}

// tcxPrograms counts the programs attached to the modem interface's TCX
// hooks, seen from inside the ue namespace.
func tcxPrograms(t *testing.T, b *bed) int {
	t.Helper()
	index, err := nstest.VethEnd{NS: b.ue, Ifname: modemIface}.Index()
	require.NoError(t, err)
	count := 0
	require.NoError(t, b.ue.Do(func() error {
		for _, attach := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
			res, err := link.QueryPrograms(link.QueryOptions{Target: index, Attach: attach})
			if err != nil {
				return err
			}
			count += len(res.Programs)
		}
		return nil
	}))
	return count
}

func TestSIGTERMDetaches(t *testing.T) {
	b := newBed(t)
	d := b.startDaemon(t, t.TempDir())
	st := d.status()
	if st.AttachMode != "tcx" {
		t.Skipf("attached with %s; this check reads TCX hooks", st.AttachMode)
	}
	assert.Equal(t, 2, tcxPrograms(t, b), "ingress and egress programs attached")

	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("m2hod did not stop within 10 s of SIGTERM")
	}
	require.NoError(t, d.exitErr, "exit status 0")
	assert.Zero(t, tcxPrograms(t, b), "nothing left on the interface")
	assert.Contains(t, d.log.String(), "stopping")
	if b.pinDir != "" {
		entries, err := os.ReadDir(b.pinDir)
		require.NoError(t, err)
		for _, e := range entries {
			// the BPF filesystem's own iterators sit in its root
			assert.NotContains(t, e.Name(), modemIface, "flow state left pinned")
		}
	}
}

// TestModemInterfaceResetReattaches takes the modem interface away while
// m2hod runs, as a modem that resets or drops off its bus does, and brings
// back a new interface of the same name: m2hod keeps running, reports the
// gap, and clamps a download through the new interface at the next
// predicted handover.
func TestModemInterfaceResetReattaches(t *testing.T) {
	b := newBed(t)
	d := b.startDaemon(t, stateDirWithHistory(t))
	attachMode := d.status().AttachMode
	require.Equal(t, 1.0, d.metric("m2hod_datapath_attached"))

	b.removeModem(t)
	d.waitStatus(5*time.Second, "detached", func(s status) bool { return s.AttachMode == "none" })
	assert.Equal(t, 0.0, d.metric("m2hod_datapath_attached"))
	d.waitLog(time.Second, "the interface is gone")
	assert.True(t, d.running(), "m2hod keeps running without its interface")

	b.linkModem(t)
	d.waitStatus(5*time.Second, "attached again", func(s status) bool { return s.AttachMode == attachMode })
	assert.Equal(t, 1.0, d.metric("m2hod_datapath_attached"))

	dl := b.startDownload(t, pacing)
	dl.waitWindow(5*time.Second, "open", unclamped)
	d.send(measReport(diag.EventA3, sub6A, sub6B))
	d.send(hoCommand(diag.HOPCell, sub6A, sub6B))
	w := dl.waitWindow(time.Second, "clamped through the new interface", clampedTo(targetBuffer))
	t.Logf("sender's window: %d bytes under a %d-byte clamp after the interface came back", w, targetBuffer)
}
