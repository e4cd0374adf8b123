package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/pkg/diag/rrc"
	"github.com/m2ho/m2ho/pkg/statemachine"
)

var (
	t0   = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	lteA = diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 1, ARFCN: 1850}
	lteB = diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 2, ARFCN: 1850}
	lteC = diag.Cell{RAT: diag.RATLTE, Band: diag.BandSub6, PCI: 3, ARFCN: 1850}
	nrMm = diag.Cell{RAT: diag.RATNR, Band: diag.BandMmWave, PCI: 100, ARFCN: 2079167}
)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func report(ms int, ev diag.MeasEvent, serving, neighbor diag.Cell) diag.Event {
	return diag.Event{Type: diag.TypeMeasReport, Time: at(ms), Meas: ev, Serving: serving, Neighbor: neighbor}
}

func command(ms int, kind diag.HOKind, source, target diag.Cell) diag.Event {
	return diag.Event{Type: diag.TypeHOCommand, Time: at(ms), Kind: kind, Source: source, Target: target}
}

func complete(ms int, cell diag.Cell) diag.Event {
	return diag.Event{Type: diag.TypeHOComplete, Time: at(ms), Cell: cell}
}

// recordingOf is a recording of events whose reports are those of the
// events plus extra ones that yield none (periodical, unresolved).
func recordingOf(events []diag.Event, extra ...Report) *Recording {
	rec := &Recording{Input: "test", Events: events}
	for _, ev := range events {
		if ev.Type == diag.TypeMeasReport {
			rec.Reports = append(rec.Reports, Report{Time: ev.Time, Resolved: true, Event: ev.Meas})
		}
	}
	rec.Reports = append(rec.Reports, extra...)
	sortReports(rec.Reports)
	return rec
}

// judgedTimeline has one handover of each fate.
func judgedTimeline() *Recording {
	events := []diag.Event{
		report(0, diag.EventA4, lteA, diag.Cell{}),
		// Predicted: report 60 ms before the command, executed 20 ms later.
		report(1000, diag.EventA3, lteA, lteB),
		command(1060, diag.HOPCell, lteA, lteB),
		complete(1080, lteB),
		// A prediction no command follows.
		report(3000, diag.EventA3, lteB, lteA),
		// No report at all.
		command(5000, diag.HOPCell, lteB, lteC),
		complete(5020, lteC),
		// Only a periodical report before it (no event).
		command(7100, diag.HOPCell, lteC, lteA),
		complete(7120, lteA),
		// Only a report whose measId was never configured.
		command(9050, diag.HOPCell, lteA, lteB),
		complete(9070, lteB),
		// An LTE A5, which Algorithm 1 does not act on.
		report(11000, diag.EventA5, lteB, lteC),
		command(11060, diag.HOPCell, lteB, lteC),
		complete(11080, lteC),
		// A radio link failure.
		{Type: diag.TypeHOFailure, Time: at(13000), Cause: diag.CauseRLF},
		// A handover to mmWave announced by a B1.
		report(15000, diag.EventB1, lteC, nrMm),
		command(15050, diag.HOSCGAdd, diag.Cell{}, nrMm),
		complete(15070, nrMm),
	}
	return recordingOf(events,
		Report{Time: at(7000), Resolved: true},
		Report{Time: at(9000)},
	)
}

