package diag_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
)

const (
	failureLine  = `{"v":1,"type":"ho_failure","cause":"rlf"}`
	completeLine = `{"v":1,"type":"ho_complete","t":"2024-03-01T12:00:00Z"}`
)

func errorsOf(s *diag.Stats) map[string]uint64 {
	_, errs := s.Snapshot()
	m := map[string]uint64{}
	for _, c := range errs {
		m[c.Label] = c.Value
	}
	return m
}

// collect runs src until it has delivered n events or a second passed.
func collect(t *testing.T, ctx context.Context, src diag.Source, n int) ([]diag.Event, error) {
	t.Helper()
	out := make(chan diag.Event)
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { done <- src.Run(ctx, out) }()
	var events []diag.Event
	timeout := time.After(5 * time.Second)
	for len(events) < n {
		select {
		case ev := <-out:
			events = append(events, ev)
		case err := <-done:
			return events, err
		case <-timeout:
			return events, context.DeadlineExceeded
		}
	}
	cancel()
	return events, <-done
}

// listenUDPDialed listens on a loopback port and dials it; the connection
// closes with the test.
func listenUDPDialed(tb testing.TB, stats *diag.Stats) (*diag.UDPSource, net.Conn) {
	tb.Helper()
	src, err := diag.ListenUDP("udp://127.0.0.1:0", "127.0.0.1:0", stats)
	require.NoError(tb, err)
	conn, err := net.Dial("udp", src.Addr().String())
	require.NoError(tb, err)
	tb.Cleanup(func() { conn.Close() })
	return src, conn
}

func TestUDPSource(t *testing.T) {
	stats := &diag.Stats{}
	src, conn := listenUDPDialed(t, stats)

	oversize := strings.Repeat(" ", diag.MaxDatagram+10)
	datagrams := []string{
		failureLine,
		"garbage",
		completeLine + "\n\n" + failureLine + "\n{\"v\":1,\"type\":\"nope\"}\n",
		oversize,
		failureLine,
	}
	before := time.Now()
	// Sent before Run: the socket is bound by ListenUDP and queues them.
	for _, d := range datagrams {
		_, err := conn.Write([]byte(d))
		require.NoError(t, err)
	}
	events, err := collect(t, t.Context(), src, 4)
	assert.ErrorIs(t, err, context.Canceled)
	require.Len(t, events, 4)
	assert.Equal(t, []diag.Type{diag.TypeHOFailure, diag.TypeHOComplete, diag.TypeHOFailure, diag.TypeHOFailure},
		[]diag.Type{events[0].Type, events[1].Type, events[2].Type, events[3].Type})
	assert.Equal(t, time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC), events[1].Time, "modem time kept")
	assert.False(t, events[0].Time.Before(before), "receive time used when t is absent")
	assert.Equal(t, map[string]uint64{diag.ReasonJSONSyntax: 1, diag.ReasonJSONType: 1, diag.ReasonUDPTruncated: 1}, errorsOf(stats))
	evs, _ := stats.Snapshot()
	assert.Equal(t, []diag.Counter{{Label: "ho_complete", Value: 1}, {Label: "ho_failure", Value: 3}}, evs)
}

// TestUDPSourceBatches: RunBatches delivers the events of a datagram
// together, in order, and counts what Run counts; a datagram without an
// event delivers nothing.
func TestUDPSourceBatches(t *testing.T) {
	stats := &diag.Stats{}
	src, conn := listenUDPDialed(t, stats)
	for _, d := range []string{
		failureLine,
		"garbage",
		completeLine + "\n\n" + failureLine + "\n{\"v\":1,\"type\":\"nope\"}\n",
		strings.Repeat(" ", diag.MaxDatagram+10),
		failureLine,
	} {
		_, err := conn.Write([]byte(d))
		require.NoError(t, err)
	}
	out := make(chan []diag.Event)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- src.RunBatches(ctx, out) }()
	var types [][]diag.Type
	for range 3 {
		select {
		case evs := <-out:
			var batch []diag.Type
			for _, ev := range evs {
				batch = append(batch, ev.Type)
			}
			types = append(types, batch)
		case <-time.After(5 * time.Second):
			require.FailNow(t, "no batch")
		}
	}
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	assert.Equal(t, [][]diag.Type{{diag.TypeHOFailure}, {diag.TypeHOComplete, diag.TypeHOFailure}, {diag.TypeHOFailure}}, types)
	assert.Equal(t, map[string]uint64{diag.ReasonJSONSyntax: 1, diag.ReasonJSONType: 1, diag.ReasonUDPTruncated: 1}, errorsOf(stats))
	evs, _ := stats.Snapshot()
	assert.Equal(t, []diag.Counter{{Label: "ho_complete", Value: 1}, {Label: "ho_failure", Value: 3}}, evs)
}

