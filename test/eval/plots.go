package eval

import (
	"fmt"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/m2ho/m2ho/pkg/diag"
	"github.com/m2ho/m2ho/test/report"
)

// Plot files of the results.
const (
	plotThroughputCDF  = "cdf-throughput.png"
	plotConvergenceCDF = "cdf-convergence.png"
	plotLossFree       = "loss-free.png"
)

func writePlots(out string, m *Manifest, a *Analysis) error {
	variants := m.AllVariants()
	throughput := func(h report.Handover) float64 { return h.ThroughputBps / 1e6 }
	convergence := func(h report.Handover) float64 { return h.ConvergenceTime.Seconds() }
	if err := plotCDF(filepath.Join(out, plotThroughputCDF), "CDF of handover throughput", "throughput over [-5 s, +5 s] (scaled Mbit/s)", a, variants, throughput); err != nil {
		return err
	}
	if err := plotCDF(filepath.Join(out, plotConvergenceCDF), "CDF of convergence time (capped at the next handover)", "convergence time (s)", a, variants, convergence); err != nil {
		return err
	}
	return plotLossFreeBars(filepath.Join(out, plotLossFree), a, variants)
}

func plotCDF(path, title, xlabel string, a *Analysis, variants []string, value func(report.Handover) float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "fraction of handovers"
	p.Legend.Top = false
	p.Legend.Left = false
	for i, v := range variants {
		hs := a.Handovers[v]
		xs := make([]float64, len(hs))
		for j, h := range hs {
			xs[j] = value(h)
		}
		slices.Sort(xs)
		pts := make(plotter.XYs, len(xs))
		for j, x := range xs {
			pts[j] = plotter.XY{X: x, Y: float64(j+1) / float64(len(xs))}
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("plotting %s: %w", v, err)
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i / 7)
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(report.Title(v), line)
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	return nil
}

func plotLossFreeBars(path string, a *Analysis, variants []string) error {
	p := plot.New()
	p.Title.Text = "Loss-free handovers (no retransmission from the report to 2 s after execution)"
	p.Y.Label.Text = "loss-free handovers (%)"
	values := make(plotter.Values, len(variants))
	names := make([]string, len(variants))
	for i, v := range variants {
		if s, ok := a.summary(v, diag.AllClasses); ok && s.Handovers > 0 {
			values[i] = 100 * float64(s.LossFree) / float64(s.Handovers)
		}
		names[i] = report.Title(v)
	}
	bars, err := plotter.NewBarChart(values, vg.Points(28))
	if err != nil {
		return fmt.Errorf("plotting loss-free handovers: %w", err)
	}
	bars.Color = plotutil.Color(1)
	p.Add(bars)
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = 0.5
	p.X.Tick.Label.XAlign = -1
	p.Y.Max = 100
	if err := p.Save(10*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	return nil
}
