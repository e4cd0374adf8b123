package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/m2ho/m2ho/pkg/diag/rrc"
	"github.com/m2ho/m2ho/pkg/replay"
)

// replayCommand runs recorded diag inputs through the decoder, the state
// machine and the estimator on their own clock, with no datapath, and
// prints how handover prediction did and what policy m2ho would have
// applied: a table, or JSON with --json. With --carry the learning
// predictor learns across the inputs, as the daemon does across drives.
func replayCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const usage = "usage: m2hod replay [--json] [--carry] [--subscription auto|N] URI...   (qmdl:PATH, pcap:PATH, jsonl:PATH)"
	fs := flag.NewFlagSet("m2hod replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	asJSON := fs.Bool("json", false, "print the results as JSON")
	carry := fs.Bool("carry", false, "the learning predictor goes on from one input to the next, in the order given, with the report counts and report-to-command intervals it learnt, as m2hod keeps them in its cell store (default: each input starts from nothing)")
	follow := rrc.FollowAuto
	fs.Func("subscription", "SIM subscription of a multi-SIM modem to replay, as the daemon's --diag-subscription: auto (the one carrying data, else 0) or an index from 0", func(s string) (err error) {
		follow, err = rrc.ParseFollow(s)
		return err
	})
	if code, done := parseSubcommand(fs, args, usage, stdout, stderr); done {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, usage)
		return exitUsage
	}
	var results []*replay.Result
	// With --carry, what the learning predictor learns (report counts
	// and report-to-command intervals, as the cell store keeps them)
	// goes on to the next input; nil starts each from nothing.
	var learnt *replay.Learnt
	if *carry {
		learnt = &replay.Learnt{}
	}
	for _, uri := range fs.Args() {
		res, err := replay.Replay(ctx, uri, follow, learnt)
		if err != nil {
			fmt.Fprintf(stderr, "m2hod replay: %v\n", err)
			return inputFailure(err)
		}
		results = append(results, res)
	}
	write := replay.WriteTable
	if *asJSON {
		write = replay.WriteJSON
	}
	if err := write(stdout, results); err != nil {
		fmt.Fprintf(stderr, "m2hod replay: %v\n", err)
		return exitFailure
	}
	return 0
}
