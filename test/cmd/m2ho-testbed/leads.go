package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/diagsrc"
	"github.com/m2ho/m2ho/pkg/diag/rrc"
	"github.com/m2ho/m2ho/test/scenario"
)

// cmdLeads measures, on real captures, how long before its command each
// handover's triggering report came and how long the command took to
// complete: the lead model `--leads captures` of gen-scenario and eval.
func cmdLeads(ctx context.Context, args []string, out io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("leads", flag.ContinueOnError)
	outPath := fs.String("out", "", "CSV file to write (default: standard output)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("name capture URIs: qmdl:PATH (.qmdl, .mi2log) or pcap:PATH")
	}
	var leads []scenario.Lead
	for _, uri := range fs.Args() {
		events, err := decodeCapture(ctx, uri, log)
		if err != nil {
			return err
		}
		_, path, _ := strings.Cut(uri, ":")
		found := scenario.MeasureLeads(filepath.Base(path), events)
		fmt.Fprintf(os.Stderr, "%s: %d events, %d handovers with a report within %v of their command\n", uri, len(events), len(found), scenario.MaxReportLead)
		leads = append(leads, found...)
	}
	w := out
	if *outPath != "" {
		f, err := os.Create(*outPath)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	return scenario.WriteLeads(w, leads)
}

// decodeCapture decodes a recorded capture into its events, in order.
func decodeCapture(ctx context.Context, uri string, log *slog.Logger) ([]diag.Event, error) {
	src, err := diagsrc.Open(uri, diagsrc.Options{RRC: rrc.NewDecoder(log), Logger: log})
	if err != nil {
		return nil, err
	}
	ch := make(chan diag.Event, 256)
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, ch)
		close(ch)
	}()
	var events []diag.Event
	for ev := range ch {
		if ev.Type != diag.TypeRBAlloc {
			events = append(events, ev)
		}
	}
	if err := <-done; err != nil {
		return nil, fmt.Errorf("%s: %w", uri, err)
	}
	return events, nil
}
