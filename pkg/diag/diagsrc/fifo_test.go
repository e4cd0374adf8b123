package diagsrc_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/diag/gsmtap"
)

// promptly bounds how long Run may take to return after its context ends.
const promptly = 2 * time.Second

// fifoInput is a file input fed through a named pipe: data, written in
// one go, yields want events.
type fifoInput struct {
	scheme string
	data   []byte
	want   int
}

func fifoInputs(t *testing.T) []fifoInput {
	line := `{"v":1,"type":"ho_failure","cause":"hof","t":"2024-01-02T03:04:05.5Z"}` + "\n"
	return []fifoInput{
		{scheme: "jsonl", data: []byte(line + line), want: 2},
		{scheme: "qmdl", data: syntheticStream(t, 3, 0), want: 3},
		{scheme: "pcap", data: gsmtapCapture(t, 2), want: 2},
	}
}

// gsmtapCapture is a pcap file of n GSMTAP datagrams, each one LTE
// UL-DCCH message.
func gsmtapCapture(t *testing.T, n int) []byte {
	t.Helper()
	var file bytes.Buffer
	w := pcapgo.NewWriter(&file)
	require.NoError(t, w.WriteFileHeader(65535, layers.LinkTypeRaw))
	payload := []byte{2, 4, 0x0D, 0, 0x40, 0, 0, 0, 0, 0, 0, 1, 3, 0, 0, 0, 0x08, 0x10}
	for i := range n {
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IPv4(127, 0, 0, 1), DstIP: net.IPv4(127, 0, 0, 1)}
		udp := &layers.UDP{SrcPort: 40000, DstPort: gsmtap.Port}
		require.NoError(t, udp.SetNetworkLayerForChecksum(ip))
		buf := gopacket.NewSerializeBuffer()
		require.NoError(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
			ip, udp, gopacket.Payload(payload)))
		pkt := buf.Bytes()
		ci := gopacket.CaptureInfo{Timestamp: time.Date(2024, 1, 2, 3, 4, 5+i, 0, time.UTC), CaptureLength: len(pkt), Length: len(pkt)}
		require.NoError(t, w.WritePacket(ci, pkt))
	}
	return file.Bytes()
}

// makeFIFO creates a named pipe. At the end of the test, a Run still stuck
// in open(2), waiting for a writer, is released so that it cannot outlive
// the test.
func makeFIFO(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "input.fifo")
	require.NoError(t, unix.Mkfifo(path, 0o600))
	t.Cleanup(func() {
		if fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
	})
	return path
}

// openWriter opens the writing end of the pipe at path once a reader is
// there, and closes it at the end of the test.
func openWriter(t *testing.T, path string) *os.File {
	t.Helper()
	type result struct {
		f   *os.File
		err error
	}
	opened := make(chan result, 1)
	go func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		opened <- result{f, err}
	}()
	select {
	case r := <-opened:
		require.NoError(t, r.err)
		t.Cleanup(func() { r.f.Close() })
		return r.f
	case <-time.After(promptly):
		// Let the pending open complete, then close it.
		go func() {
			if r := <-opened; r.err == nil {
				r.f.Close()
			}
		}()
		require.FailNow(t, "no reader opened the pipe")
		return nil
	}
}

// runSource runs src in the background; the returned channel yields its
// result.
func runSource(ctx context.Context, src diag.Source, out chan<- diag.Event) <-chan error {
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, out) }()
	return done
}

func waitDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(promptly):
		require.FailNow(t, "Run did not return")
		return nil
	}
}

func receive(t *testing.T, out <-chan diag.Event, n int) []diag.Event {
	t.Helper()
	var got []diag.Event
	for len(got) < n {
		select {
		case ev := <-out:
			got = append(got, ev)
		case <-time.After(promptly):
			require.FailNow(t, "events not received", "got %d of %d", len(got), n)
		}
	}
	return got
}

