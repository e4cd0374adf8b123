package scenario

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
)

// Statistics the generator draws from (data/handover-timing.md; the M2HO
// paper's measurement study unless noted).
const (
	// Mean time in a cell before a handover over all tests, and the mean
	// time between handovers walking and driving. The dwell of each band
	// keeps the ratio of the first two and is scaled so that the mean
	// time between handovers of each pattern is the measured one.
	meanDwellSub6          = 15.5 // seconds
	meanDwellMmWave        = 7.2
	meanHandoverIntWalking = 22.1
	meanHandoverIntDriving = 9.2
	minDwell               = 1500 * time.Millisecond

	// Handover mix: 329 sub6-sub6, 109 sub6-mmW, 100 mmW-sub6, 184 mmW-mmW.
	countSub6Sub6      = 329
	countSub6MmWave    = 109
	countMmWaveSub6    = 100
	countMmWaveMmWave  = 184
	countHandovers     = countSub6Sub6 + countSub6MmWave + countMmWaveSub6 + countMmWaveMmWave
	probMmWaveFromSub6 = float64(countSub6MmWave) / (countSub6Sub6 + countSub6MmWave)
	probSub6FromMmWave = float64(countMmWaveSub6) / (countMmWaveSub6 + countMmWaveMmWave)
	// The mean dwell over handovers at the measured mix, weighted by how
	// often each band is the source.
	meanDwellMix = (float64(countSub6Sub6+countSub6MmWave)*meanDwellSub6 +
		float64(countMmWaveSub6+countMmWaveMmWave)*meanDwellMmWave) / countHandovers

	// Measurement report to execution: 178.9 ms mean, 310.2 ms max.
	measLeadMean = 178.9
	measLeadSD   = 60.0
	measLeadMax  = 310.2
	// Command to execution 32.7 ms mean; interruption 27.0 ms mean.
	commandLeadMean  = 32.7
	commandLeadSD    = 8.0
	interruptionMean = 27.0
	interruptionSD   = 6.0

	// Source context release (reordering) in 18.4% of handovers.
	probContextRelease = 0.184
	// Target buffer overflow in 17.7% of handovers; "68.7% when the source
	// is mmWave", read as 68.7% of the overflows having a mmWave source
	// (the literal reading, 68.7% of mmWave-source handovers, would alone
	// exceed the 17.7% overall). With the mix above that is 30.9% of
	// mmWave-source and 9.1% of sub-6-source handovers.
	paperOverflowFromMmWave = 0.309
	paperOverflowFromSub6   = 0.091
	// Plain CUBIC overflows a target by itself in part of the handovers:
	// it fills the source's buffer, and the forwarded queue plus what
	// arrives during the interruption exceeds the target's. In the
	// testbed (plain scaled CUBIC, docs/results/eval-b177332, the 236
	// handovers without a small target buffer) that was 15.3% after a
	// sub-6 source (25/163) and 21.9% after a mmWave source (16/73); a
	// small target buffer overflowed it in 94% (17/18) and 55% (17/31) of
	// the handovers it was drawn for. Drawn for the paper's whole share on
	// top of those, small buffers had plain CUBIC lose packets at the
	// target in 26.3% of handovers (75/285) against the paper's 17.7%.
	cubicOverflowFromMmWave    = 16.0 / 73
	cubicOverflowFromSub6      = 25.0 / 163
	cubicLossOnSmallFromMmWave = 17.0 / 31
	cubicLossOnSmallFromSub6   = 17.0 / 18
)

// Shares of handovers given a small target buffer (smallTargetBuffer):
// what plain CUBIC's own overflows leave of the paper's share, so that
// plain CUBIC, not the draw, overflows the paper's share of targets.
// After a sub-6 source plain CUBIC already overflows the target by itself
// more often than the paper measured (a sub-6 buffer is one
// bandwidth-delay product, docs/testbed.md), so that source gets none.
var (
	probSmallTargetFromMmWave = smallTargetShare(paperOverflowFromMmWave, cubicOverflowFromMmWave, cubicLossOnSmallFromMmWave)
	probSmallTargetFromSub6   = smallTargetShare(paperOverflowFromSub6, cubicOverflowFromSub6, cubicLossOnSmallFromSub6)
)

