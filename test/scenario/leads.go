package scenario

import (
	_ "embed"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
)

// Lead models of the generator: how long before its command a handover's
// triggering measurement report comes, and how long the command precedes
// execution.
const (
	// LeadsPaper draws both from the paper's means (178.9 ms report to
	// execution, 32.7 ms command to execution).
	LeadsPaper = "paper"
	// LeadsCaptures draws pairs measured on real captures
	// (leads-captures.csv): report to command, and command to completion.
	LeadsCaptures = "captures"
)

// Lead is one handover of a real capture: when its triggering report and
// its completion came relative to its command.
type Lead struct {
	Capture             string
	ReportToCommand     time.Duration
	CommandToCompletion time.Duration
}

// MaxReportLead is how long before a command a measurement report still
// counts as its trigger.
const MaxReportLead = time.Second

// MeasureLeads pairs each handover command of a capture's events with the
// last measurement report before it (within MaxReportLead) and the first
// completion after it; a command without both is left out, as is one
// whose session restarted (the modem's clock went back).
func MeasureLeads(capture string, events []diag.Event) []Lead {
	var leads []Lead
	var report, command time.Time
	var toCommand time.Duration
	last := time.Time{}
	for _, ev := range events {
		if ev.Time.Before(last) {
			report, command = time.Time{}, time.Time{}
		}
		last = ev.Time
		switch ev.Type {
		case diag.TypeMeasReport:
			report = ev.Time
		case diag.TypeHOCommand:
			command = time.Time{}
			if !report.IsZero() && ev.Time.Sub(report) <= MaxReportLead {
				command, toCommand = ev.Time, ev.Time.Sub(report)
			}
			report = time.Time{}
		case diag.TypeHOComplete:
			if !command.IsZero() && ev.Time.Sub(command) <= MaxReportLead {
				leads = append(leads, Lead{Capture: capture, ReportToCommand: toCommand, CommandToCompletion: ev.Time.Sub(command)})
			}
			command = time.Time{}
		case diag.TypeHOFailure:
			command = time.Time{}
		}
	}
	return leads
}

// WriteLeads writes leads as CSV: capture, report to command and command
// to completion in microseconds.
func WriteLeads(w io.Writer, leads []Lead) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"capture", "report_to_command_us", "command_to_completion_us"}); err != nil {
		return err
	}
	for _, l := range leads {
		if err := cw.Write([]string{l.Capture, strconv.FormatInt(l.ReportToCommand.Microseconds(), 10),
			strconv.FormatInt(l.CommandToCompletion.Microseconds(), 10)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ReadLeads reads what WriteLeads wrote.
func ReadLeads(r io.Reader) ([]Lead, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("reading leads: %w", err)
	}
	var leads []Lead
	for i, row := range rows {
		if i == 0 {
			continue
		}
		if len(row) != 3 {
			return nil, fmt.Errorf("leads line %d: want 3 fields", i+1)
		}
		toCmd, err1 := strconv.ParseInt(row[1], 10, 64)
		toDone, err2 := strconv.ParseInt(row[2], 10, 64)
		if err1 != nil || err2 != nil || toCmd < 0 || toDone < 0 {
			return nil, fmt.Errorf("leads line %d: %q", i+1, strings.Join(row, ","))
		}
		leads = append(leads, Lead{Capture: row[0], ReportToCommand: time.Duration(toCmd) * time.Microsecond,
			CommandToCompletion: time.Duration(toDone) * time.Microsecond})
	}
	return leads, nil
}

// capturesLeads are the leads of the shared real captures, measured by
// `m2ho-testbed leads` (see docs/testbed.md): figures derived from the
// captures of ../shared/data, not the captures themselves.
//
//go:embed leads-captures.csv
var capturesLeads string

// CaptureLeads are the leads measured on the shared real captures.
func CaptureLeads() ([]Lead, error) { return ReadLeads(strings.NewReader(capturesLeads)) }
