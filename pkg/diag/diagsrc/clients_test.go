package diagsrc_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/shareddata"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag/qcdiagtest"
	"github.com/m2ho/m2ho/pkg/diag/rrc"
)

// gsmtapClient is the path of a GSMTAP client (scat, qcsuper) in the
// test-only virtualenv the Makefile creates; the test skips without it.
func gsmtapClient(t *testing.T, name string) string {
	t.Helper()
	root, err := shareddata.RepoRoot()
	require.NoError(t, err)
	bin := filepath.Join(root, ".venv-gsmtap", "bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("GSMTAP clients' virtualenv absent (%s); create it with: make .venv-gsmtap/.installed", bin)
	}
	return bin
}

// eventCounts are the events the comparison is about.
type eventCounts struct {
	Reports, Commands, Completions, Failures int
}

func (c eventCounts) String() string {
	return fmt.Sprintf("%d reports, %d commands, %d completions, %d failures", c.Reports, c.Commands, c.Completions, c.Failures)
}

func (c *eventCounts) add(ev diag.Event) {
	switch ev.Type {
	case diag.TypeMeasReport:
		c.Reports++
	case diag.TypeHOCommand:
		c.Commands++
	case diag.TypeHOComplete:
		c.Completions++
	case diag.TypeHOFailure:
		c.Failures++
	}
}

// assertClose checks every count of got against want within 1%.
func assertClose(t *testing.T, want, got eventCounts, what string) {
	t.Helper()
	close := func(a, b int) bool { return math.Abs(float64(a-b)) <= 0.01*float64(max(a, b)) }
	ok := close(want.Reports, got.Reports) && close(want.Commands, got.Commands) &&
		close(want.Completions, got.Completions) && close(want.Failures, got.Failures)
	assert.True(t, ok, "%s: %v, want %v within 1%%", what, got, want)
}

// decodeFile counts the events of a file input.
func decodeFile(t *testing.T, uri string, dec diag.RRCDecoder) eventCounts {
	t.Helper()
	src, err := diagsrc.Open(uri, diagsrc.Options{RRC: dec, Logger: quiet})
	require.NoError(t, err)
	var c eventCounts
	for _, ev := range runAll(t, src) {
		c.add(ev)
	}
	return c
}

// capturePacket is a log packet of a capture, and whether the reader
// recovered it from a frame whose CRC failed: the start of a frame whose
// end was lost, followed by this whole one.
type capturePacket struct {
	qcdiag.LogPacket
	recovered bool
}

func readPackets(t *testing.T, path string) []capturePacket {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var packets []capturePacket
	r := qcdiag.NewReader(f, nil)
	for {
		before := r.Counters().Truncated
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return packets
		}
		require.NoError(t, err)
		packets = append(packets, capturePacket{LogPacket: p, recovered: r.Counters().Truncated > before})
	}
}

// writeQMDL writes the packets keep selects as a DIAG stream, each in a
// multi-radio wrapper naming its subscription unless merged, with the
// timestamp stamp gives.
func writeQMDL(t *testing.T, path string, packets []capturePacket, keep func(capturePacket) bool, merged bool, stamp func(uint64) uint64) {
	t.Helper()
	var stream []byte
	for _, p := range packets {
		if !keep(p) {
			continue
		}
		n := 12 + len(p.Payload)
		body := []byte{qcdiag.CmdLog, 0}
		body = binary.LittleEndian.AppendUint16(body, uint16(n))
		body = binary.LittleEndian.AppendUint16(body, uint16(n))
		body = binary.LittleEndian.AppendUint16(body, p.Code)
		body = binary.LittleEndian.AppendUint64(body, stamp(p.Timestamp))
		body = append(body, p.Payload...)
		if !merged {
			wrapper := binary.LittleEndian.AppendUint32([]byte{qcdiag.CmdMultiRadio, 1, 0, 0}, uint32(p.Subscription)+1)
			body = append(wrapper, body...)
		}
		stream = append(stream, qcdiag.Escape(body)...)
	}
	require.NoError(t, os.WriteFile(path, stream, 0o600))
}