// smallTargetShare is the share p of handovers to give a small target
// buffer for a sender that overflows a share natural of targets by itself
// and a share lossOnSmall of the small ones, so that its overflows make
// up paper: natural + (1-natural)·p·lossOnSmall = paper.
func smallTargetShare(paper, natural, lossOnSmall float64) float64 {
	return max(0, (paper-natural)/((1-natural)*lossOnSmall))
}

const (
	// Radio link failure with re-establishment instead of a handover
	// (the HSR study: 5-11% of disconnections), recovery about 138 ms.
	probRLF         = 0.08
	rlfRecoveryMean = 138.0
	rlfRecoverySD   = 40.0

	// A report that leads nowhere comes a third into the dwell, no
	// earlier than falseReportAfter after the procedure before it (a
	// re-establishment takes up to 400 ms), and ends at least
	// falseReportBefore before the handover after it (whose report comes
	// up to 310.2 ms before): a dwell, at least minDwell, always leaves
	// it room. An A2 is followed by the A1 of the serving cell recovering
	// 600 ms later on average, sooner where the dwell leaves less room.
	falseReportAfter  = 500 * time.Millisecond
	falseReportBefore = 400 * time.Millisecond
)

// paperPrediction is Algorithm 1 on the paper's networks (Table 4,
// section 6.3.1), per handover class: the share of its predictions that a
// handover followed (precision) and the share of the handovers it predicted
// (recall). The generator reproduces both on its signalling: before a
// handover of a class, a report of that class's trigger the network does
// not act on with probability recall·(1−precision)/precision (the false
// predictions per handover), and no report at all with probability
// 1−recall. The paper names the missed handovers of one class: from
// mmWave, the UE falls back to sub-6 after failed transmissions, with no
// report; the other classes' misses are taken alike, as handovers no
// report announced.
var paperPrediction = map[string]struct{ precision, recall float64 }{
	diag.HandoverClass(diag.BandSub6, diag.BandSub6):     {precision: 0.989, recall: 0.933},
	diag.HandoverClass(diag.BandSub6, diag.BandMmWave):   {precision: 0.919, recall: 0.932},
	diag.HandoverClass(diag.BandMmWave, diag.BandMmWave): {precision: 0.888, recall: 0.861},
	diag.HandoverClass(diag.BandMmWave, diag.BandSub6):   {precision: 0.884, recall: 0.593},
}

// Mobility patterns of the generator.
const (
	MobilityWalking = "walking"
	MobilityDriving = "driving"
)

// GenerateOptions shape a generated scenario.
type GenerateOptions struct {
	Seed     uint64
	Duration time.Duration
	Mobility string
	Scale    float64
	// MatchMix keeps the scenario's handover types at the measured mix
	// instead of drawing each independently: a corpus of a hundred
	// handovers drawn independently strays ten points from it.
	MatchMix bool
	// Traces, when given, give the mmWave cells real capacity: each cell
	// gets a TraceWindow-long stretch of a trace (of the mobility pattern
	// when the names say it) whose mean reaches MmWaveTraceMinMbps.
	Traces []Trace
	// TracesFrom names the folder of Traces in Flags.
	TracesFrom string
	// Leads is the lead model: LeadsPaper (default) or LeadsCaptures.
	Leads string
	// LANReceiver puts the receiver behind the UE (ReceiverLAN): the
	// CPE case, where the testbed reads the receiver's ACKs before the
	// UE's datapath and so knows exactly which duplicates m2ho dropped.
	LANReceiver bool
	// CellBuffer sizes every cell's buffer as the time its band's mean
	// capacity (sub-6 150 Mbit/s, mmWave 1 Gbit/s at full scale) takes
	// to drain it; 0 keeps the defaults, 1.5 MB sub-6 (80 ms) and 12 MB
	// mmWave (96 ms). No measurement fixes a cell's buffer, so the
	// fidelity study varies it.
	CellBuffer time.Duration
	// SourceDiscard has the source discard the packets a context release
	// holds back instead of forwarding them (ContextRelease.Discard).
	// The scenario is otherwise the same, draw for draw.
	SourceDiscard bool
	// Route makes every handover enter a cell the scenario has not used
	// before, as a vehicle on a line through a city, instead of moving
	// among a few cells: the fleet evaluation's corpus, where most
	// handovers are first visits.
	Route bool
}

