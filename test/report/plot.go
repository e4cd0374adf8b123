package report

import (
	"fmt"
	"image/color"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/m2ho/m2ho/test/emu"
	"github.com/m2ho/m2ho/test/scenario"
	"github.com/m2ho/m2ho/test/traffic"
)

// Run is one variant's run, as the plots need it.
type Run struct {
	Variant      string
	Measurements *traffic.Measurements
}

var palette = []color.Color{
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
}

var capacityColor = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}
var handoverColor = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}

// CapacitySeries is the capacity the UE's serving cell offers over the run
// (zero during interruptions), averaged per goodput period, in bit/s.
func CapacitySeries(sc *scenario.Scenario, truth *emu.GroundTruth, until time.Duration) (plotter.XYs, error) {
	capacities, err := emu.CellCapacities(sc)
	if err != nil {
		return nil, err
	}
	var xy plotter.XYs
	for t := traffic.GoodputPeriod; t <= until; t += traffic.GoodputPeriod {
		from := t - traffic.GoodputPeriod
		serving, bytes := sc.InitialCell, 0.0
		// Walk the procedures, adding each stretch's capacity.
		at := from
		for _, ho := range truth.Handovers {
			if ho.ExecAt >= t {
				break
			}
			if ho.ExecAt > at {
				bytes += capacities[serving].Bytes(at, ho.ExecAt)
			}
			at = max(at, ho.CompleteAt)
			serving = ho.Target
		}
		if at < t {
			bytes += capacities[serving].Bytes(at, t)
		}
		xy = append(xy, plotter.XY{X: t.Seconds(), Y: bytes * 8 / traffic.GoodputPeriod.Seconds()})
	}
	return xy, nil
}

// PlotRuns draws goodput (with the serving cell's capacity) and the
// sender's cwnd over time for each run, handovers marked, into a PNG.
func PlotRuns(path, title string, sc *scenario.Scenario, truth *emu.GroundTruth, runs []Run) error {
	until := time.Duration(0)
	for _, r := range runs {
		if n := len(r.Measurements.Goodput); n > 0 {
			until = max(until, r.Measurements.Goodput[n-1].At)
		}
	}
	capacity, err := CapacitySeries(sc, truth, until)
	if err != nil {
		return err
	}
	goodput := plot.New()
	goodput.Title.Text = title
	goodput.X.Label.Text = "time (s)"
	goodput.Y.Label.Text = "goodput, 100-ms means (Mbit/s)"
	// Top left: the run starts before any handover, so the corner is free.
	goodput.Legend.Top = true
	goodput.Legend.Left = true
	goodput.Add(plotter.NewGrid())
	capLine, err := plotter.NewLine(scaleY(capacity, 1e-6))
	if err != nil {
		return fmt.Errorf("capacity line: %w", err)
	}
	capLine.Color = capacityColor
	capLine.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	goodput.Add(capLine)
	goodput.Legend.Add(fmt.Sprintf("capacity (scale %.2g)", sc.Scale), capLine)

	cwnd := plot.New()
	cwnd.X.Label.Text = "time (s)"
	cwnd.Y.Label.Text = "sender cwnd (segments)"
	cwnd.Legend.Top = true
	cwnd.Legend.Left = true
	cwnd.Add(plotter.NewGrid())

	for i, r := range runs {
		c := palette[i%len(palette)]
		at, bps := r.Measurements.GoodputSeries()
		xy := make(plotter.XYs, len(at))
		for j := range at {
			xy[j] = plotter.XY{X: at[j].Seconds(), Y: bps[j] / 1e6}
		}
		line, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("goodput line: %w", err)
		}
		line.Color = c
		line.Width = vg.Points(1.2)
		goodput.Add(line)
		goodput.Legend.Add(Title(r.Variant), line)

		var cw plotter.XYs
		for _, s := range r.Measurements.TCPInfo {
			if s.Flow == 0 {
				cw = append(cw, plotter.XY{X: s.At.Seconds(), Y: float64(s.Cwnd)})
			}
		}
		if len(cw) > 0 {
			cl, err := plotter.NewLine(cw)
			if err != nil {
				return fmt.Errorf("cwnd line: %w", err)
			}
			cl.Color = c
			cl.Width = vg.Points(1.2)
			cwnd.Add(cl)
			cwnd.Legend.Add(Title(r.Variant), cl)
		}
	}
	// A receiver that stalls and then drains makes 100-ms spikes far above
	// capacity; clip them so the handovers stay readable.
	capMax := 0.0
	for _, xy := range capacity {
		capMax = max(capMax, xy.Y/1e6)
	}
	if capMax > 0 {
		goodput.Y.Max = min(goodput.Y.Max, 1.3*capMax)
	}
	for _, p := range []*plot.Plot{goodput, cwnd} {
		p.X.Min = 0
		p.X.Max = until.Seconds()
		p.Y.Min = 0
		if err := markHandovers(p, truth, p == goodput); err != nil {
			return err
		}
	}

	const width, height = 30 * vg.Centimeter, 20 * vg.Centimeter
	img := vgimg.New(width, height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(10)}
	canvases := plot.Align([][]*plot.Plot{{goodput}, {cwnd}}, tiles, dc)
	goodput.Draw(canvases[0][0])
	cwnd.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot file: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", path, err)
	}
	return nil
}

func scaleY(xy plotter.XYs, f float64) plotter.XYs {
	out := make(plotter.XYs, len(xy))
	for i, p := range xy {
		out[i] = plotter.XY{X: p.X, Y: p.Y * f}
	}
	return out
}

// markHandovers draws a vertical line at each execution, labelled with
// the handover class on the plot that carries labels.
func markHandovers(p *plot.Plot, truth *emu.GroundTruth, labelled bool) error {
	p.Y.Max = max(p.Y.Max, 1) * 1.15
	var labels plotter.XYLabels
	for i, ho := range truth.Handovers {
		x := ho.ExecAt.Seconds()
		line, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: p.Y.Max}})
		if err != nil {
			return fmt.Errorf("handover marker: %w", err)
		}
		line.Color = handoverColor
		line.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(line)
		if i == 0 && labelled {
			p.Legend.Add("handover execution", line)
		}
		text := ho.Class
		if ho.Procedure == emu.ProcedureRLF {
			text = "RLF"
		}
		if ho.Reordered {
			text += " (reorder)"
		}
		// Below the legend, alternating heights so neighbours do not collide.
		labels.XYs = append(labels.XYs, plotter.XY{X: x, Y: p.Y.Max * (0.82 - 0.06*float64(i%2))})
		labels.Labels = append(labels.Labels, " "+text)
	}
	if labelled && len(labels.XYs) > 0 {
		l, err := plotter.NewLabels(labels)
		if err != nil {
			return fmt.Errorf("handover labels: %w", err)
		}
		for i := range l.TextStyle {
			l.TextStyle[i].Font.Size = vg.Points(8)
			l.TextStyle[i].Color = handoverColor
		}
		p.Add(l)
	}
	return nil
}