func sameTimestamp(ts uint64) uint64 { return ts }

// scatV3FromEARFCN is the lowest EARFCN whose LTE RRC SCAT 2.1.2 sends as
// GSMTAP v3 by default; below it, v2 (whose ARFCN field has 14 bits).
const scatV3FromEARFCN = 16384

// gsmtapV2 hands next the LTE RRC messages as GSMTAP v2 carries them:
// without the PCI, which its header has no field for, and without the
// carrier when the client writes none.
type gsmtapV2 struct {
	next diag.RRCDecoder
	// v3From: messages on this EARFCN or above go as v3, which names the
	// cell (0: none do).
	v3From    uint32
	noCarrier bool
}

func (g gsmtapV2) Decode(msg diag.RRCMessage) ([]diag.Event, error) {
	if msg.RAT == diag.RATLTE && (g.v3From == 0 || msg.ARFCN < g.v3From) {
		msg.PCI, msg.PCIUnknown = 0, true
		if g.noCarrier {
			msg.ARFCN = 0
		}
	}
	return g.next.Decode(msg)
}

// qcsuperDLFTime is the time QCSuper 2.1.4's DLF reader gives a DIAG
// timestamp: 20 ms units from bit 20 on, right, plus the low 20 bits as a
// fraction of a second instead of a fraction of a 20 ms unit, so up to a
// second late, and out of order.
func qcsuperDLFTime(ts uint64) uint64 {
	unit := time.Duration(ts>>20) * 20 * time.Millisecond
	frac := time.Duration(float64(ts&0xFFFFF) / 0x100000 * float64(time.Second))
	return qcdiagtest.TimestampFromTime(qcdiag.TimeFromTimestamp(0).Add(unit + frac))
}

// scatNRVersions are the NR RRC OTA (0xB821) packet versions SCAT 2.1.2
// has a layout for (parsers/qualcomm/diagnrlogparser.py, parse_nr_rrc);
// it drops the others with "Unknown NR RRC OTA Message packet version".
var scatNRVersions = map[uint8]bool{9: true, 12: true, 14: true, 17: true, 19: true, 20: true, 23: true, 24: true, 25: true, 26: true, 28: true}