// openFIFOSource opens the input named by in's scheme on the pipe at path.
func openFIFOSource(t *testing.T, in fifoInput, path string) diag.Source {
	t.Helper()
	src, err := diagsrc.Open(in.scheme+":"+path, diagsrc.Options{RRC: &countingDecoder{}})
	require.NoError(t, err)
	return src
}

func TestFileInputsFromFIFO(t *testing.T) {
	for _, in := range fifoInputs(t) {
		t.Run(in.scheme, func(t *testing.T) {
			t.Run("no writer, cancelled", func(t *testing.T) {
				src := openFIFOSource(t, in, makeFIFO(t))
				ctx, cancel := context.WithCancel(t.Context())
				done := runSource(ctx, src, make(chan diag.Event, in.want))
				time.Sleep(50 * time.Millisecond)
				select {
				case err := <-done:
					require.FailNow(t, "Run returned before any writer", "err %v", err)
				default:
				}
				cancel()
				assert.ErrorIs(t, waitDone(t, done), context.Canceled)
			})
			t.Run("idle writer, cancelled", func(t *testing.T) {
				path := makeFIFO(t)
				src := openFIFOSource(t, in, path)
				ctx, cancel := context.WithCancel(t.Context())
				done := runSource(ctx, src, make(chan diag.Event, in.want))
				openWriter(t, path)
				time.Sleep(50 * time.Millisecond)
				cancel()
				assert.ErrorIs(t, waitDone(t, done), context.Canceled)
			})
			t.Run("writer idle after events, cancelled", func(t *testing.T) {
				path := makeFIFO(t)
				src := openFIFOSource(t, in, path)
				ctx, cancel := context.WithCancel(t.Context())
				out := make(chan diag.Event, in.want)
				done := runSource(ctx, src, out)
				w := openWriter(t, path)
				_, err := w.Write(in.data)
				require.NoError(t, err)
				receive(t, out, in.want)
				cancel()
				assert.ErrorIs(t, waitDone(t, done), context.Canceled)
			})
			t.Run("writer closes", func(t *testing.T) {
				path := makeFIFO(t)
				src := openFIFOSource(t, in, path)
				out := make(chan diag.Event, in.want+1)
				done := runSource(t.Context(), src, out)
				time.Sleep(20 * time.Millisecond)
				w := openWriter(t, path)
				// Two writes: the reader must not stop between them.
				half := len(in.data) / 2
				_, err := w.Write(in.data[:half])
				require.NoError(t, err)
				time.Sleep(20 * time.Millisecond)
				_, err = w.Write(in.data[half:])
				require.NoError(t, err)
				require.NoError(t, w.Close())
				require.NoError(t, waitDone(t, done))
				close(out)
				n := 0
				for ev := range out {
					n++
					assert.NotEmpty(t, ev.Type)
				}
				assert.Equal(t, in.want, n)
			})
			t.Run("data there first", func(t *testing.T) {
				// The writer has written before the source opens the pipe
				// (a reader kept it open meanwhile), then stays idle: no
				// new readiness comes, so the source must see the data
				// already queued.
				path := makeFIFO(t)
				keep, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
				require.NoError(t, err)
				defer keep.Close()
				w, err := os.OpenFile(path, os.O_WRONLY, 0)
				require.NoError(t, err)
				defer w.Close()
				_, err = w.Write(in.data)
				require.NoError(t, err)
				src := openFIFOSource(t, in, path)
				out := make(chan diag.Event, in.want+1)
				done := runSource(t.Context(), src, out)
				receive(t, out, in.want)
				require.NoError(t, w.Close())
				require.NoError(t, waitDone(t, done))
			})
		})
	}
}

func TestFileInputMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.jsonl")
	src, err := diagsrc.Open("jsonl:"+path, diagsrc.Options{})
	require.NoError(t, err)
	err = src.Run(t.Context(), make(chan diag.Event))
	require.Error(t, err)
	assert.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
	assert.True(t, strings.HasPrefix(err.Error(), "diag jsonl:"+path+": open "+path), "%v", err)
}