func TestJudgeAlgorithm1(t *testing.T) {
	res, err := Judge(judgedTimeline(), PredictorAlgorithm1, nil)
	require.NoError(t, err)
	assert.Equal(t, PredictorAlgorithm1, res.Predictor)

	total, ok := res.Class(diag.AllClasses)
	require.True(t, ok)
	assert.Equal(t, 6, total.Handovers)
	assert.Equal(t, 1, total.Failures)
	assert.Equal(t, 5, total.Reported, "every handover but the unannounced one")
	assert.Equal(t, Ratio{Num: 2, Den: 3}, total.Precision, "two confirmed, one timed out")
	assert.Equal(t, Ratio{Num: 2, Den: 7}, total.Recall)
	assert.Equal(t, Ratio{Num: 2, Den: 5}, total.RecallReported)
	assert.Equal(t, map[string]int{
		MissNoReport: 1, MissPeriodicalReport: 1, MissUnresolvedMeasID: 1,
		MissReportNotPredicting: 1, MissRadioLinkFailure: 1,
	}, total.Misses)
	assert.Equal(t, 55*time.Millisecond, total.LeadMean, "60 and 50 ms")
	assert.Equal(t, 75*time.Millisecond, total.EarlinessMean, "80 and 70 ms")

	sub6, ok := res.Class(diag.ClassSub6Sub6)
	require.True(t, ok)
	assert.Equal(t, 5, sub6.Handovers)
	assert.Equal(t, Ratio{Num: 1, Den: 2}, sub6.Precision)
	up, ok := res.Class(diag.ClassSub6MmWave)
	require.True(t, ok)
	assert.Equal(t, 1, up.Handovers)
	assert.Equal(t, Ratio{Num: 1, Den: 1}, up.Precision)
	assert.Equal(t, Ratio{Num: 1, Den: 1}, up.RecallReported)
	assert.Equal(t, []string{diag.ClassSub6Sub6, diag.ClassSub6MmWave, diag.AllClasses}, classNames(res.Classes))

	assert.Equal(t, map[string]int{statemachine.OutcomeConfirmed: 2, statemachine.OutcomeTimedOut: 1}, res.Outcomes)
	pol := res.Policy
	assert.Equal(t, 7, pol.Suppressions, "one window for every executed handover, from its prediction or command through its execution's epoch, and one for the prediction that timed out")
	smoothing := statemachine.DefaultConfig().SmoothingMax
	assert.Equal(t, (60+20)*time.Millisecond+smoothing+ // predicted: from the report to the end of Smoothing
		292*time.Millisecond+ // the prediction's window, which it timed out at
		4*(20*time.Millisecond+smoothing)+ // unpredicted: from the command, 20 ms before execution
		(50+20)*time.Millisecond+smoothing, // the B1's
		pol.SuppressedFor, "nothing ends Smoothing earlier here")
	assert.GreaterOrEqual(t, pol.Clamps, 6, "a clamp for every prediction and unpredicted command but the one towards mmWave")
	assert.Positive(t, pol.ClampedFor)
	assert.Positive(t, pol.ClampBytesMedian)
	assert.Zero(t, pol.Freezes)
}

func classNames(cs []ClassResult) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Class
	}
	return out
}