// TestGSMTAPClients replays every shared DIAG capture through the real
// GSMTAP clients and compares the events m2hod gets from them with those
// of its own DIAG reader (qmdl:): reports, commands, completions and
// failures within 1%, or the difference explained by named limitations
// of the client. Each limitation is modelled by rewriting the capture the
// way the client reads it and decoding that with qmdl:, and the clients'
// output must match the model:
//
//   - SCAT 2.1.2 drops NR RRC OTA packets of versions it has no layout
//     for (version 8 of Xiaomi Mi 10-class modems), and says so.
//   - SCAT drops a frame whose CRC fails; when a flag byte was lost, such
//     a frame ends with a whole frame, which qmdl: recovers.
//   - QCSuper 2.1.4 strips the multi-radio wrapper, so the subscriptions
//     of a multi-SIM modem share one RRC state.
//   - QCSuper's DLF reader (its file input) misreads the low bits of DIAG
//     timestamps: times up to a second late (qcsuperDLFTime), which
//     splits the two copies of an EN-DC SCG reconfiguration apart.
//   - Both write LTE RRC as GSMTAP v2, SCAT below EARFCN 16384 unless run
//     with -3, QCSuper always and without the carrier: v2 has no field
//     for the PCI (gsmtapV2), so a reconfiguration complete from another
//     cell does not show, and a handover whose command the capture lacks
//     does not complete.
//
// SCAT is read as pcap files (by default and with -3, GSMTAP v3 for
// everything) and live over UDP into gsmtap://, with its second
// subscription on 127.0.0.2.
func TestGSMTAPClients(t *testing.T) {
	dir := shareddata.DataDir(t, "diag")
	scat := gsmtapClient(t, "scat")
	qcsuper := gsmtapClient(t, "qcsuper")
	captures, err := filepath.Glob(filepath.Join(dir, "*.mi2log"))
	require.NoError(t, err)
	require.NotEmpty(t, captures)
	tmp := t.TempDir()
	packetsOf := map[string][]capturePacket{}
	directOf := map[string]eventCounts{}
	for _, path := range captures {
		packetsOf[path] = readPackets(t, path)
		directOf[path] = decodeFile(t, "qmdl:"+path, rrc.NewSubscriptions(quiet, rrc.FollowAuto))
	}
	for _, path := range captures {
		name, packets, direct := filepath.Base(path), packetsOf[path], directOf[path]
		t.Run("scat/"+name, func(t *testing.T) {
			scatReads := func(p capturePacket) bool {
				return !p.recovered && (p.Code != qcdiag.CodeNRRRCOTA || scatNRVersions[p.Version])
			}
			var limits []string
			var droppedNR map[uint8]int
			recovered := 0
			for _, p := range packets {
				switch {
				case p.recovered:
					recovered++
				case !scatReads(p):
					if droppedNR == nil {
						droppedNR = map[uint8]int{}
					}
					droppedNR[p.Version]++
				}
			}
			if droppedNR != nil {
				limits = append(limits, fmt.Sprintf("NR RRC OTA versions it lacks %v", droppedNR))
			}
			if recovered > 0 {
				limits = append(limits, fmt.Sprintf("%d frames recovered after a lost flag", recovered))
			}
			want, read := direct, "qmdl:"+path
			if len(limits) > 0 {
				model := filepath.Join(tmp, name+".scat-model.qmdl")
				writeQMDL(t, model, packets, scatReads, false, sameTimestamp)
				read = "qmdl:" + model
				want = decodeFile(t, read, rrc.NewSubscriptions(quiet, rrc.FollowAuto))
			}
			wantV2 := decodeFile(t, read, gsmtapV2{next: rrc.NewSubscriptions(quiet, rrc.FollowAuto), v3From: scatV3FromEARFCN})

			// SCAT's -P sets the port of its pcap files too: other runs,
			// at the same time, write the pcap files with the GSMTAP port,
			// and send their datagrams where nothing listens. One is as
			// SCAT runs by default (LTE as GSMTAP v3 from EARFCN 16384
			// only), one with -3 (every RAT as v3).
			pcap, pcapV3 := filepath.Join(tmp, name+".scat.pcap"), filepath.Join(tmp, name+".scat-v3.pcap")
			pcapRuns := make(chan error, 1)
			go func() {
				var errs []error
				for _, args := range [][]string{{"-F", pcap}, {"-3", "-F", pcapV3}} {
					args = append([]string{"-t", "qc", "-d", path, "-H", "127.0.0.253"}, args...)
					if out, err := exec.Command(scat, args...).CombinedOutput(); err != nil {
						errs = append(errs, fmt.Errorf("scat %v: %w: %s", args, err, lastLines(out)))
					}
				}
				pcapRuns <- errors.Join(errs...)
			}()
			viaUDP, out := scatLive(t, scat, path)
			require.NoError(t, <-pcapRuns)
			if droppedNR != nil {
				assert.Contains(t, out, "Unknown NR RRC OTA Message packet version", "SCAT names the NR RRC it drops")
			}
			if recovered > 0 {
				assert.Contains(t, out, "CRC mismatch", "SCAT names the frames it drops")
			}
			viaPcap := decodeFile(t, "pcap:"+pcap, rrc.NewSubscriptions(quiet, rrc.FollowAuto))
			viaPcapV3 := decodeFile(t, "pcap:"+pcapV3, rrc.NewSubscriptions(quiet, rrc.FollowAuto))
			t.Logf("qmdl: %v; SCAT pcap: %v; SCAT -3 pcap: %v; SCAT UDP: %v", direct, viaPcap, viaPcapV3, viaUDP)
			what := "SCAT"
			if len(limits) > 0 {
				t.Logf("SCAT drops %s; qmdl: without them: %v", strings.Join(limits, ", "), want)
				what = "SCAT (qmdl: without what SCAT drops)"
			}
			t.Logf("qmdl: as SCAT sends it by default (LTE below EARFCN %d without its PCI): %v", scatV3FromEARFCN, wantV2)
			assertClose(t, wantV2, viaPcap, what+" pcap")
			assertClose(t, want, viaPcapV3, what+" -3 pcap")
			assertClose(t, wantV2, viaUDP, what+" UDP")
		})
	}
	// QCSuper idles for seconds on every run: two at a time.
	t.Run("qcsuper", func(t *testing.T) {
		for _, path := range captures {
			name, packets, direct := filepath.Base(path), packetsOf[path], directOf[path]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				dlf := filepath.Join(tmp, name+".dlf")
				writeDLF(t, dlf, packets)
				pcap := filepath.Join(tmp, name+".qcsuper.pcap")
				cmd := exec.Command(qcsuper, "--dlf-read", dlf, "--pcap-dump", pcap)
				cmd.Env = append(os.Environ(), "DONT_INSTALL_WIRESHARK_PLUGIN=1")
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, "%s", lastLines(out))
				got := decodeFile(t, "pcap:"+pcap, rrc.NewSubscriptions(quiet, rrc.FollowAuto))

				model := filepath.Join(tmp, name+".qcsuper-model.qmdl")
				writeQMDL(t, model, packets, func(capturePacket) bool { return true }, true, qcsuperDLFTime)
				want := decodeFile(t, "qmdl:"+model, gsmtapV2{next: rrc.NewSubscriptions(quiet, rrc.FollowAuto), noCarrier: true})
				t.Logf("qmdl: %v; QCSuper pcap: %v; qmdl: with one RRC state for all subscriptions, QCSuper's DLF times and LTE without cell: %v", direct, got, want)
				assertClose(t, want, got, "QCSuper (qmdl: as QCSuper reads it)")
			})
		}
	})
}