// Mean capacities of the generated cells at full scale, in Mbit/s, and
// their default buffers in bytes.
const (
	sub6MeanMbps        = 150
	mmWaveMeanMbps      = 1000
	defaultSub6Buffer   = 1_500_000
	defaultMmWaveBuffer = 12_000_000
)

// cellBufferBytes is the full-scale buffer of a cell of a band whose
// mean capacity is mbps.
func (g *generator) cellBufferBytes(mbps float64, byDefault int) int {
	if g.cellBuffer <= 0 {
		return byDefault
	}
	return int(mbps * 1e6 / 8 * g.cellBuffer.Seconds())
}

// Trace is a capacity trace as the generator cuts it: the mean rate of
// each second, in Mbit/s at full scale.
type Trace struct {
	Name   string
	Path   string
	Format string
	Mbps   []float64
}

// Trace formats.
const (
	TraceLumos5G  = "lumos5g"
	TraceMahimahi = "mahimahi"
)

// TraceWindow is how much of a trace a generated mmWave cell loops over.
const TraceWindow = 60

// MmWaveTraceMinMbps is the mean rate a trace window needs to stand for a
// mmWave cell: far above the paper's 121.5 Mbit/s sub-6 TCP, below its
// 993 Mbit/s mmWave mean. Lumos5G traces also hold stretches on LTE.
const MmWaveTraceMinMbps = 300

// Flags are the gen-scenario flags that generate with these options.
func (o GenerateOptions) Flags() string {
	flags := fmt.Sprintf("--seed %d --duration %v --mobility %s --scale %g", o.Seed, o.Duration, o.Mobility, o.Scale)
	if o.MatchMix {
		flags += " --match-mix"
	}
	if o.TracesFrom != "" {
		flags += " --traces " + o.TracesFrom
	}
	if o.Leads != "" && o.Leads != LeadsPaper {
		flags += " --leads " + o.Leads
	}
	if o.LANReceiver {
		flags += " --lan-receiver"
	}
	if o.CellBuffer > 0 {
		flags += fmt.Sprintf(" --cell-buffer %v", o.CellBuffer)
	}
	if o.SourceDiscard {
		flags += " --source-discard"
	}
	if o.Route {
		flags += " --route"
	}
	return flags
}