// TestJudgeLearningFollowsTheNetwork: a network that hands over after
// LTE A5 reports and ignores A3 reports.
func TestJudgeLearningFollowsTheNetwork(t *testing.T) {
	events := []diag.Event{report(0, diag.EventA4, lteA, diag.Cell{})}
	cells := []diag.Cell{lteA, lteB}
	for i := range 30 {
		ms := 4000 * (i + 1)
		serving, other := cells[i%2], cells[(i+1)%2]
		events = append(events,
			report(ms, diag.EventA3, serving, other),
			report(ms+1500, diag.EventA5, serving, other),
			command(ms+1560, diag.HOPCell, serving, other),
			complete(ms+1580, other))
	}
	rec := recordingOf(events)
	alg1, err := Judge(rec, PredictorAlgorithm1, nil)
	require.NoError(t, err)
	learning, err := Judge(rec, PredictorLearning, nil)
	require.NoError(t, err)
	a, _ := alg1.Class(diag.AllClasses)
	l, _ := learning.Class(diag.AllClasses)
	t.Logf("algorithm 1: precision %v recall %v; learning: precision %v recall %v", a.Precision, a.RecallReported, l.Precision, l.RecallReported)
	assert.Equal(t, Ratio{Num: 0, Den: 30}, a.Precision, "Algorithm 1 trusts every A3, and every one times out")
	assert.Zero(t, a.Predicted)
	assert.Greater(t, l.Predicted, 20, "the learning predictor acts on the A5")
	pl, _ := l.Precision.Value()
	assert.Greater(t, pl, 0.6, "and stops trusting the A3")
	assert.Positive(t, learning.LearntKinds)

	// What was learnt, given to the next replay, predicts from the start.
	learnt := &Learnt{}
	_, err = Judge(rec, PredictorLearning, learnt)
	require.NoError(t, err)
	reports, err := learnt.LoadReportStats()
	require.NoError(t, err)
	assert.Len(t, reports, learning.LearntKinds)
	leads, err := learnt.LoadLeadStats()
	require.NoError(t, err)
	assert.NotEmpty(t, leads, "the report-to-command intervals are kept too")
	again, err := Judge(rec, PredictorLearning, learnt)
	require.NoError(t, err)
	a2, _ := again.Class(diag.AllClasses)
	assert.Greater(t, a2.Predicted, l.Predicted)
	assert.GreaterOrEqual(t, a2.Confirmed*l.Predictions, l.Confirmed*a2.Predictions, "precision does not fall")

	reports, err = learnt.LoadReportStats()
	require.NoError(t, err)
	leads, err = learnt.LoadLeadStats()
	require.NoError(t, err)
	ignored, err := Judge(rec, PredictorAlgorithm1, learnt)
	require.NoError(t, err)
	assert.Equal(t, alg1.Classes, ignored.Classes, "Algorithm 1 learns nothing")
	assert.Zero(t, ignored.LearntKinds)
	after, err := learnt.LoadReportStats()
	require.NoError(t, err)
	assert.Equal(t, reports, after, "nor changes what the learning predictor learnt")
	afterLeads, err := learnt.LoadLeadStats()
	require.NoError(t, err)
	assert.Equal(t, leads, afterLeads)
}

// handoversAfter returns n handovers between lteA and lteB, four
// seconds apart from start ms, each command lead after the A3 report
// that announced it.
func handoversAfter(start, n int, lead time.Duration) []diag.Event {
	cells := []diag.Cell{lteA, lteB}
	var events []diag.Event
	for i := range n {
		ms := start + 4000*i
		serving, other := cells[i%2], cells[(i+1)%2]
		cmd := ms + int(lead/time.Millisecond)
		events = append(events, report(ms, diag.EventA3, serving, other), command(cmd, diag.HOPCell, serving, other), complete(cmd+20, other))
	}
	return events
}

// TestJudgeCarriesLeads: the report-to-command intervals learnt on one
// recording set the prediction window of the next from its start, as
// m2hod's cell store carries them across drives and restarts. Without
// them the window is 2*T2 (292 ms) until five commands taught T2 again,
// and the first commands of a network that answers in 300 ms find their
// predictions timed out.
func TestJudgeCarriesLeads(t *testing.T) {
	first := recordingOf(handoversAfter(0, 20, 320*time.Millisecond))
	learnt := &Learnt{}
	res, err := Judge(first, PredictorLearning, learnt)
	require.NoError(t, err)
	// Learning from nothing, the predictions before five commands time out.
	const confirmed, timedOut = statemachine.OutcomeConfirmed, statemachine.OutcomeTimedOut
	require.Equal(t, map[string]int{confirmed: 15, timedOut: 5}, res.Outcomes)
	leads, err := learnt.LoadLeadStats()
	require.NoError(t, err)
	require.Len(t, leads, 1)
	assert.Equal(t, diag.BandSub6, leads[0].Band)
	assert.Equal(t, 320*time.Millisecond, leads[0].Lead())

	// The report counts alone: what --carry carried before.
	countsOnly := &Learnt{}
	reports, err := learnt.LoadReportStats()
	require.NoError(t, err)
	for _, r := range reports {
		require.NoError(t, countsOnly.SaveReportStats(r))
	}

	nextEvents := handoversAfter(0, 20, 300*time.Millisecond)
	// Both in one log, the second recording's clock behind the first's:
	// the player restarts the machine there, as m2hod restarts.
	oneLog := append(handoversAfter(3600_000, 20, 320*time.Millisecond), nextEvents...)
	tests := []struct {
		name   string
		rec    *Recording
		learnt *Learnt
		want   map[string]int
	}{
		{name: "intervals carried over", rec: recordingOf(nextEvents), learnt: learnt, want: map[string]int{confirmed: 20}},
		{name: "report counts alone", rec: recordingOf(nextEvents), learnt: countsOnly, want: map[string]int{confirmed: 15, timedOut: 5}},
		{name: "nothing carried over", rec: recordingOf(nextEvents), want: map[string]int{confirmed: 15, timedOut: 5}},
		// Only the first recording's first predictions time out.
		{name: "a log of two recordings", rec: recordingOf(oneLog), want: map[string]int{confirmed: 35, timedOut: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Judge(tt.rec, PredictorLearning, tt.learnt)
			require.NoError(t, err)
			assert.Equal(t, tt.want, res.Outcomes)
		})
	}
}

