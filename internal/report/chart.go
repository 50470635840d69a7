package report

import (
	"bytes"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Chart sizes, in pixels.
const (
	ChartWidth  = 720
	ChartHeight = 260
	chartDPI    = 96
)

var (
	colorIn        = color.RGBA{0x25, 0x63, 0xeb, 0xff}
	colorOut       = color.RGBA{0xf5, 0x9e, 0x0b, 0xff}
	colorDelivered = color.RGBA{0x16, 0xa3, 0x4a, 0xff}
	colorFailed    = color.RGBA{0xdc, 0x26, 0x26, 0xff}
)

// VolumeChart draws the day's hourly volume in and out as a PNG of
// ChartWidth × ChartHeight pixels: one pair of bars per hour of the day
// (23, 24 or 25).
func VolumeChart(r *Report) ([]byte, error) {
	p := plot.New()
	p.Title.Text = "Documents per hour (" + r.TimeZone + ")"
	p.Y.Label.Text = "documents"
	in := make(plotter.Values, len(r.Hours))
	out := make(plotter.Values, len(r.Hours))
	labels := make([]string, len(r.Hours))
	for i, h := range r.Hours {
		in[i], out[i] = float64(h.In), float64(h.Out)
		if i%2 == 0 {
			labels[i] = h.Label[:2]
		}
	}
	w := vg.Points(float64(ChartWidth-120) / float64(max(len(r.Hours), 1)) / 3)
	if err := bars(p, w, []plotter.Values{in, out}, []string{"received", "sent"}, []color.Color{colorIn, colorOut}); err != nil {
		return nil, fmt.Errorf("volume chart: %w", err)
	}
	p.NominalX(labels...)
	return png(p)
}

// PartnerChart draws delivered and failed (outbound failed plus inbound
// refused) per partner as a PNG of ChartWidth × ChartHeight pixels, or
// returns nil when no partner had traffic.
func PartnerChart(r *Report) ([]byte, error) {
	var ok, bad plotter.Values
	var names []string
	for _, q := range r.Partners {
		if q.Received+q.Sent == 0 {
			continue
		}
		names = append(names, q.Name)
		ok = append(ok, float64(q.Delivered+q.Accepted+q.Received-q.Refused))
		bad = append(bad, float64(q.Failed+q.Refused))
	}
	if len(names) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Documents through and failed, per partner"
	p.Y.Label.Text = "documents"
	w := vg.Points(min(40, float64(ChartWidth-120)/float64(len(names))/3))
	if err := bars(p, w, []plotter.Values{ok, bad}, []string{"delivered or received", "failed or refused"}, []color.Color{colorDelivered, colorFailed}); err != nil {
		return nil, fmt.Errorf("partner chart: %w", err)
	}
	p.NominalX(names...)
	return png(p)
}

func bars(p *plot.Plot, w vg.Length, series []plotter.Values, names []string, colors []color.Color) error {
	p.Legend.Top = true
	p.Y.Min = 0
	top := 1.0
	for _, vs := range series {
		for _, v := range vs {
			top = max(top, v)
		}
	}
	p.Y.Max = top * 1.25 // room for the legend
	p.X.Tick.Label.Font.Size = vg.Points(8)
	p.Add(plotter.NewGrid())
	for i, vs := range series {
		b, err := plotter.NewBarChart(vs, w)
		if err != nil {
			return err
		}
		b.Color = colors[i]
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(series)-1)/2)
		p.Add(b)
		p.Legend.Add(names[i], b)
	}
	return nil
}

func png(p *plot.Plot) ([]byte, error) {
	wd := vg.Length(ChartWidth) * vg.Inch / chartDPI
	ht := vg.Length(ChartHeight) * vg.Inch / chartDPI
	c := vgimg.NewWith(vgimg.UseWH(wd, ht), vgimg.UseDPI(chartDPI), vgimg.UseBackgroundColor(color.White))
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("encode PNG: %w", err)
	}
	return buf.Bytes(), nil
}
