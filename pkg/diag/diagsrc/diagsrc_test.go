package diagsrc_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/shareddata"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag/qcdiagtest"
)

// countingDecoder stands in for the RRC decoder: one ho_complete event
// per message, naming the message's cell, and a tally per rat/channel.
type countingDecoder struct {
	mu       sync.Mutex
	channels map[string]int
}

func (d *countingDecoder) Decode(msg diag.RRCMessage) ([]diag.Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.channels == nil {
		d.channels = map[string]int{}
	}
	d.channels[fmt.Sprintf("%s %s", msg.RAT, msg.Channel)]++
	return []diag.Event{{Type: diag.TypeHOComplete, Cell: diag.Cell{RAT: msg.RAT, PCI: msg.PCI, ARFCN: msg.ARFCN}.Normalized()}}, nil
}

func (d *countingDecoder) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, v := range d.channels {
		n += v
	}
	return n
}

func errorsOf(s *diag.Stats) map[string]uint64 {
	_, errs := s.Snapshot()
	m := map[string]uint64{}
	for _, c := range errs {
		m[c.Label] = c.Value
	}
	return m
}

// runAll runs a file source to its end and returns its events.
func runAll(t *testing.T, src diag.Source) []diag.Event {
	t.Helper()
	out := make(chan diag.Event, 1<<14)
	require.NoError(t, src.Run(t.Context(), out))
	close(out)
	var events []diag.Event
	for ev := range out {
		events = append(events, ev)
	}
	return events
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "capture.qmdl")
	require.NoError(t, os.WriteFile(existing, nil, 0o600))
	tests := []struct {
		uri     string
		wantErr string
	}{
		{uri: "udp://127.0.0.1:0"},
		{uri: "udp://[::1]:0"},
		{uri: "jsonl:-"},
		{uri: "jsonl:" + filepath.Join(dir, "later.jsonl")},
		{uri: "qmdl:" + existing},
		{uri: "serial:/dev/ttyUSB-none"},
		{uri: "gsmtap://127.0.0.1:0"},
		{uri: "pcap:" + existing},
		{uri: "udp:127.0.0.1:5599", wantErr: "want udp://HOST:PORT"},
		{uri: "udp://127.0.0.1:99999", wantErr: "bad port"},
		{uri: "qmdl:" + filepath.Join(dir, "missing"), wantErr: "no such file"},
		{uri: "pcap:" + filepath.Join(dir, "missing"), wantErr: "no such file"},
		{uri: "ftp://x", wantErr: "unknown scheme"},
		{uri: "nothing", wantErr: "want SCHEME"},
		{uri: "qmdl:", wantErr: "want SCHEME"},
	}
	for _, tc := range tests {
		t.Run(tc.uri, func(t *testing.T) {
			src, err := diagsrc.Open(tc.uri, diagsrc.Options{})
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.uri, src.Name())
			if c, ok := src.(interface{ Close() error }); ok {
				assert.NoError(t, c.Close())
			}
		})
	}
}

func TestDefaultAddressesAreLoopback(t *testing.T) {
	// Only the default (loopback) host is checked; the port may be taken
	// by a daemon on this machine, which is fine for this test.
	for _, uri := range []string{"udp://", "udp://:0", "gsmtap://:0"} {
		src, err := diagsrc.Open(uri, diagsrc.Options{})
		if err != nil {
			assert.Contains(t, err.Error(), "address already in use", uri)
			continue
		}
		switch s := src.(type) {
		case *diag.UDPSource:
			assert.Equal(t, "127.0.0.1", s.Addr().(*net.UDPAddr).IP.String(), uri)
			s.Close()
		case *diagsrc.GSMTAPSource:
			g, q := s.Addrs()
			require.Len(t, g, 2, "both SIM subscriptions' addresses")
			assert.Equal(t, "127.0.0.1", g[0].(*net.UDPAddr).IP.String(), uri)
			assert.Equal(t, "127.0.0.2", g[1].(*net.UDPAddr).IP.String(), "second subscription, as SCAT addresses it")
			assert.Equal(t, g[0].(*net.UDPAddr).Port, g[1].(*net.UDPAddr).Port)
			assert.Equal(t, "127.0.0.1", q.(*net.UDPAddr).IP.String(), uri)
			s.Close()
		}
	}
}