// TestUDPSourceBatchesReused: a slice RunBatches delivered keeps its
// events until the receiver receives again, however far the source reads
// ahead meanwhile.
func TestUDPSourceBatchesReused(t *testing.T) {
	src, conn := listenUDPDialed(t, nil)
	const datagrams = 20
	at := func(i int) time.Time { return time.Date(2024, 3, 1, 12, 0, i, 0, time.UTC) }
	for i := range datagrams {
		line := fmt.Sprintf(`{"v":1,"type":"ho_complete","t":%q}`, at(i).Format(time.RFC3339))
		_, err := conn.Write([]byte(line + "\n" + line))
		require.NoError(t, err)
	}
	out := make(chan []diag.Event, 2)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- src.RunBatches(ctx, out) }()
	for i := range datagrams {
		var evs []diag.Event
		select {
		case evs = <-out:
		case <-time.After(5 * time.Second):
			require.FailNow(t, "no batch")
		}
		// The source fills the queue and the next slice meanwhile.
		time.Sleep(5 * time.Millisecond)
		require.Len(t, evs, 2)
		assert.Equal(t, at(i), evs[0].Time)
		assert.Equal(t, at(i), evs[1].Time)
	}
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

func TestUDPSourceBusyPort(t *testing.T) {
	first, err := diag.ListenUDP("udp://a", "127.0.0.1:0", nil)
	require.NoError(t, err)
	defer first.Close()
	_, err = diag.ListenUDP("udp://b", first.Addr().String(), nil)
	assert.Error(t, err)
}

func TestJSONLSource(t *testing.T) {
	tests := []struct {
		name   string
		input  string
		types  []diag.Type
		errors map[string]uint64
	}{
		{name: "good lines", input: failureLine + "\n" + completeLine + "\n",
			types: []diag.Type{diag.TypeHOFailure, diag.TypeHOComplete}, errors: map[string]uint64{}},
		{name: "last line without newline, CRLF, blanks", input: failureLine + "\r\n\n  \n" + completeLine,
			types: []diag.Type{diag.TypeHOFailure, diag.TypeHOComplete}, errors: map[string]uint64{}},
		{name: "bad lines skipped", input: "nope\n" + failureLine + "\n{\"v\":3}\n",
			types: []diag.Type{diag.TypeHOFailure}, errors: map[string]uint64{diag.ReasonJSONSyntax: 1, diag.ReasonJSONVersion: 1}},
		{name: "over-long line skipped", input: `{"v":1,"pad":"` + strings.Repeat("x", 2*diag.MaxLine) + "\"}\n" + failureLine + "\n",
			types: []diag.Type{diag.TypeHOFailure}, errors: map[string]uint64{diag.ReasonLineTooLong: 1}},
		{name: "empty", input: "", errors: map[string]uint64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stats := &diag.Stats{}
			src := diag.NewJSONLSource("jsonl:test", strings.NewReader(tc.input), stats)
			assert.Equal(t, "jsonl:test", src.Name())
			out := make(chan diag.Event, 16)
			require.NoError(t, src.Run(t.Context(), out))
			close(out)
			var types []diag.Type
			for ev := range out {
				types = append(types, ev.Type)
			}
			assert.Equal(t, tc.types, types)
			assert.Equal(t, tc.errors, errorsOf(stats))
		})
	}
}

// blockingReader never returns, like stdin with nothing typed.
type blockingReader struct{ unblock chan struct{} }

func (b blockingReader) Read([]byte) (int, error) {
	<-b.unblock
	return 0, context.Canceled
}

func TestJSONLSourceCancelWhileBlocked(t *testing.T) {
	r := blockingReader{unblock: make(chan struct{})}
	defer close(r.unblock)
	src := diag.NewJSONLSource("jsonl:-", r, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := src.Run(ctx, make(chan diag.Event))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}