func TestJudgeUnknownPredictor(t *testing.T) {
	_, err := Judge(judgedTimeline(), "oracle", nil)
	assert.ErrorContains(t, err, "oracle")
}

// TestPlayerSessions: a log of two recordings replays each on a fresh
// machine, which keeps what the previous one learnt.
func TestPlayerSessions(t *testing.T) {
	var sessions []time.Time
	p, err := NewPlayer(Options{NewSession: func(at time.Time) { sessions = append(sessions, at) }})
	require.NoError(t, err)
	first := []diag.Event{
		report(0, diag.EventA4, lteA, diag.Cell{}),
		report(1000, diag.EventA5, lteA, lteB),
		command(1050, diag.HOPCell, lteA, lteB),
		complete(1070, lteB),
	}
	for _, ev := range first {
		require.NoError(t, p.Play(ev))
	}
	// Timers ran between events: the handover's Smoothing ended.
	require.NoError(t, p.Play(report(2500, diag.EventA4, lteB, diag.Cell{})))
	assert.Equal(t, statemachine.Stable, p.Machine().State())
	learnt := p.Machine().Learnt()
	require.NotEmpty(t, learnt)
	before := p.Machine()

	// Small steps back are the machine's to absorb.
	require.NoError(t, p.Play(report(2000, diag.EventA4, lteB, diag.Cell{})))
	assert.Same(t, before, p.Machine())
	assert.Empty(t, sessions)

	require.NoError(t, p.Play(report(-3600_000, diag.EventA4, lteA, diag.Cell{})))
	assert.NotSame(t, before, p.Machine())
	assert.Equal(t, []time.Time{at(-3600_000)}, sessions)
	// Kinds whose only reports were still waiting for their outcome
	// learnt nothing yet: a restarted m2hod has no record of them either.
	learnt = slices.DeleteFunc(learnt, func(s statemachine.ReportStats) bool { return s.Reports == 0 })
	assert.Equal(t, learnt, p.Machine().Learnt(), "what was learnt is the network's, not the recording's")
	assert.Equal(t, at(-3600_000), p.Now())
}

func TestPlayerDrain(t *testing.T) {
	p, err := NewPlayer(Options{})
	require.NoError(t, err)
	p.Drain(func() bool { return false }) // nothing played: nothing to do
	require.NoError(t, p.Play(report(0, diag.EventA4, lteA, diag.Cell{})))
	require.NoError(t, p.Play(report(10, diag.EventA3, lteA, lteB)))
	require.Equal(t, statemachine.Preparation, p.Machine().State())
	p.Drain(func() bool { return p.Machine().State() == statemachine.Stable })
	assert.Equal(t, statemachine.Stable, p.Machine().State(), "the prediction timed out")
	assert.Less(t, p.Now().Sub(at(10)), QuietAfter)
}