// Generate draws a scenario from the measured statistics. The same options
// give the same scenario.
func Generate(opts GenerateOptions) (*Scenario, error) {
	if opts.Duration < 10*time.Second {
		return nil, errors.New("duration must be at least 10s")
	}
	var dwellFactor float64
	switch opts.Mobility {
	case MobilityWalking, "":
		opts.Mobility = MobilityWalking
		dwellFactor = meanHandoverIntWalking / meanDwellMix
	case MobilityDriving:
		dwellFactor = meanHandoverIntDriving / meanDwellMix
	default:
		return nil, fmt.Errorf("mobility %q is not walking or driving", opts.Mobility)
	}
	if opts.Scale == 0 {
		opts.Scale = 1
	}
	g := generator{cellBuffer: opts.CellBuffer, sourceDiscard: opts.SourceDiscard, rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x6d32686f)),
		scale: opts.Scale, windows: traceWindows(opts.Traces, opts.Mobility)}
	name := fmt.Sprintf("generated-%s-seed%d", opts.Mobility, opts.Seed)
	if len(opts.Traces) > 0 && len(g.windows) == 0 {
		return nil, fmt.Errorf("no trace has %d s with a mean of at least %d Mbit/s for a mmWave cell", TraceWindow, MmWaveTraceMinMbps)
	}
	switch opts.Leads {
	case "", LeadsPaper:
	case LeadsCaptures:
		leads, err := CaptureLeads()
		if err != nil {
			return nil, err
		}
		if len(leads) == 0 {
			return nil, errors.New("no lead measured on captures")
		}
		g.leads = leads
	default:
		return nil, fmt.Errorf("lead model %q is not %s or %s", opts.Leads, LeadsPaper, LeadsCaptures)
	}
	if g.leads != nil {
		name += "-" + LeadsCaptures + "-leads"
	}
	if opts.Route {
		name += "-route"
	}
	sc := &Scenario{
		Name:        name,
		Description: fmt.Sprintf("%s, %v, drawn from data/handover-timing.md statistics", opts.Mobility, opts.Duration),
		Duration:    opts.Duration,
		Scale:       opts.Scale,
		Traffic:     Traffic{Receiver: ReceiverUE, Flows: 1},
	}
	if opts.LANReceiver {
		sc.Traffic.Receiver = ReceiverLAN
	}
	sub6 := g.cells(sc, diag.BandSub6, 3)
	mmwave := g.cells(sc, diag.BandMmWave, 4)
	cellsOf := func(band diag.Band) []Cell {
		if band == diag.BandMmWave {
			return mmwave
		}
		return sub6
	}
	serving := sub6[0]
	sc.InitialCell = serving.Name
	var mix mixTracker
	at := time.Duration(0)
	for {
		mean := meanDwellSub6
		if serving.Band == diag.BandMmWave {
			mean = meanDwellMmWave
		}
		dwell := max(time.Duration(g.rng.ExpFloat64()*mean*dwellFactor*float64(time.Second)).Round(time.Millisecond), minDwell)
		dwellStart := at
		at += dwell
		if at+time.Second > opts.Duration {
			break
		}
		toMmWave := serving.Band == diag.BandSub6 && g.rng.Float64() < probMmWaveFromSub6 ||
			serving.Band == diag.BandMmWave && g.rng.Float64() >= probSub6FromMmWave
		if opts.MatchMix {
			toMmWave = mix.next(serving.Band, toMmWave)
		}
		band := diag.BandSub6
		if toMmWave {
			band = diag.BandMmWave
		}
		target := g.other(cellsOf(band), serving)
		if opts.Route {
			target = g.cells(sc, band, 1)[0]
		}
		if g.rng.Float64() < probRLF {
			sc.Timeline = append(sc.Timeline, Event{
				At: at, Type: TypeRLF, Target: target.Name,
				Interruption: g.ms(rlfRecoveryMean, rlfRecoverySD, 60, 400),
			})
		} else {
			class := paperPrediction[diag.HandoverClass(serving.Band, target.Band)]
			if g.rng.Float64() < class.recall*(1-class.precision)/class.precision {
				earliest := dwellStart + falseReportAfter
				report := g.falseReport(serving, target.Band, g.other(cellsOf(target.Band), serving), at-falseReportBefore-earliest)
				latest := at - falseReportBefore - report.Reports[len(report.Reports)-1].After
				report.At = min(max(dwellStart+dwell/3, earliest), latest)
				sc.Timeline = append(sc.Timeline, report)
			}
			ho := g.handover(at, serving, target)
			ho.Unreported = g.rng.Float64() >= class.recall
			if ho.Unreported {
				ho.MeasEvent, ho.MeasLead = "", ho.CommandLead
			}
			sc.Timeline = append(sc.Timeline, ho)
			mix.count(serving.Band, target.Band)
		}
		serving = target
	}
	sc.applyDefaults()
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("generated scenario is invalid: %w", err)
	}
	return sc, nil
}

// measuredMix is the handover count of each class in the measurements.
var measuredMix = map[string]int{
	diag.HandoverClass(diag.BandSub6, diag.BandSub6):     countSub6Sub6,
	diag.HandoverClass(diag.BandSub6, diag.BandMmWave):   countSub6MmWave,
	diag.HandoverClass(diag.BandMmWave, diag.BandSub6):   countMmWaveSub6,
	diag.HandoverClass(diag.BandMmWave, diag.BandMmWave): countMmWaveMmWave,
}

// mixTracker steers the handover types towards the measured mix: from
// the serving band, the type whose share lags its target most is next;
// the independent draw decides when both are on target.
type mixTracker struct {
	counts map[string]int
	total  int
}