func TestQMDLSourceRealCaptures(t *testing.T) {
	dir := shareddata.DataDir(t, "diag")
	tests := []struct {
		file     string
		channels map[string]int
	}{
		// Channel counts as in the qcdiag real-capture test (an independent
		// Python reading of the same files).
		{file: "mobility_sample.mi2log", channels: map[string]int{"lte BCCH-DL-SCH": 1879, "lte DL-CCCH": 70,
			"lte DL-DCCH": 1092, "lte PCCH": 1010, "lte UL-CCCH": 86, "lte UL-DCCH": 2341}},
		{file: "20201115_181637_Xiaomi-Mi10_46000.mi2log", channels: map[string]int{"nr BCCH-BCH": 1,
			"nr RRCReconfiguration": 2, "nr RRCReconfigurationComplete": 2, "nr UL-DCCH": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			dec := &countingDecoder{}
			stats := &diag.Stats{}
			src, err := diagsrc.Open("qmdl:"+filepath.Join(dir, tc.file), diagsrc.Options{Stats: stats, RRC: dec})
			require.NoError(t, err)
			events := runAll(t, src)
			assert.Equal(t, tc.channels, dec.channels)
			assert.Len(t, events, dec.total())
			for _, ev := range events {
				assert.False(t, ev.Time.IsZero(), "modem time set")
			}
			evs, _ := stats.Snapshot()
			assert.Equal(t, []diag.Counter{{Label: string(diag.TypeHOComplete), Value: uint64(len(events))}}, evs)
			c := src.(*diagsrc.QMDLSource).Counters()
			assert.Zero(t, c.CRCErrors)
			assert.NotZero(t, c.LogPackets)
		})
	}
}

func TestQMDLSourceWithoutDecoder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.qmdl")
	require.NoError(t, os.WriteFile(path, syntheticStream(t, 3, 0), 0o600))
	src, err := diagsrc.Open("qmdl:"+path, diagsrc.Options{})
	require.NoError(t, err)
	assert.Empty(t, runAll(t, src))
}

// syntheticStream is n LTE RRC OTA v8 UL-DCCH packets, step apart.
func syntheticStream(t *testing.T, n int, step time.Duration) []byte {
	t.Helper()
	start := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	var out []byte
	for i := range n {
		pdu := []byte{0x08, 0x10, byte(i)}
		payload := []byte{8, 14, 0x50, 1, 7, 0, 0x52, 0x03, 0, 0, 0, 0, 8, 0, 0, 0, 0, byte(len(pdu)), 0}
		out = append(out, qcdiag.Escape(qcdiagtest.EncodeLogPacket(qcdiag.CodeLTERRCOTA, start.Add(time.Duration(i)*step), append(payload, pdu...)))...)
	}
	return out
}

func TestQMDLSourceRealtime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "paced.qmdl")
	require.NoError(t, os.WriteFile(path, syntheticStream(t, 4, 40*time.Millisecond), 0o600))
	tests := []struct {
		realtime bool
		atLeast  time.Duration
	}{
		{realtime: true, atLeast: 120 * time.Millisecond},
		{realtime: false},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("realtime=%v", tc.realtime), func(t *testing.T) {
			dec := &countingDecoder{}
			src, err := diagsrc.Open("qmdl:"+path, diagsrc.Options{RRC: dec, Realtime: tc.realtime})
			require.NoError(t, err)
			start := time.Now()
			events := runAll(t, src)
			elapsed := time.Since(start)
			assert.Len(t, events, 4)
			assert.GreaterOrEqual(t, elapsed, tc.atLeast)
			assert.Equal(t, map[string]int{"lte UL-DCCH": 4}, dec.channels)
			assert.Equal(t, uint16(7), events[0].Cell.PCI)
			assert.Equal(t, uint32(850), events[0].Cell.ARFCN)
		})
	}
}

