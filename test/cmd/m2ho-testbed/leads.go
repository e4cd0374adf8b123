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

	"github.com/m2ho/m2ho/pkg/diag/rrc"
	"github.com/m2ho/m2ho/pkg/replay"
	"github.com/m2ho/m2ho/test/scenario"
)

// cmdLeads measures, on real captures, how long before its command each
// handover's triggering report came and how long the command took to
// complete: the lead model `--leads captures` of gen-scenario and eval.
func cmdLeads(ctx context.Context, args []string, out io.Writer, _ *slog.Logger) error {
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
		rec, err := replay.Read(ctx, uri, rrc.FollowAuto)
		if err != nil {
			return err
		}
		_, path, _ := strings.Cut(uri, ":")
		found := scenario.MeasureLeads(filepath.Base(path), rec.Events)
		fmt.Fprintf(os.Stderr, "%s: %d events, %d handovers with a report within %v of their command\n", uri, len(rec.Events), len(found), scenario.MaxReportLead)
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
