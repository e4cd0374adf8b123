package diagsrc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag"
	"github.com/m2ho/m2ho/pkg/diag/qcdiag/qcdiagtest"
)

// recordingDecoder keeps every message and yields one event per message.
type recordingDecoder struct {
	mu   sync.Mutex
	msgs []diag.RRCMessage
}

func (d *recordingDecoder) Decode(msg diag.RRCMessage) ([]diag.Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.msgs = append(d.msgs, msg)
	return []diag.Event{{Type: diag.TypeHOComplete}}, nil
}

// scatV3 is a GSMTAP v3 LTE UL-DCCH datagram as SCAT writes it (54-byte
// header stating 56), stamped with the modem time at.
func scatV3(at time.Time, pdu []byte) []byte {
	b := []byte{3, 0, 0, 14, 0x04, 0x03, 0, 0x0B}
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint16(b, 12)
	b = binary.BigEndian.AppendUint64(b, uint64(at.Unix()))
	b = binary.BigEndian.AppendUint32(b, uint32(at.Nanosecond()))
	b = append(b, 0, 2, 0, 4, 0, 0, 0x96, 0) // channel 38400
	b = append(b, 0, 5, 0, 2, 0, 44)         // PCI 44
	b = append(b, 0, 8, 0, 4, 0, 0, 3, 0x73) // SFN
	b = append(b, 0, 9, 0, 2, 0, 0)          // sub-frame
	b = append(b, 0xFF, 0xFE)
	return append(b, pdu...)
}

// TestGSMTAPSourceSubscriptionsAndClock: SCAT's second subscription
// arrives on 127.0.0.2 and is told apart; every message carries the
// receive time, also v3 ones whose header carries the modem's.
func TestGSMTAPSourceSubscriptionsAndClock(t *testing.T) {
	dec := &recordingDecoder{}
	modemTime := time.Date(2020, 11, 16, 4, 33, 2, 0, time.UTC)
	pdu := []byte{0x08, 0x10}
	start := time.Now()
	out := make(chan diag.Event, 4)
	src, err := diagsrc.Open("gsmtap://127.0.0.1:0", diagsrc.Options{RRC: dec, Logger: quiet})
	require.NoError(t, err)
	addrs, _ := src.(*diagsrc.GSMTAPSource).Addrs()
	require.Len(t, addrs, 2)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, out) }()
	for _, addr := range addrs {
		c, err := net.Dial("udp", addr.String())
		require.NoError(t, err)
		_, err = c.Write(scatV3(modemTime, pdu))
		require.NoError(t, err)
		require.NoError(t, c.Close())
	}
	for range addrs {
		select {
		case ev := <-out:
			assert.WithinDuration(t, start, ev.Time, time.Minute, "receive time, not the v3 modem time")
		case <-time.After(5 * time.Second):
			require.FailNow(t, "event not received")
		}
	}
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	dec.mu.Lock()
	defer dec.mu.Unlock()
	subs := map[uint8]int{}
	for _, m := range dec.msgs {
		subs[m.Subscription]++
		assert.Equal(t, pdu, m.PDU, "the PDU starts after SCAT's end tag")
		assert.Equal(t, uint16(44), m.PCI)
	}
	assert.Equal(t, map[uint8]int{0: 1, 1: 1}, subs)
}

// TestDropWarnings: an input that drops messages says so in the log,
// naming itself and the reasons, at once and then at most once a minute,
// with what is left reported at the end of a file.
func TestDropWarnings(t *testing.T) {
	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	var stream []byte
	for range 3 {
		stream = append(stream, qcdiag.Escape(qcdiagtest.EncodeLogPacket(qcdiag.CodeLTERRCOTA, at, []byte{8, 1}))...)
	}
	path := filepath.Join(t.TempDir(), "bad.qmdl")
	require.NoError(t, os.WriteFile(path, stream, 0o600))
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	src, err := diagsrc.Open("qmdl:"+path, diagsrc.Options{RRC: &recordingDecoder{}, Logger: logger})
	require.NoError(t, err)
	runAll(t, src)
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	require.Len(t, lines, 2, log.String())
	for i, want := range []string{"dropped=1", "dropped=2"} {
		assert.Contains(t, lines[i], `msg="diag input dropped messages"`)
		assert.Contains(t, lines[i], "input=qmdl:"+path)
		assert.Contains(t, lines[i], want)
		assert.Contains(t, lines[i], `reasons="`+qcdiag.ReasonMalformedRRC+"=")
	}
}