func TestPredictionsOutcomes(t *testing.T) {
	events := []diag.Event{
		report(0, diag.EventA4, lteA, diag.Cell{}),
		report(100, diag.EventA3, lteA, lteB),
		report(150, diag.EventA3, lteA, lteC), // supersedes
		command(200, diag.HOPCell, lteA, lteC),
		complete(220, lteC),
		report(2000, diag.EventA3, lteC, lteA),
		{Type: diag.TypeHOFailure, Time: at(2050), Cause: diag.CauseRLF},
		report(4000, diag.EventA3, lteC, lteB), // still pending at the end: times out in the drain
	}
	made, unmatched, err := Predictions(events, Options{})
	require.NoError(t, err)
	assert.Zero(t, unmatched)
	var outcomes []string
	for _, p := range made {
		outcomes = append(outcomes, p.Outcome)
	}
	assert.Equal(t, []string{OutcomeSuperseded, statemachine.OutcomeConfirmed, OutcomeDropped, statemachine.OutcomeTimedOut}, outcomes)
	assert.Equal(t, lteC, made[1].Target)
	assert.Equal(t, at(200), made[1].ResolvedAt)
}

func TestReadRecordings(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.jsonl")
	lines := []string{
		`{"v":1,"type":"meas_report","t":"2026-03-04T05:06:07Z","event":"A3","serving":{"rat":"lte","pci":1,"arfcn":1850},"neighbor":{"rat":"lte","pci":2,"arfcn":1850}}`,
		`{"v":1,"type":"ho_command","t":"2026-03-04T05:06:07.060Z","kind":"pcell","target":{"rat":"lte","pci":2,"arfcn":1850}}`,
		`not json`,
		`{"v":1,"type":"ho_complete","t":"2026-03-04T05:06:07.080Z","cell":{"rat":"lte","pci":2,"arfcn":1850}}`,
	}
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	rec, err := Read(context.Background(), "jsonl:"+path, rrc.FollowAuto)
	require.NoError(t, err)
	assert.Len(t, rec.Events, 3)
	require.Len(t, rec.Reports, 1, "a JSON input's reports are its meas_report events")
	assert.Equal(t, diag.EventA3, rec.Reports[0].Event)
	assert.Equal(t, uint64(1), rec.Skipped[diag.ReasonJSONSyntax])

	res, err := Replay(context.Background(), "jsonl:"+path, rrc.FollowAuto, nil)
	require.NoError(t, err)
	require.Len(t, res.Predictors, 2)
	for _, p := range res.Predictors {
		total, _ := p.Class(diag.AllClasses)
		assert.Equal(t, Ratio{Num: 1, Den: 1}, total.RecallReported, p.Predictor)
	}
	assert.Equal(t, 80*time.Millisecond, res.Span)

	_, err = Read(context.Background(), "udp://127.0.0.1:0", rrc.FollowAuto)
	assert.ErrorContains(t, err, "a replay reads a recording")
	_, err = Read(context.Background(), "qmdl:"+filepath.Join(dir, "missing.qmdl"), rrc.FollowAuto)
	assert.Error(t, err)
}

func TestWriteResults(t *testing.T) {
	rec := judgedTimeline()
	res := &Result{Input: "test", Events: len(rec.Events), Reports: len(rec.Reports)}
	for _, name := range Predictors() {
		p, err := Judge(rec, name, nil)
		require.NoError(t, err)
		res.Predictors = append(res.Predictors, p)
	}
	var table bytes.Buffer
	require.NoError(t, WriteTable(&table, []*Result{res}))
	out := table.String()
	for _, want := range []string{"predictor", "algorithm1", "learning", "sub6-mmW", "Overall", "66.7 (2/3)", "40.0 (2/5)",
		"misses no_report=1 periodical_report=1 radio_link_failure=1 report_not_predicting=1 unresolved_meas_id=1",
		"suppression windows"} {
		assert.Contains(t, out, want)
	}

	var js bytes.Buffer
	require.NoError(t, WriteJSON(&js, []*Result{res}))
	var decoded []map[string]any
	require.NoError(t, json.Unmarshal(js.Bytes(), &decoded))
	require.Len(t, decoded, 1)
	predictors := decoded[0]["predictors"].([]any)
	classes := predictors[0].(map[string]any)["classes"].([]any)
	total := classes[len(classes)-1].(map[string]any)
	assert.Equal(t, "overall", total["class"], "the key JSON consumers read")
	assert.InDelta(t, 2.0/3, total["precision"].(map[string]any)["value"], 1e-9)
	assert.Contains(t, total, "lead_mean_ns")
}

