package diagsrc

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// dropWarnInterval spaces the warnings of one input about what it drops:
// the first drop is reported at once, later ones at most this often, each
// warning summing up the drops since the previous one.
const dropWarnInterval = time.Minute

// dropWarner turns the drops of one input (malformed datagrams, RRC that
// does not decode, reports no measConfig resolves) into rate-limited
// warnings naming the input and the reasons, so that a feed that loses
// most of its messages shows in the log and not only in counters.
type dropWarner struct {
	logger   *slog.Logger
	input    string
	interval time.Duration

	mu       sync.Mutex
	lastWarn time.Time
	pending  map[string]uint64
	// later reports the drops held back by the interval once it is
	// over, so that a burst of drops on a live input that then goes
	// quiet is not left unreported until the input ends.
	later *time.Timer
}

func newDropWarner(logger *slog.Logger, input string) *dropWarner {
	return &dropWarner{logger: logger, input: input, interval: dropWarnInterval, pending: map[string]uint64{}}
}

// note records one drop for reason and warns when the interval allows,
// or else when it is over.
func (w *dropWarner) note(reason string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending[reason]++
	now := time.Now()
	if w.lastWarn.IsZero() || now.Sub(w.lastWarn) >= w.interval {
		w.warnLocked(now)
		return
	}
	if w.later == nil {
		w.later = time.AfterFunc(w.lastWarn.Add(w.interval).Sub(now), w.flush)
	}
}

// flush reports the drops not reported yet: when the interval is over,
// and at the end of an input.
func (w *dropWarner) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) > 0 {
		w.warnLocked(time.Now())
	}
}

func (w *dropWarner) warnLocked(now time.Time) {
	var total uint64
	var reasons []string
	for _, r := range slices.Sorted(maps.Keys(w.pending)) {
		n := w.pending[r]
		total += n
		reasons = append(reasons, fmt.Sprintf("%s=%d", r, n))
	}
	since := "start"
	if !w.lastWarn.IsZero() {
		since = now.Sub(w.lastWarn).Round(time.Second).String() + " ago"
	}
	w.logger.Warn("diag input dropped messages", "input", w.input, "dropped", total,
		"reasons", strings.Join(reasons, " "), "since", since)
	w.lastWarn = now
	clear(w.pending)
	if w.later != nil {
		w.later.Stop()
		w.later = nil
	}
}
