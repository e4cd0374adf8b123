package diag

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// MaxLine bounds one JSON lines record; longer lines are counted as
// "json_line_too_long" and skipped.
const MaxLine = 64 << 10

// JSONLSource reads version-1 JSON events, one per line, from a file or
// stdin. Events without "t" get the time the line was read.
type JSONLSource struct {
	name  string
	r     io.Reader
	stats *Stats
	now   func() time.Time
}

// NewJSONLSource reads events from r; name is the URI for logs.
func NewJSONLSource(name string, r io.Reader, stats *Stats) *JSONLSource {
	if stats == nil {
		stats = &Stats{}
	}
	return &JSONLSource{name: name, r: r, stats: stats, now: time.Now}
}

// Name returns the URI the source was opened from.
func (s *JSONLSource) Name() string { return s.name }

// Run delivers every event of the input and returns nil at its end. The
// reading happens on its own goroutine so that a cancelled ctx returns at
// once even while a read (of stdin, say) blocks.
func (s *JSONLSource) Run(ctx context.Context, out chan<- Event) error {
	done := make(chan error, 1)
	go func() { done <- s.readAll(ctx, out) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *JSONLSource) readAll(ctx context.Context, out chan<- Event) error {
	br := bufio.NewReaderSize(s.r, MaxLine)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			s.stats.CountError(ReasonLineTooLong)
			if err := skipLine(br); err != nil {
				return s.endOfInput(err)
			}
			continue
		}
		if len(line) > 0 {
			if derr := deliverLine(ctx, line, s.now(), s.stats, out); derr != nil {
				return derr
			}
		}
		if err != nil {
			return s.endOfInput(err)
		}
	}
}

// skipLine discards the rest of an over-long line.
func skipLine(br *bufio.Reader) error {
	for {
		_, err := br.ReadSlice('\n')
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

func (s *JSONLSource) endOfInput(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("diag %s: read: %w", s.name, err)
}