func (m *mixTracker) next(serving diag.Band, drawn bool) (toMmWave bool) {
	n := float64(m.total + 1)
	lag := func(target diag.Band) float64 {
		class := diag.HandoverClass(serving, target)
		return n*float64(measuredMix[class])/countHandovers - float64(m.counts[class])
	}
	toMmWaveLag, toSub6Lag := lag(diag.BandMmWave), lag(diag.BandSub6)
	return toMmWaveLag > toSub6Lag || toMmWaveLag == toSub6Lag && drawn
}

// count records a handover (a radio link failure does not count).
func (m *mixTracker) count(source, target diag.Band) {
	if m.counts == nil {
		m.counts = map[string]int{}
	}
	m.counts[diag.HandoverClass(source, target)]++
	m.total++
}

type generator struct {
	rng *rand.Rand
	// scale is the scenario's scale factor: buffers shrink with it.
	scale float64
	// cellBuffer is GenerateOptions.CellBuffer.
	cellBuffer time.Duration
	// sourceDiscard is GenerateOptions.SourceDiscard.
	sourceDiscard bool
	// windows are the trace stretches mmWave cells may take.
	windows []traceWindow
	// leads, when set, are drawn from instead of the paper's means.
	leads []Lead
}

// traceWindow is TraceWindow seconds of a trace from start.
type traceWindow struct {
	trace *Trace
	start int
}

// traceWindows lists every stretch of the traces that can stand for a
// mmWave cell, from the traces of the mobility pattern when any trace
// names it (Lumos5G's end in _walking or _driving), else from all.
func traceWindows(traces []Trace, mobility string) []traceWindow {
	var pool []*Trace
	for i := range traces {
		if strings.Contains(traces[i].Name, mobility) {
			pool = append(pool, &traces[i])
		}
	}
	if len(pool) == 0 {
		for i := range traces {
			pool = append(pool, &traces[i])
		}
	}
	var windows []traceWindow
	for _, t := range pool {
		n := min(TraceWindow, len(t.Mbps))
		sum := 0.0
		for i, v := range t.Mbps {
			sum += v
			if i >= n {
				sum -= t.Mbps[i-n]
			}
			if i >= n-1 && sum/float64(n) >= MmWaveTraceMinMbps {
				windows = append(windows, traceWindow{trace: t, start: i - n + 1})
			}
		}
	}
	return windows
}

// traceCapacity cuts a random window for a mmWave cell.
func (g *generator) traceCapacity() CapacitySpec {
	w := g.windows[g.rng.IntN(len(g.windows))]
	n := min(TraceWindow, len(w.trace.Mbps))
	spec := CapacitySpec{Origin: fmt.Sprintf("%s trace %s, seconds %d-%d", w.trace.Format, w.trace.Name, w.start, w.start+n)}
	for _, v := range w.trace.Mbps[w.start : w.start+n] {
		spec.Steps = append(spec.Steps, Step{Duration: time.Second, Mbps: math.Round(v*10) / 10})
	}
	return spec
}

// ms draws a normal duration in milliseconds, clamped to [lo, hi].
func (g *generator) ms(mean, sd, lo, hi float64) time.Duration {
	v := math.Min(math.Max(mean+sd*g.rng.NormFloat64(), lo), hi)
	return time.Duration(v * float64(time.Millisecond)).Round(100 * time.Microsecond)
}

// cells makes n cells of a band with synthetic capacity profiles: sub-6
// around the paper's 121.5 Mbit/s TCP (capacity a little above), mmWave
// around its 993 Mbit/s UDP average, varying second by second.
func (g *generator) cells(sc *Scenario, band diag.Band, n int) []Cell {
	var out []Cell
	// Numbered after the band's cells so far, for the cells a route adds.
	first := 0
	for _, c := range sc.Cells {
		if c.Band == band {
			first++
		}
	}
	for i := first; i < first+n; i++ {
		c := Cell{RAT: diag.RATNR, Band: band, DelayDown: 35 * time.Millisecond, DelayUp: 35 * time.Millisecond}
		var base, spread float64
		if band == diag.BandSub6 {
			c.Name = fmt.Sprintf("sub6-%d", i+1)
			c.PCI, c.ARFCN = uint16(100+i), 627264
			base, spread = sub6MeanMbps, 30
			c.BufferBytes = g.cellBufferBytes(base, defaultSub6Buffer)
		} else {
			c.Name = fmt.Sprintf("mmwave-%d", i+1)
			c.PCI, c.ARFCN = uint16(200+i), 2079167
			base, spread = mmWaveMeanMbps, 250
			c.BufferBytes = g.cellBufferBytes(base, defaultMmWaveBuffer)
		}
		if band == diag.BandMmWave && len(g.windows) > 0 {
			c.Capacity = g.traceCapacity()
		} else {
			for range 10 {
				mbps := math.Max(base+spread*g.rng.NormFloat64(), base/4)
				c.Capacity.Steps = append(c.Capacity.Steps, Step{Duration: time.Second, Mbps: math.Round(mbps)})
			}
		}
		out = append(out, c)
	}
	sc.Cells = append(sc.Cells, out...)
	return out
}