func TestQMDLSourceCancel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slow.qmdl")
	require.NoError(t, os.WriteFile(path, syntheticStream(t, 3, time.Hour), 0o600))
	src, err := diagsrc.Open("qmdl:"+path, diagsrc.Options{RRC: &countingDecoder{}, Realtime: true})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	err = src.Run(ctx, make(chan diag.Event, 10))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestPcapSource(t *testing.T) {
	dir := shareddata.DataDir(t, "gsmtap")
	dec := &countingDecoder{}
	stats := &diag.Stats{}
	src, err := diagsrc.Open("pcap:"+filepath.Join(dir, "tram_ride_lte_nr.pcapng"), diagsrc.Options{Stats: stats, RRC: dec})
	require.NoError(t, err)
	events := runAll(t, src)
	// 1706 LTE RRC (GSMTAP) and 14 NR RRC (QCSuper) messages, as counted
	// independently in the gsmtap package's test; 3 NR PDU numbers unknown.
	assert.Len(t, events, 1720)
	assert.Equal(t, 14, dec.channels["nr BCCH-BCH"]+dec.channels["nr DL-DCCH"]+dec.channels["nr BCCH-DL-SCH"]+
		dec.channels["nr UL-CCCH"]+dec.channels["nr DL-CCCH"]+dec.channels["nr UL-DCCH"])
	assert.Equal(t, map[string]uint64{qcdiag.ReasonUnknownRRCPDU: 3}, errorsOf(stats))
	assert.Greater(t, events[0].Time.Year(), 2015, "capture time used")
}

func TestGSMTAPSource(t *testing.T) {
	dec := &countingDecoder{}
	stats := &diag.Stats{}
	src, err := diagsrc.Open("gsmtap://127.0.0.1:0", diagsrc.Options{Stats: stats, RRC: dec})
	require.NoError(t, err)
	gAddrs, qAddr := src.(*diagsrc.GSMTAPSource).Addrs()
	gAddr := gAddrs[0]
	send := func(addr net.Addr, payload []byte) {
		c, err := net.Dial("udp", addr.String())
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write(payload)
		require.NoError(t, err)
	}
	// GSMTAP v2 LTE UL-DCCH; a garbage datagram; QCSuper NR MIB.
	send(gAddr, []byte{2, 4, 0x0D, 0, 0x40, 0, 0, 0, 0, 0, 0, 1, 3, 0, 0, 0, 0x08, 0x10})
	send(gAddr, []byte{9, 9, 9})
	send(qAddr, []byte{0x0c, 0, 0, 0, 0x0f, 0x90, 0xff, 0xb1, 0x01, 0xc0, 0xc6, 0x09, 0, 0, 0, 0x08, 0x01, 0, 0, 0, 0, 0x04, 0, 0, 0, 0, 0})

	out := make(chan diag.Event, 4)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, out) }()
	var got []diag.Event
	for len(got) < 2 {
		select {
		case ev := <-out:
			got = append(got, ev)
		case <-time.After(5 * time.Second):
			require.FailNow(t, "events not received", "got %d", len(got))
		}
	}
	// The NR datagram comes through its own socket, and may be read
	// before the garbage sent to the GSMTAP socket ahead of it.
	assert.Eventually(t, func() bool { return errorsOf(stats)["gsmtap_version"] == 1 }, 5*time.Second, 5*time.Millisecond)
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	assert.Equal(t, map[string]int{"lte UL-DCCH": 1, "nr BCCH-BCH": 1}, dec.channels)
	assert.Equal(t, map[string]uint64{"gsmtap_version": 1}, errorsOf(stats))
	for _, ev := range got {
		assert.WithinDuration(t, time.Now(), ev.Time, time.Minute, "receive time used")
	}
}