func TestRatio(t *testing.T) {
	assert.Equal(t, "- (0/0)", Ratio{}.String())
	assert.Equal(t, "50.0 (1/2)", Ratio{Num: 1, Den: 2}.String())
	b, err := json.Marshal(Ratio{})
	require.NoError(t, err)
	assert.JSONEq(t, `{"num":0,"den":0,"value":null}`, string(b))
}

// TestJudgeSessions: a prediction pending when its recording ends is
// neither right nor wrong, and the next recording starts afresh.
func TestJudgeSessions(t *testing.T) {
	events := []diag.Event{
		report(0, diag.EventA4, lteA, diag.Cell{}),
		report(1000, diag.EventA3, lteA, lteB),
		// The next recording, an hour earlier.
		report(-3600_000, diag.EventA4, lteA, diag.Cell{}),
		report(-3599_000, diag.EventA3, lteA, lteB),
		command(-3598_940, diag.HOPCell, lteA, lteB),
		complete(-3598_920, lteB),
	}
	res, err := Judge(recordingOf(events), PredictorAlgorithm1, nil)
	require.NoError(t, err)
	total, _ := res.Class(diag.AllClasses)
	assert.Equal(t, Ratio{Num: 1, Den: 1}, total.Precision)
	assert.Equal(t, Ratio{Num: 1, Den: 1}, total.Recall)
	assert.Equal(t, map[string]int{OutcomeUnresolved: 1, statemachine.OutcomeConfirmed: 1}, res.Outcomes)

	made, _, err := Predictions(events, Options{})
	require.NoError(t, err)
	require.Len(t, made, 2)
	assert.Equal(t, OutcomeUnresolved, made[0].Outcome)
	assert.Equal(t, statemachine.OutcomeConfirmed, made[1].Outcome)
}

// TestJudgeConditionalHandover: a conditional handover's command is its
// stored configuration, which predicts it; the UE's execution completes
// it. A configuration removed unexecuted is a wrong prediction.
func TestJudgeConditionalHandover(t *testing.T) {
	cho := func(ms int, serving diag.Cell, candidates ...diag.Cell) diag.Event {
		return diag.Event{Type: diag.TypeCHOConfig, Time: at(ms), Serving: serving, Candidates: candidates}
	}
	executed := command(1500, diag.HOPCell, lteA, lteC)
	executed.Conditional = true
	rec := recordingOf([]diag.Event{
		report(0, diag.EventA4, lteA, diag.Cell{}),
		report(900, diag.EventA4, lteA, lteC),
		cho(1000, lteA, lteC, lteB),
		cho(1200, lteA, lteC), // lteB removed, lteC stored since 1000
		executed,
		complete(1500, lteC),
		cho(5000, lteC, lteA),
		cho(5400, lteC), // removed unexecuted
	})
	for _, predictor := range Predictors() {
		t.Run(predictor, func(t *testing.T) {
			res, err := Judge(rec, predictor, nil)
			require.NoError(t, err)
			total, ok := res.Class(diag.AllClasses)
			require.True(t, ok)
			assert.Equal(t, 1, total.Handovers)
			assert.Equal(t, 1, total.Conditional)
			assert.Equal(t, 1, total.Reported, "the A4 came within a second of the configuration")
			assert.Equal(t, Ratio{Num: 1, Den: 1}, total.RecallReported)
			assert.Equal(t, Ratio{Num: 1, Den: 2}, total.Precision)
			assert.Equal(t, time.Duration(0), total.LeadMean, "predicted with its command, the configuration")
			assert.Equal(t, 500*time.Millisecond, total.EarlinessMean, "from the configuration to the execution")
			assert.Equal(t, map[string]int{statemachine.OutcomeConfirmed: 1, statemachine.OutcomeCHORemoved: 1}, res.Outcomes)
		})
	}
}