func (g *generator) other(pool []Cell, serving Cell) Cell {
	for {
		c := pool[g.rng.IntN(len(pool))]
		if c.Name != serving.Name {
			return c
		}
	}
}

// handover draws one handover's procedure. In NSA networks a mmWave change
// is an SCG procedure of the LTE anchor: addition (B1), release (A2) or
// change (A3); sub-6 to sub-6 is a PCell handover (A3).
func (g *generator) handover(at time.Duration, source, target Cell) Event {
	e := Event{At: at, Type: TypeHandover, Source: source.Name, Target: target.Name}
	switch {
	case source.Band == diag.BandSub6 && target.Band == diag.BandSub6:
		e.Kind, e.MeasEvent = diag.HOPCell, diag.EventA3
	case source.Band == diag.BandSub6:
		e.Kind, e.MeasEvent = diag.HOSCGAdd, diag.EventB1
	case target.Band == diag.BandMmWave:
		e.Kind, e.MeasEvent = diag.HOSCGChange, diag.EventA3
	default:
		e.Kind, e.MeasEvent = diag.HOSCGRelease, diag.EventA2
	}
	if len(g.leads) > 0 {
		// A capture sees the command and the random access that
		// completes it, not the start of the interruption: the
		// command's lead to execution is taken as its time to
		// completion, of the same size as the paper's 32.7 ms.
		l := g.leads[g.rng.IntN(len(g.leads))]
		e.CommandLead = max(l.CommandToCompletion, 5*time.Millisecond).Round(100 * time.Microsecond)
		e.MeasLead = (max(l.ReportToCommand, time.Millisecond) + e.CommandLead).Round(100 * time.Microsecond)
	} else {
		e.CommandLead = g.ms(commandLeadMean, commandLeadSD, 15, 60)
		e.MeasLead = max(g.ms(measLeadMean, measLeadSD, 40, measLeadMax), e.CommandLead+10*time.Millisecond)
	}
	e.Interruption = g.ms(interruptionMean, interruptionSD, 15, 50)
	if g.rng.Float64() < probContextRelease {
		e.ContextRelease = &ContextRelease{HeldPackets: 2 + g.rng.IntN(15), Discard: g.sourceDiscard}
	}
	small := probSmallTargetFromSub6
	if source.Band == diag.BandMmWave {
		small = probSmallTargetFromMmWave
	}
	// Both draws whatever the outcome, so that the rest of the scenario
	// does not depend on it.
	draw, size := g.rng.Float64(), g.rng.Float64()
	if draw < small {
		e.TargetBufferBytes = g.smallTargetBuffer(source, target, size)
	}
	return e
}

// Bounds of the buffer a target grants during an overflowing handover, as
// a fraction of the smaller of its own buffer and the source's
// bandwidth-delay product.
const (
	smallTargetBufferMin = 1.0 / 6
	smallTargetBufferMax = 2.0 / 3
)