func TestDecode(t *testing.T) {
	dir := t.TempDir()
	qmdl := filepath.Join(dir, "s.qmdl")
	stream := append(syntheticStream(t, 2, time.Millisecond), qcdiag.Escape(qcdiagtest.EncodeLogPacket(0xB0C1, time.Unix(1.7e9, 0), []byte{1, 2, 3}))...)
	stream = append(stream, qcdiag.Escape(qcdiagtest.EncodeLogPacket(qcdiag.CodeLTERRCOTA, time.Unix(1.7e9, 0), []byte{99, 1}))...)
	require.NoError(t, os.WriteFile(qmdl, stream, 0o600))
	jsonl := filepath.Join(dir, "e.jsonl")
	require.NoError(t, os.WriteFile(jsonl, []byte(`{"v":1,"type":"ho_failure","cause":"hof","t":"2024-01-02T03:04:05.5Z"}`+"\nbad\n"), 0o600))

	tests := []struct {
		name    string
		uri     string
		raw     bool
		rrc     diag.RRCDecoder
		want    []string
		wantErr string
	}{
		{name: "raw listing without decoder", uri: "qmdl:" + qmdl, raw: true, want: []string{
			"2024-01-02T03:04:05.000000000Z 0xB0C0 v8 len=22 decoded=yes lte UL-DCCH pci=7 arfcn=850 pdu_len=3 events=0",
			"2024-01-02T03:04:05.001000000Z 0xB0C0 v8 len=22 decoded=yes lte UL-DCCH pci=7 arfcn=850 pdu_len=3 events=0",
			"2023-11-14T22:13:20.000000000Z 0xB0C1 - len=3 decoded=no unknown_code",
			"2023-11-14T22:13:20.000000000Z 0xB0C0 v99 len=2 decoded=no unknown_log_version",
		}},
		{name: "raw listing with decoder", uri: "qmdl:" + qmdl, raw: true, rrc: &countingDecoder{}, want: []string{
			"2024-01-02T03:04:05.000000000Z 0xB0C0 v8 len=22 decoded=yes lte UL-DCCH pci=7 arfcn=850 pdu_len=3 events=1",
			"2024-01-02T03:04:05.001000000Z 0xB0C0 v8 len=22 decoded=yes lte UL-DCCH pci=7 arfcn=850 pdu_len=3 events=1",
			"2023-11-14T22:13:20.000000000Z 0xB0C1 - len=3 decoded=no unknown_code",
			"2023-11-14T22:13:20.000000000Z 0xB0C0 v99 len=2 decoded=no unknown_log_version",
		}},
		{name: "events with modem time", uri: "qmdl:" + qmdl, rrc: &countingDecoder{}, want: []string{
			`{"v":1,"type":"ho_complete","t":"2024-01-02T03:04:05.000000000Z","cell":{"rat":"lte","band":"sub6","pci":7,"arfcn":850}}`,
			`{"v":1,"type":"ho_complete","t":"2024-01-02T03:04:05.001000000Z","cell":{"rat":"lte","band":"sub6","pci":7,"arfcn":850}}`,
		}},
		{name: "no decoder, no events", uri: "qmdl:" + qmdl},
		{name: "json lines pass through", uri: "jsonl:" + jsonl, want: []string{
			`{"v":1,"type":"ho_failure","t":"2024-01-02T03:04:05.500000000Z","cause":"hof"}`,
		}},
		{name: "raw needs diag input", uri: "jsonl:" + jsonl, raw: true, wantErr: "needs a DIAG or GSMTAP input"},
		{name: "missing file", uri: "jsonl:" + filepath.Join(dir, "none"), wantErr: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := diagsrc.Decode(t.Context(), &out, tc.uri, tc.raw, diagsrc.Options{RRC: tc.rrc})
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			var lines []string
			if s := strings.TrimSuffix(out.String(), "\n"); s != "" {
				lines = strings.Split(s, "\n")
			}
			assert.Equal(t, tc.want, lines)
		})
	}
}

func TestDecodeRawRealCapture(t *testing.T) {
	dir := shareddata.DataDir(t, "diag")
	var out bytes.Buffer
	require.NoError(t, diagsrc.Decode(t.Context(), &out, "qmdl:"+filepath.Join(dir, "tmobile.mi2log"), true, diagsrc.Options{}))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	// 2167 log packets (all frames of the file are log packets).
	assert.Len(t, lines, 2167)
	assert.Equal(t, 109, strings.Count(out.String(), " 0xB0C0 v9 "))
	assert.Equal(t, 141, strings.Count(out.String(), " 0xB063 - "))
	assert.True(t, strings.HasPrefix(lines[0], "2016-01-18T05:06:57."), lines[0])
}

func TestDecodeCancelledLiveInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	assert.NoError(t, diagsrc.Decode(ctx, &out, "udp://127.0.0.1:0", false, diagsrc.Options{}))
}

// BenchmarkQMDLReplay replays the largest shared capture through the qmdl:
// input (framing, RRC lifting, decoder calls) as fast as possible.
func BenchmarkQMDLReplay(b *testing.B) {
	dir := shareddata.DataDir(b, "diag")
	paths, err := filepath.Glob(filepath.Join(dir, "*.mi2log"))
	require.NoError(b, err)
	var largest string
	var size int64
	for _, p := range paths {
		fi, err := os.Stat(p)
		require.NoError(b, err)
		if fi.Size() > size {
			largest, size = p, fi.Size()
		}
	}
	src, err := diagsrc.Open("qmdl:"+largest, diagsrc.Options{RRC: &countingDecoder{}})
	require.NoError(b, err)
	b.SetBytes(size)
	for b.Loop() {
		out := make(chan diag.Event, 4096)
		if err := src.Run(b.Context(), out); err != nil {
			b.Fatal(err)
		}
	}
}