// writeDLF writes packets as a DLF file, QCSuper's file input: each log
// packet's inner length, code and timestamp (<HHQ) and its payload.
func writeDLF(t *testing.T, path string, packets []capturePacket) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	w := bufio.NewWriter(f)
	for _, p := range packets {
		b := binary.LittleEndian.AppendUint16(nil, uint16(12+len(p.Payload)))
		b = binary.LittleEndian.AppendUint16(b, p.Code)
		b = binary.LittleEndian.AppendUint64(b, p.Timestamp)
		_, err := w.Write(append(b, p.Payload...))
		require.NoError(t, err)
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())
}

// scatLive runs SCAT on a capture, sending to a gsmtap:// input, and
// counts the events of the input once SCAT has exited and the input has
// gone quiet. It returns SCAT's output too.
func scatLive(t *testing.T, scat, capture string) (eventCounts, string) {
	t.Helper()
	subs := rrc.NewSubscriptions(quiet, rrc.FollowAuto)
	src, err := diagsrc.Open("gsmtap://127.0.0.1:0", diagsrc.Options{RRC: subs, Logger: quiet})
	require.NoError(t, err)
	addrs, _ := src.(*diagsrc.GSMTAPSource).Addrs()
	port := strconv.Itoa(addrs[0].(*net.UDPAddr).Port)

	ctx, cancel := context.WithCancel(t.Context())
	events := make(chan diag.Event, 1<<14)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, events) }()
	out, err := exec.Command(scat, "-t", "qc", "-d", capture, "-H", "127.0.0.1", "-P", port).CombinedOutput()
	if err != nil {
		cancel()
		<-done
		require.NoError(t, err, "%s", lastLines(out))
	}
	// The datagrams SCAT sent are queued in the sockets: wait until the
	// input has handled them all.
	messages := func() uint64 {
		var n uint64
		for _, s := range subs.Status().Seen {
			n += s.Messages
		}
		return n
	}
	for last := uint64(math.MaxUint64); ; {
		time.Sleep(200 * time.Millisecond)
		n := messages()
		if n == last {
			break
		}
		last = n
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	close(events)
	var c eventCounts
	for ev := range events {
		c.add(ev)
	}
	return c, string(out)
}

func lastLines(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}
