package diagsrc

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// syncBuffer is a log destination the warner's timer may write to while
// the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.buf.String()), "\n")
}

// TestDropsHeldBackAreReportedWhenTheIntervalEnds: the first drop warns at
// once; the drops within the interval after it are reported together
// when the interval is over, even if no drop follows.
func TestDropsHeldBackAreReportedWhenTheIntervalEnds(t *testing.T) {
	var log syncBuffer
	w := newDropWarner(slog.New(slog.NewTextHandler(&log, nil)), "gsmtap://127.0.0.1:4729")
	w.interval = 50 * time.Millisecond
	w.note("gsmtap_version")
	w.note("gsmtap_version")
	w.note("rrc_malformed")
	assert.Len(t, log.lines(), 1, "one warning within the interval")
	assert.Eventually(t, func() bool { return len(log.lines()) == 2 }, 5*time.Second, 5*time.Millisecond)
	second := log.lines()[1]
	assert.Contains(t, second, "dropped=2")
	assert.Contains(t, second, `reasons="gsmtap_version=1 rrc_malformed=1"`)

	w.flush()
	time.Sleep(2 * w.interval)
	assert.Len(t, log.lines(), 2, "nothing left to report")
}