// smallTargetBuffer sizes, from draw (uniform in [0, 1)), the room the
// target grants during a handover that overflows it (finding 3): a sixth
// to two thirds of the smaller of the target's own buffer and the
// source's bandwidth-delay product. The override replaces the target's
// buffer while the procedure lasts, so it has to be below that buffer,
// or the handover would get more room than an ordinary one. Under the
// source's bandwidth-delay product, CUBIC's
// window (which exceeds it once it fills the source's buffer) overflows
// it with the forwarded queue and what arrives during the interruption,
// whatever the target's band: that is what the flag promises. With the
// cells of cells() this is about 220 to 870 kB after a sub-6 source
// (150 Mbit/s × 70 ms; none is drawn there at the measured rates,
// smallTargetShare), 250 kB to 1 MB from mmWave to sub-6 (the target's
// 1.5 MB) and about 1.5 to 5.8 MB between mmWave cells (1 Gbit/s × 70
// ms): the larger the source's window, the more is lost, as the paper
// sees more overflows after a mmWave source. It is never below one packet
// at the scenario's scale, which would drop everything; when even that
// does not fit below the target's buffer, there is no override.
func (g *generator) smallTargetBuffer(source, target Cell, draw float64) int {
	f := smallTargetBufferMin + (smallTargetBufferMax-smallTargetBufferMin)*draw
	if ScaledBytes(target.BufferBytes, g.scale) <= PacketBytes {
		return 0
	}
	room := float64(target.BufferBytes)
	if mbps, ok := meanMbps(source.Capacity); ok {
		room = min(room, mbps*1e6/8*(source.DelayDown+source.DelayUp).Seconds())
	}
	onePacket := int(math.Ceil(PacketBytes / g.scale))
	return max(int(f*room), onePacket)
}

// meanMbps is the mean rate of a synthetic capacity profile; ok is false
// for a trace.
func meanMbps(c CapacitySpec) (mbps float64, ok bool) {
	if c.ConstantMbps > 0 {
		return c.ConstantMbps, true
	}
	var bits float64
	var total time.Duration
	for _, s := range c.Steps {
		bits += s.Mbps * s.Duration.Seconds()
		total += s.Duration
	}
	if total <= 0 {
		return 0, false
	}
	return bits / total.Seconds(), true
}

// falseReport is what announces a handover from serving to a cell of
// band, which the network does not act on: on mmWave towards sub-6 an A2
// (the cell is failing), then within room the A1 of its recovery; from
// sub-6 towards mmWave a B1 naming neighbor; between cells of one band an
// A3 naming it.
func (g *generator) falseReport(serving Cell, band diag.Band, neighbor Cell, room time.Duration) Event {
	e := Event{Type: TypeReport}
	switch {
	case serving.Band == diag.BandMmWave && band == diag.BandSub6:
		e.Reports = []Report{{Event: diag.EventA2}, {After: min(g.ms(600, 200, 200, 1200), room), Event: diag.EventA1}}
	case serving.Band == diag.BandSub6 && band == diag.BandMmWave:
		e.Reports = []Report{{Event: diag.EventB1, Neighbor: neighbor.Name}}
	default:
		e.Reports = []Report{{Event: diag.EventA3, Neighbor: neighbor.Name}}
	}
	return e
}

// GenerateStatic draws the paper's static check: one mmWave cell, its
// capacity from the traces as Generate would give it (synthetic without
// traces), and no handover for the whole duration.
func GenerateStatic(opts GenerateOptions) (*Scenario, error) {
	if opts.Duration < 10*time.Second {
		return nil, errors.New("duration must be at least 10s")
	}
	if opts.Scale == 0 {
		opts.Scale = 1
	}
	g := generator{cellBuffer: opts.CellBuffer, rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x73746174)), scale: opts.Scale,
		windows: traceWindows(opts.Traces, opts.Mobility)}
	if len(opts.Traces) > 0 && len(g.windows) == 0 {
		return nil, fmt.Errorf("no trace has %d s with a mean of at least %d Mbit/s for a mmWave cell", TraceWindow, MmWaveTraceMinMbps)
	}
	sc := &Scenario{
		Name:        fmt.Sprintf("static-mmwave-seed%d", opts.Seed),
		Description: fmt.Sprintf("static on one mmWave cell, %v", opts.Duration),
		Duration:    opts.Duration,
		Scale:       opts.Scale,
		Traffic:     Traffic{Receiver: ReceiverUE, Flows: 1},
	}
	cell := g.cells(sc, diag.BandMmWave, 1)[0]
	sc.InitialCell = cell.Name
	sc.applyDefaults()
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("generated scenario is invalid: %w", err)
	}
	return sc, nil
}
