package diag_test

import (
	"context"
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

func TestUDPSource(t *testing.T) {
	stats := &diag.Stats{}
	src, err := diag.ListenUDP("udp://127.0.0.1:0", "127.0.0.1:0", stats)
	require.NoError(t, err)
	conn, err := net.Dial("udp", src.Addr().String())
	require.NoError(t, err)
	defer conn.Close()

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
