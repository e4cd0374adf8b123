package diagsrc

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/m2ho/m2ho/internal/logbuf"
)

// TestDropsHeldBackAreReportedWhenTheIntervalEnds: the first drop warns at
// once; the drops within the interval after it are reported together
// when the interval is over, even if no drop follows.
func TestDropsHeldBackAreReportedWhenTheIntervalEnds(t *testing.T) {
	var log logbuf.Buffer
	lines := func() []string { return strings.Split(strings.TrimSpace(log.String()), "\n") }
	w := newDropWarner(slog.New(slog.NewTextHandler(&log, nil)), "gsmtap://127.0.0.1:4729")
	w.interval = 50 * time.Millisecond
	w.note("gsmtap_version")
	w.note("gsmtap_version")
	w.note("rrc_malformed")
	assert.Len(t, lines(), 1, "one warning within the interval")
	assert.Eventually(t, func() bool { return len(lines()) == 2 }, 5*time.Second, 5*time.Millisecond)
	second := lines()[1]
	assert.Contains(t, second, "dropped=2")
	assert.Contains(t, second, `reasons="gsmtap_version=1 rrc_malformed=1"`)

	w.flush()
	time.Sleep(2 * w.interval)
	assert.Len(t, lines(), 2, "nothing left to report")
}
