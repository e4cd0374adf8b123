package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/scaledcc"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/traffic"
)

// SimilarityConfig is the link on which the scaled testbed is checked for
// dynamic similarity: a constant full-scale capacity and delay with a
// droptail buffer of one bandwidth-delay product, so that CUBIC saws
// between loss epochs whose length is set by its constants.
type SimilarityConfig struct {
	FullMbps    float64
	OneWayDelay time.Duration
	Duration    time.Duration
	// Scale is the reduced scale to compare with full scale.
	Scale  float64
	OutDir string
	Log    *slog.Logger
}

// SimilarityRun is one sender at one scale on that link, its windows
// expressed at full scale (divided by the scale).
type SimilarityRun struct {
	Sender       string  `json:"sender"`
	Scale        float64 `json:"scale"`
	CapacityMbps float64 `json:"capacity_mbps"`
	// GoodputRatio is the IP rate over the capacity after the warm-up.
	GoodputRatio float64 `json:"goodput_over_capacity"`
	Retrans      uint32  `json:"retransmissions"`
	// Reductions are loss episodes after the warm-up (retransmissions
	// after at least a second without any); Epoch is the mean time
	// between them, Recovery the mean time a reduced window takes to
	// regain 95% of what it had.
	Reductions int           `json:"reductions"`
	Epoch      time.Duration `json:"mean_epoch_ns"`
	Recovery   time.Duration `json:"mean_recovery_ns"`
	// MeanCwndFull and MaxCwndFull are the window after the warm-up in
	// full-scale segments.
	MeanCwndFull float64 `json:"mean_cwnd_full_scale"`
	MaxCwndFull  float64 `json:"max_cwnd_full_scale"`
}

// similarityWarmup leaves slow start and the first loss out.
const similarityWarmup = 10 * time.Second

// MeasureSimilarity runs the kernel's CUBIC and scaled CUBIC at full
// scale and at cfg.Scale: at full scale the two must agree (scaled CUBIC
// is CUBIC there), and scaled CUBIC at the reduced scale must keep the
// full-scale epochs and windows, where the kernel's CUBIC runs its epochs
// cbrt(1/scale) times faster.
func MeasureSimilarity(ctx context.Context, cfg SimilarityConfig) ([]SimilarityRun, error) {
	if cfg.Duration <= 2*similarityWarmup {
		return nil, fmt.Errorf("duration %v is too short: the first %v are warm-up", cfg.Duration, similarityWarmup)
	}
	type setup struct {
		sender string
		scale  float64
	}
	setups := []setup{{"cubic", 1}, {scaledcc.Family, 1}, {scaledcc.Family, cfg.Scale}, {"cubic", cfg.Scale}}
	var runs []SimilarityRun
	for _, s := range setups {
		run, err := similarityRun(ctx, cfg, s.sender, s.scale)
		if err != nil {
			return nil, fmt.Errorf("%s at scale %g: %w", s.sender, s.scale, err)
		}
		runs = append(runs, run)
	}
	return runs, nil
}

func similarityRun(ctx context.Context, cfg SimilarityConfig, sender string, scale float64) (SimilarityRun, error) {
	bdp := cfg.FullMbps * 1e6 / 8 * (2 * cfg.OneWayDelay).Seconds()
	sc := &scenario.Scenario{
		Name: "similarity", Duration: cfg.Duration, Scale: scale, InitialCell: "constant",
		Cells: []scenario.Cell{{
			Name: "constant", RAT: diag.RATNR, Band: diag.BandSub6, PCI: 1, ARFCN: 627264,
			Capacity:    scenario.CapacitySpec{ConstantMbps: cfg.FullMbps},
			BufferBytes: int(bdp),
			DelayDown:   cfg.OneWayDelay, DelayUp: cfg.OneWayDelay,
		}},
	}
	raw, err := sc.Marshal()
	if err != nil {
		return SimilarityRun{}, err
	}
	if sc, err = scenario.Parse(raw); err != nil {
		return SimilarityRun{}, err
	}
	v, err := ParseVariant(sender)
	if err != nil {
		return SimilarityRun{}, err
	}
	// A run already in the output directory is read again, not repeated.
	dir := filepath.Join(cfg.OutDir, fmt.Sprintf("%s-scale%g", sender, scale))
	ms, err := ReadMeasurements(filepath.Join(dir, MeasurementsFile))
	if err != nil {
		res, err := Run(ctx, Config{Scenario: sc, Variant: v, OutDir: dir, Log: cfg.Log})
		if err != nil {
			return SimilarityRun{}, err
		}
		ms = res.Measurements
	}
	run, err := epochs(ms, scale, cfg.FullMbps*scale*1e6)
	if err != nil {
		return SimilarityRun{}, err
	}
	run.Sender, run.Scale, run.CapacityMbps = sender, scale, cfg.FullMbps*scale
	return run, nil
}

