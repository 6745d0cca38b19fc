package run

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WriteCharts draws hit_rate.png (hit rate per policy against the ideal),
// ttft.png (TTFT distribution per policy) and load.png (per-engine queue
// depth over time, one panel per policy) into dir.
func (r *Report) WriteCharts(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if len(r.Results) == 0 {
		return nil
	}
	if err := r.hitRateChart(filepath.Join(dir, "hit_rate.png")); err != nil {
		return err
	}
	if err := r.ttftChart(filepath.Join(dir, "ttft.png")); err != nil {
		return err
	}
	return r.loadChart(filepath.Join(dir, "load.png"))
}

func (r *Report) policies() []string {
	var names []string
	for _, res := range r.Results {
		names = append(names, res.Policy)
	}
	return names
}

func (r *Report) hitRateChart(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Engine prefix-cache hit rate — %s", r.Workload.Name)
	p.Y.Label.Text = "hit rate (% of prompt tokens)"
	vals := make(plotter.Values, len(r.Results))
	for i, res := range r.Results {
		vals[i] = 100 * res.HitRate
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(30))
	if err != nil {
		return err
	}
	bars.Color = palette[0]
	bars.LineStyle.Width = 0
	p.Add(bars)
	// Beside each engine-measured bar, what the proxy predicted, where it
	// can tell: the gap is how far its table drifted from the engines.
	pred := make(plotter.Values, len(r.Results))
	anyPred := false
	for i, res := range r.Results {
		if res.Predicted >= 0 {
			pred[i], anyPred = 100*res.Predicted, true
		}
	}
	if anyPred {
		pb, err := plotter.NewBarChart(pred, vg.Points(30))
		if err != nil {
			return err
		}
		pb.Color = palette[1%len(palette)]
		pb.LineStyle.Width = 0
		bars.Offset = -vg.Points(15)
		pb.Offset = vg.Points(15)
		p.Add(pb)
		p.Legend.Add("engines (measured)", bars)
		p.Legend.Add("proxy (predicted)", pb)
		vals = append(vals, pred...)
	}
	ideal := 100 * r.Workload.IdealHitRate
	line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: ideal}, {X: float64(len(r.Results)) - 0.5, Y: ideal}})
	if err != nil {
		return err
	}
	line.Color = color.RGBA{R: 200, A: 255}
	line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(line)
	p.Legend.Add(fmt.Sprintf("ideal %.1f%%", ideal), line)
	p.Legend.Top = true
	p.NominalX(r.policies()...)
	p.Y.Min = 0
	p.Y.Max = math.Max(ideal, maxValue(vals)) * 1.15
	return p.Save(vg.Length(140+90*len(r.Results)), 4*vg.Inch, path)
}

// ttftChart plots each policy's TTFT CDF on a log time axis.
func (r *Report) ttftChart(path string) error {
	p := plot.New()
	p.Title.Text = "Time to first token — cumulative distribution"
	p.X.Label.Text = "TTFT (ms, log scale)"
	p.Y.Label.Text = "fraction of requests"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	for i, res := range r.Results {
		if len(res.TTFT) == 0 {
			continue
		}
		pts := cdf(res.TTFT, 400)
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = palette[i%len(palette)]
		l.Dashes = plotutil.Dashes(i / len(palette))
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (p99 %s)", res.Policy, fmtDur(res.TTFTp99)), l)
	}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

// cdf samples at most n points of the empirical CDF of sorted d, in ms,
// clamped to 0.01 ms for the log axis.
func cdf(d []time.Duration, n int) plotter.XYs {
	step := max(1, len(d)/n)
	var pts plotter.XYs
	for i := 0; i < len(d); i += step {
		pts = append(pts, plotter.XY{X: math.Max(float64(d[i])/1e6, 0.01), Y: float64(i+1) / float64(len(d))})
	}
	last := d[len(d)-1]
	return append(pts, plotter.XY{X: math.Max(float64(last)/1e6, 0.01), Y: 1})
}

// loadChart stacks one panel per policy: each engine's running + waiting
// sequences over time.
func (r *Report) loadChart(path string) error {
	const w, rowH = 9 * vg.Inch, 2.6 * vg.Inch
	rows := len(r.Results)
	img := vgimg.New(w, rowH*vg.Length(rows))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: 1, PadY: vg.Points(6), PadTop: vg.Points(4), PadBottom: vg.Points(4)}
	for i, res := range r.Results {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s — engine load (running + waiting, moving average), imbalance %.2f", res.Policy, res.Imbalance)
		p.X.Label.Text = "time (s)"
		p.Y.Label.Text = "sequences"
		for j, s := range res.Load {
			pts := smooth(s, max(1, len(s.At)/120))
			if len(pts) == 0 {
				continue
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color = palette[j%len(palette)]
			l.Dashes = plotutil.Dashes(j / len(palette))
			l.Width = vg.Points(1.2)
			p.Add(l)
			if i == 0 {
				p.Legend.Add(s.Engine, l)
			}
		}
		p.Legend.Top = true
		p.Legend.Left = false
		p.Legend.Padding = vg.Points(1)
		p.Y.Min = 0
		p.Draw(tiles.At(dc, 0, i))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// palette holds distinguishable line colours (Okabe-Ito, then a few more).
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255}, color.RGBA{213, 94, 0, 255}, color.RGBA{0, 158, 115, 255},
	color.RGBA{204, 121, 167, 255}, color.RGBA{230, 159, 0, 255}, color.RGBA{86, 180, 233, 255},
	color.RGBA{0, 0, 0, 255}, color.RGBA{240, 228, 66, 255}, color.RGBA{128, 128, 128, 255},
}

// smooth is a centred moving average of a load series over 2w+1 samples,
// so that eight engines' lines stay readable.
func smooth(s LoadSeries, w int) plotter.XYs {
	pts := make(plotter.XYs, len(s.At))
	for k := range s.At {
		lo, hi := max(0, k-w), min(len(s.Load)-1, k+w)
		sum := 0
		for _, v := range s.Load[lo : hi+1] {
			sum += v
		}
		pts[k] = plotter.XY{X: s.At[k].Seconds(), Y: float64(sum) / float64(hi-lo+1)}
	}
	return pts
}

func maxValue(v plotter.Values) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}
