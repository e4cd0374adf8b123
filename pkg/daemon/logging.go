package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"

	"github.com/m2ho/m2ho/pkg/config"
)

// NewLogger returns the daemon's logger on w (its stderr) in format;
// LogAuto picks journal when w is the stream systemd connected to the
// journal, text otherwise.
func NewLogger(w io.Writer, format config.LogFormat, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == config.LogAuto {
		format = config.LogText
		if f, ok := w.(*os.File); ok && isJournalStream(f, os.Getenv("JOURNAL_STREAM")) {
			format = config.LogJournal
		}
	}
	switch format {
	case config.LogJSON:
		return slog.New(slog.NewJSONHandler(w, opts))
	case config.LogJournal:
		return slog.New(newJournalHandler(w, opts))
	default:
		return slog.New(slog.NewTextHandler(w, opts))
	}
}

// isJournalStream says whether f is the journal's stream: systemd sets
// $JOURNAL_STREAM to its device and inode (systemd.exec(5)), which a
// child whose stderr was redirected inherits but no longer matches.
func isJournalStream(f *os.File, journalStream string) bool {
	if journalStream == "" {
		return false
	}
	info, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && fmt.Sprintf("%d:%d", st.Dev, st.Ino) == journalStream
}

// journalHandler writes logfmt lines without a time, since the journal
// stamps every line itself, each prefixed with the syslog priority of
// its level in the form the journal reads from a service's stderr (<3>
// error, <4> warning, <6> info, <7> debug; sd-daemon(3)).
type journalHandler struct {
	text slog.Handler
	out  *lockedLine
}

// lockedLine collects one record's text and writes it whole with its
// prefix, so that lines of concurrent records never interleave.
type lockedLine struct {
	mu  sync.Mutex
	buf bytes.Buffer
	w   io.Writer
}

func (l *lockedLine) Write(p []byte) (int, error) { return l.buf.Write(p) }

func newJournalHandler(w io.Writer, opts *slog.HandlerOptions) *journalHandler {
	out := &lockedLine{w: w}
	noTime := *opts
	noTime.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	return &journalHandler{text: slog.NewTextHandler(out, &noTime), out: out}
}

func (h *journalHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.text.Enabled(ctx, level)
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	h.out.buf.Reset()
	fmt.Fprintf(&h.out.buf, "<%d>", journalPriority(r.Level))
	if err := h.text.Handle(ctx, r); err != nil {
		return err
	}
	_, err := h.out.w.Write(h.out.buf.Bytes())
	return err
}

func (h *journalHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &journalHandler{text: h.text.WithAttrs(attrs), out: h.out}
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	return &journalHandler{text: h.text.WithGroup(name), out: h.out}
}

// journalPriority is the syslog priority of a slog level.
func journalPriority(level slog.Level) int {
	switch {
	case level >= slog.LevelError:
		return 3
	case level >= slog.LevelWarn:
		return 4
	case level >= slog.LevelInfo:
		return 6
	default:
		return 7
	}
}