// episodeGap separates two loss episodes: retransmissions closer than
// this belong to one recovery.
const episodeGap = time.Second

// epochs reads the loss epochs of a CUBIC sawtooth from the TCP_INFO
// series and the goodput's share of the capacity, all after the warm-up.
// A loss episode starts with retransmissions after at least episodeGap
// without any; ssthresh does not mark them, as it often takes the same
// value at every loss of a steady sawtooth.
func epochs(m *traffic.Measurements, scale, capacityBps float64) (SimilarityRun, error) {
	var r SimilarityRun
	var samples []traffic.TCPInfoSample
	for _, s := range m.TCPInfo {
		if s.At >= similarityWarmup {
			samples = append(samples, s)
		}
	}
	if len(samples) < 2 || len(m.Goodput) < 2 {
		return r, errors.New("too few samples after the warm-up")
	}
	var cwndSum float64
	var reductions []int
	lastRetrans := time.Duration(-1)
	for i, s := range samples {
		cwndSum += float64(s.Cwnd)
		r.MaxCwndFull = max(r.MaxCwndFull, float64(s.Cwnd)/scale)
		if i > 0 && s.Retrans > samples[i-1].Retrans {
			if lastRetrans < 0 || s.At-lastRetrans >= episodeGap {
				reductions = append(reductions, i)
			}
			lastRetrans = s.At
		}
	}
	r.MeanCwndFull = cwndSum / float64(len(samples)) / scale
	r.Reductions = len(reductions)
	r.Retrans = samples[len(samples)-1].Retrans - samples[0].Retrans
	if len(reductions) > 1 {
		first, last := samples[reductions[0]].At, samples[reductions[len(reductions)-1]].At
		r.Epoch = (last - first) / time.Duration(len(reductions)-1)
	}
	// Recovery: from an episode's start to the first sample, after the
	// window's low point in the second that follows (proportional rate
	// reduction lowers it over a round or more), whose window is back to
	// 95% of the largest in the 200 ms before the episode.
	var recovered int
	var recoverySum time.Duration
	for _, i := range reductions {
		var before uint32
		for j := i - 1; j >= 0 && samples[i].At-samples[j].At <= 200*time.Millisecond; j-- {
			before = max(before, samples[j].Cwnd)
		}
		low := i
		for j := i; j < len(samples) && samples[j].At-samples[i].At <= episodeGap; j++ {
			if samples[j].Cwnd < samples[low].Cwnd {
				low = j
			}
		}
		for j := low + 1; j < len(samples); j++ {
			if float64(samples[j].Cwnd) >= 0.95*float64(before) {
				recoverySum += samples[j].At - samples[i].At
				recovered++
				break
			}
		}
	}
	if recovered > 0 {
		r.Recovery = recoverySum / time.Duration(recovered)
	}
	first, last := m.Goodput[0], m.Goodput[len(m.Goodput)-1]
	for _, g := range m.Goodput {
		if g.At >= similarityWarmup {
			first = g
			break
		}
	}
	if last.At > first.At {
		r.GoodputRatio = float64(last.Bytes-first.Bytes) * 8 * traffic.IPPerPayload / (last.At - first.At).Seconds() / capacityBps
	}
	return r, nil
}

// WriteSimilarity prints the runs as a table.
func WriteSimilarity(w io.Writer, runs []SimilarityRun) {
	fmt.Fprintln(w, "| sender | scale | capacity (Mbit/s) | IP rate / capacity | reductions | mean epoch (s) | mean recovery to 95% (s) | mean cwnd (full-scale segments) | max cwnd (full-scale) | retransmissions |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range runs {
		fmt.Fprintf(w, "| %s | %g | %.1f | %.1f%% | %d | %.1f | %.1f | %.0f | %.0f | %d |\n",
			r.Sender, r.Scale, r.CapacityMbps, 100*r.GoodputRatio, r.Reductions, r.Epoch.Seconds(), r.Recovery.Seconds(),
			r.MeanCwndFull, r.MaxCwndFull, r.Retrans)
	}
}
