package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plotShapes tell the lines of a scale plot apart in black and white.
var plotShapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}, draw.RingGlyph{}}

// Scale figures: several runs' reports side by side, against player
// count, as `overworld sim -scale-from a/report.json,b/report.json,...`
// prints and plots them (per-player bandwidth and position delay against
// players, one line per mode).

// LoadReport reads a report.json that WriteFiles wrote.
func LoadReport(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("report %s: %w", path, err)
	}
	if r.Players <= 0 || r.Regions <= 0 {
		return nil, fmt.Errorf("report %s: %d players in %d regions: not a simulator report", path, r.Players, r.Regions)
	}
	return &r, nil
}

// series name of a report: its position mode and placement.
func (r *Report) modeName() string {
	name := "direct"
	if r.Aggregate {
		name = "aggregated"
	}
	if r.PlayBots {
		name += ", play bots"
	} else if r.DHTPlacement {
		name += ", DHT"
	}
	if r.Churn != nil {
		name += ", churn (" + r.Churn.Leave + ")"
	}
	return name
}

// sortScale orders reports by mode, then players.
func sortScale(reports []*Report) []*Report {
	out := slices.Clone(reports)
	slices.SortStableFunc(out, func(a, b *Report) int {
		if a.modeName() != b.modeName() {
			if a.modeName() < b.modeName() {
				return -1
			}
			return 1
		}
		return a.Players - b.Players
	})
	return out
}

// ScaleTable writes the reports as a Markdown table, ordered by mode and
// player count, and for each mode how per-player bandwidth changed from
// the fewest players to the most.
func ScaleTable(w io.Writer, reports []*Report) {
	fmt.Fprintln(w, "| mode | players | regions | per region | B/s per player sent avg / p99 | recv avg | interior sent avg (players) | border sent avg (players) | msgs/s per player sent / recv | delay p50 / p99 ms | link p99 ms | peers/player | heap + stacks MB/player | goroutines/player | wall s | peak RSS GB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	sorted := sortScale(reports)
	for _, r := range sorted {
		m := r.Memory
		fmt.Fprintf(w, "| %s | %d | %d | %.1f | %.0fk / %.0fk | %.0fk | %s | %s | %.0f / %.0f | %.0f / %.0f | %.0f | %.0f | %.2f + %.2f | %.0f | %.0f | %.2f |\n",
			r.modeName(), r.Players, r.Regions, float64(r.Players)/float64(r.Regions),
			r.BytesSentPerSec.Avg/1000, r.BytesSentPerSec.P99/1000, r.BytesRecvPerSec.Avg/1000,
			groupCell(r, func(s *BandwidthSplit) Bandwidth { return s.Interior }),
			groupCell(r, func(s *BandwidthSplit) Bandwidth { return s.Border }),
			r.MsgsSentPerSec.Avg, r.MsgsRecvPerSec.Avg,
			r.DelayMS.P50, r.DelayMS.P99, r.LinkLatencyMS.P99, m.PeersPerPlayer.Avg,
			m.HeapPerPlayerMB, m.StacksPerPlayerMB, m.GoroutinesPerPlayer, r.WallSeconds, r.Load.PeakRSSMB/1024)
	}
	for i := 0; i < len(sorted); {
		j := i
		for j < len(sorted) && sorted[j].modeName() == sorted[i].modeName() {
			j++
		}
		first, last := sorted[i], sorted[j-1]
		if first.Players != last.Players && first.BytesSentPerSec.Avg > 0 {
			fmt.Fprintf(w, "\n%s: per-player bandwidth (sent, avg) %+.1f%% from %d to %d players; delay p99 %+.1f%%\n", first.modeName(),
				100*(last.BytesSentPerSec.Avg/first.BytesSentPerSec.Avg-1), first.Players, last.Players,
				100*(last.DelayMS.P99/first.DelayMS.P99-1))
		}
		i = j
	}
	kindTable(w, sorted)
	scaleGoals(w, sorted)
}

// groupCell is a group's average bytes sent per player and its players,
// or "-" for a report without the split (written before it existed).
func groupCell(r *Report, group func(*BandwidthSplit) Bandwidth) string {
	if r.Bandwidth == nil {
		return "-"
	}
	g := group(r.Bandwidth)
	if g.Players == 0 {
		return "- (0)"
	}
	return fmt.Sprintf("%.0fk (%d)", g.BytesSentPerSec.Avg/1000, g.Players)
}

// WriteScalePlots writes scale-bandwidth.svg and scale-delay.svg into dir
// and returns their paths.
func WriteScalePlots(dir string, reports []*Report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plot dir: %w", err)
	}
	sorted := sortScale(reports)
	type line struct {
		name string
		y    func(*Report) float64
	}
	plotLines := func(path, title, ylabel string, lines []line) error {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "players"
		p.Y.Label.Text = ylabel
		p.Add(plotter.NewGrid())
		style := 0
		for i := 0; i < len(sorted); {
			j := i
			for j < len(sorted) && sorted[j].modeName() == sorted[i].modeName() {
				j++
			}
			for _, l := range lines {
				var pts plotter.XYs
				for _, r := range sorted[i:j] {
					pts = append(pts, plotter.XY{X: float64(r.Players), Y: l.y(r)})
				}
				ln, sc, err := plotter.NewLinePoints(pts)
				if err != nil {
					return fmt.Errorf("plot %s: %w", l.name, err)
				}
				ln.Color = plotter.DefaultLineStyle.Color
				sc.Shape = plotShapes[style%len(plotShapes)]
				if style%2 == 1 {
					ln.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				}
				style++
				p.Add(ln, sc)
				p.Legend.Add(sorted[i].modeName()+": "+l.name, ln, sc)
			}
			i = j
		}
		// Players on a log scale, ticked at each run's count; room above
		// the lines for the legend.
		var counts []float64
		for _, r := range sorted {
			if !slices.Contains(counts, float64(r.Players)) {
				counts = append(counts, float64(r.Players))
			}
		}
		slices.Sort(counts)
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
			ticks := make([]plot.Tick, len(counts))
			for i, c := range counts {
				ticks[i] = plot.Tick{Value: c, Label: strconv.Itoa(int(c))}
			}
			return ticks
		})
		p.X.Min, p.X.Max = counts[0]/1.2, counts[len(counts)-1]*1.2
		p.Y.Min = 0
		p.Y.Max *= 1.8
		p.Legend.Top = true
		p.Legend.Left = true
		if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
			return fmt.Errorf("save %s: %w", path, err)
		}
		return nil
	}
	bw := filepath.Join(dir, "scale-bandwidth.svg")
	if err := plotLines(bw, "Per-player bandwidth against players", "bytes per second", []line{
		{"sent, avg", func(r *Report) float64 { return r.BytesSentPerSec.Avg }},
		{"sent, p99", func(r *Report) float64 { return r.BytesSentPerSec.P99 }},
		{"received, avg", func(r *Report) float64 { return r.BytesRecvPerSec.Avg }},
	}); err != nil {
		return nil, err
	}
	dl := filepath.Join(dir, "scale-delay.svg")
	if err := plotLines(dl, "Position update delay against players", "milliseconds", []line{
		{"delay p50", func(r *Report) float64 { return r.DelayMS.P50 }},
		{"delay p99", func(r *Report) float64 { return r.DelayMS.P99 }},
		{"link latency p99", func(r *Report) float64 { return r.LinkLatencyMS.P99 }},
	}); err != nil {
		return nil, err
	}
	return []string{bw, dl}, nil
}
