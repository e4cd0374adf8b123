package diagsrc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/m2ho/m2ho/pkg/diag"
)

// rawTimeLayout prints every listed time with nanosecond digits.
const rawTimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// Decode implements `m2hod decode [--raw] URI`: it reads the input and
// writes one version-1 JSON event per line to w, with times from one
// clock per input: the modem's (DIAG inputs, pcap timestamps) or, for
// live GSMTAP, the receive time. With raw, it lists every DIAG log packet
// (or GSMTAP datagram) instead: time, log code, version, length, and what
// was decoded from it; raw needs no RRC decoder. Files are read to their end;
// live inputs until ctx ends, which is then not an error.
func Decode(ctx context.Context, w io.Writer, uri string, raw bool, opts Options) error {
	bw := bufio.NewWriter(w)
	scheme, _, _ := strings.Cut(uri, ":")
	if raw {
		switch scheme {
		case "qmdl", "serial", "gsmtap", "pcap":
		default:
			return fmt.Errorf("decode --raw %s: %w: a raw listing needs a DIAG or GSMTAP input", uri, ErrBadURI)
		}
		opts.observe = func(r record) error {
			if _, err := bw.WriteString(r.line()); err != nil {
				return fmt.Errorf("write listing: %w", err)
			}
			return flushIfLive(bw, scheme)
		}
	}
	src, err := Open(uri, opts)
	if err != nil {
		return err
	}
	events := make(chan diag.Event, 64)
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, events)
		close(events)
	}()
	var writeErr error
	for ev := range events {
		if raw || writeErr != nil {
			continue
		}
		if writeErr = writeEvent(bw, ev); writeErr == nil {
			writeErr = flushIfLive(bw, scheme)
		}
	}
	runErr := <-done
	if ctx.Err() != nil && errors.Is(runErr, ctx.Err()) {
		runErr = nil
	}
	if err := bw.Flush(); err != nil && writeErr == nil {
		writeErr = fmt.Errorf("write output: %w", err)
	}
	return errors.Join(runErr, writeErr)
}

func writeEvent(bw *bufio.Writer, ev diag.Event) error {
	line, err := diag.MarshalJSON(ev)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if _, err := bw.Write(line); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// flushIfLive makes the output of live inputs appear as it arrives; that
// of files is flushed at the end only.
func flushIfLive(bw *bufio.Writer, scheme string) error {
	switch scheme {
	case "qmdl", "pcap", "jsonl":
		return nil
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// line renders the record as one listing line, for example
//
//	2020-11-16T04:33:02.253021240Z 0xB0C0 v26 len=28 decoded=yes lte PCCH pci=132 arfcn=39148 events=0
func (r record) line() string {
	var b strings.Builder
	t := "-"
	if !r.Time.IsZero() {
		t = r.Time.UTC().Format(rawTimeLayout)
	}
	fmt.Fprintf(&b, "%s %s %s len=%d", t, r.Kind, r.Version, r.Length)
	if r.RRC != nil {
		m := r.RRC
		pci := strconv.Itoa(int(m.PCI))
		if m.PCIUnknown {
			pci = "-"
		}
		fmt.Fprintf(&b, " decoded=yes %s %s pci=%s arfcn=%d pdu_len=%d events=%d", m.RAT, m.Channel, pci, m.ARFCN, len(m.PDU), r.Events)
		if m.Subscription != 0 {
			fmt.Fprintf(&b, " subscription=%d", m.Subscription)
		}
	} else {
		fmt.Fprintf(&b, " decoded=no %s", r.Note)
	}
	b.WriteByte('\n')
	return b.String()
}
