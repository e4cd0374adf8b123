package diag_test

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/internal/shareddata"
	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/diag/rrc"
)

// realCaptureURIs names every shared capture as a decode input; the test
// skips when the shared data is absent.
func realCaptureURIs(t *testing.T) []string {
	t.Helper()
	var uris []string
	for _, in := range []struct{ sub, pattern, scheme string }{
		{"diag", "*.mi2log", "qmdl:"},
		{"gsmtap", "*.pcap*", "pcap:"},
	} {
		dir := shareddata.DataDir(t, in.sub)
		paths, err := filepath.Glob(filepath.Join(dir, in.pattern))
		require.NoError(t, err)
		for _, p := range paths {
			uris = append(uris, in.scheme+p)
		}
	}
	require.NotEmpty(t, uris, "no captures in the shared data")
	return uris
}

func captureOptions() diagsrc.Options {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	return diagsrc.Options{RRC: rrc.NewDecoder(quiet), Logger: quiet}
}

// decodeEvents returns the events the decoders make of a capture, as the
// daemon would receive them.
func decodeEvents(t *testing.T, uri string) []diag.Event {
	t.Helper()
	src, err := diagsrc.Open(uri, captureOptions())
	require.NoError(t, err)
	ch := make(chan diag.Event, 64)
	done := make(chan error, 1)
	go func() {
		done <- src.Run(t.Context(), ch)
		close(ch)
	}()
	var events []diag.Event
	for ev := range ch {
		events = append(events, ev)
	}
	require.NoError(t, <-done)
	return events
}

// normalized is ev as ParseJSON returns it: cells with their band, time in
// UTC without a monotonic reading.
func normalized(ev diag.Event) diag.Event {
	ev.Serving, ev.Neighbor = ev.Serving.Normalized(), ev.Neighbor.Normalized()
	ev.Source, ev.Target, ev.Cell = ev.Source.Normalized(), ev.Target.Normalized(), ev.Cell.Normalized()
	if !ev.Time.IsZero() {
		ev.Time = ev.Time.UTC().Round(0)
	}
	return ev
}

// Every event decoded from the real captures is written by MarshalJSON
// (what `m2hod decode` prints) and read back by ParseJSON (the jsonl: and
// udp:// inputs) as the same event, so a decode → jsonl replay feeds the
// daemon what the native input does.
func TestDecodedEventsRoundTrip(t *testing.T) {
	total := 0
	for _, uri := range realCaptureURIs(t) {
		t.Run(filepath.Base(uri), func(t *testing.T) {
			events := decodeEvents(t, uri)
			noServing, noNeighbor := 0, 0
			for i, ev := range events {
				line, err := diag.MarshalJSON(ev)
				require.NoError(t, err, "event %d: %+v", i, ev)
				back, err := diag.ParseJSON(line)
				require.NoError(t, err, "event %d rejected: %s", i, line)
				want := normalized(ev)
				assert.True(t, want.Time.Equal(back.Time), "event %d: time %v, read back %v", i, want.Time, back.Time)
				back.Time = want.Time
				assert.Equal(t, want, back, "event %d: %s", i, line)
				again, err := diag.MarshalJSON(back)
				require.NoError(t, err)
				assert.Equal(t, string(line), string(again), "event %d re-encoded differently", i)
				if ev.Type == diag.TypeMeasReport {
					if ev.Serving.IsZero() {
						noServing++
					}
					if ev.Neighbor.IsZero() {
						noNeighbor++
					}
				}
			}
			total += len(events)
			t.Logf("%d events; meas_reports without serving cell %d, without neighbour %d", len(events), noServing, noNeighbor)
		})
	}
	require.Positive(t, total, "the shared captures decoded to no events at all")
}

// The decode command's output, line by line, is accepted by ParseJSON.
func TestDecodeOutputParsesBack(t *testing.T) {
	for _, uri := range realCaptureURIs(t) {
		t.Run(filepath.Base(uri), func(t *testing.T) {
			var out bytes.Buffer
			require.NoError(t, diagsrc.Decode(t.Context(), &out, uri, false, captureOptions()))
			sc := bufio.NewScanner(&out)
			lines := 0
			for sc.Scan() {
				lines++
				_, err := diag.ParseJSON(sc.Bytes())
				assert.NoError(t, err, "line %d: %s", lines, sc.Text())
			}
			require.NoError(t, sc.Err())
			assert.Len(t, decodeEvents(t, uri), lines, "decode printed a line per event")
		})
	}
}