// TestJudgeConnectionRelease: a prediction the network ends by releasing
// the connection is a wrong one, with or without a redirection to the
// carrier of its target, which the outcomes tell apart; a command on the
// next connection confirms nothing of it.
func TestJudgeConnectionRelease(t *testing.T) {
	release := func(ms int, redirect diag.Carrier) diag.Event {
		return diag.Event{Type: diag.TypeRRCRelease, Time: at(ms), Cell: lteA, Redirect: redirect}
	}
	otherCarrier := diag.Carrier{RAT: diag.RATLTE, ARFCN: 9720}
	tests := []struct {
		name     string
		redirect diag.Carrier
		outcome  string
	}{
		{name: "plain release", outcome: statemachine.OutcomeReleased},
		{name: "redirected to another carrier", redirect: otherCarrier, outcome: statemachine.OutcomeReleased},
		{name: "redirected to the target's carrier", redirect: lteB.Carrier(), outcome: OutcomeRedirected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := recordingOf([]diag.Event{
				report(0, diag.EventA4, lteA, diag.Cell{}),
				report(1000, diag.EventA3, lteA, lteB),
				release(1030, tt.redirect),
				// The next connection, set up on lteA, hands over within
				// the released prediction's window.
				report(1100, diag.EventA4, lteA, diag.Cell{}),
				command(1200, diag.HOPCell, lteA, lteB),
				complete(1220, lteB),
			})
			for _, predictor := range Predictors() {
				res, err := Judge(rec, predictor, nil)
				require.NoError(t, err)
				total, ok := res.Class(diag.AllClasses)
				require.True(t, ok)
				assert.Equal(t, map[string]int{tt.outcome: 1}, res.Outcomes, predictor)
				assert.Equal(t, Ratio{Num: 0, Den: 1}, total.Precision, predictor)
				assert.Equal(t, Ratio{Num: 0, Den: 1}, total.RecallReported, "%s: the report before the release announced no command of the next connection", predictor)
			}
		})
	}
}

// TestJudgeLostCommand: a completion the machine executes with no
// command under way is a handover whose command the log lost, counted
// for recall as for precision from its completion; a completion on the
// serving cell is none, and a late completion of a command whose
// execution timed out is that command's. A release ends the command
// under way: a completion after it is a handover of its own.
func TestJudgeLostCommand(t *testing.T) {
	release := diag.Event{Type: diag.TypeRRCRelease, Time: at(9050), Cell: lteA}
	rec := recordingOf([]diag.Event{
		report(0, diag.EventA4, lteA, diag.Cell{}),
		report(1000, diag.EventA3, lteA, lteB),
		complete(1120, lteB),
		complete(2000, lteB),
		complete(4000, lteC),
		command(6000, diag.HOPCell, lteC, lteA),
		complete(7200, lteA),
		command(9000, diag.HOPCell, lteA, lteB),
		release,
		complete(11000, lteC),
	})
	for _, predictor := range Predictors() {
		t.Run(predictor, func(t *testing.T) {
			res, err := Judge(rec, predictor, nil)
			require.NoError(t, err)
			total, ok := res.Class(diag.AllClasses)
			require.True(t, ok)
			assert.Equal(t, 5, total.Handovers, "the lost commands at 1120, 4000 and 11000 ms, and the two commands")
			assert.Equal(t, 1, total.Reported)
			assert.Equal(t, Ratio{Num: 1, Den: 1}, total.Precision)
			assert.Equal(t, Ratio{Num: 1, Den: 1}, total.RecallReported)
			assert.Equal(t, Ratio{Num: 1, Den: 5}, total.Recall)
			assert.Equal(t, map[string]int{MissNoReport: 4}, total.Misses)
			assert.Equal(t, 120*time.Millisecond, total.LeadMean, "to the completion, all the log tells of the command")
			assert.Equal(t, 120*time.Millisecond, total.EarlinessMean)
			assert.Equal(t, map[string]int{statemachine.OutcomeConfirmed: 1}, res.Outcomes)
		})
	}
}
