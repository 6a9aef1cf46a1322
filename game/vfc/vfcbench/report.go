// Package vfcbench measures vector-field consistency (game/vfc) the way
// the issue asks: the paper's round-handler micro-benchmark [S §5.1, fig
// 11] with our per-round cost per client beside it, and a 50-client demo
// (a real mirror and bot-driven clients in simulated time) that counts the
// bytes VFC sends against sending everything and the largest staleness seen in
// each zone against its bound. `overworld bench vfc` prints it.
//
// Data flow: Run measures each RoundSetup with MeasureRounds (a CMB, one
// view, writes before every round, each Round timed) and plays the demo
// with RunDemo (a node/mirror server whose egress runs the vfcworld filter,
// mirror.LocalClient bots; the mirror's world at every frame is compared
// with what every client holds), then checks the goals and returns
// a Report.
package vfcbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Config selects what Run measures.
type Config struct {
	Objects  []int
	Updated  []int // percent
	Pivots   []bool
	Rounds   int
	Literal  bool
	Seed     uint64
	RunDemo  bool
	Demo     DemoConfig
	RunRound bool
}

// Default is the paper's grid (1,000 to 10,000 objects, 0/50/100%
// updated, a still and a moving pivot) and the 50-client demo.
func Default() Config {
	return Config{
		Objects:  []int{1000, 2500, 5000, 7500, 10000},
		Updated:  []int{0, 50, 100},
		Pivots:   []bool{false, true},
		Rounds:   300,
		Seed:     1,
		RunRound: true,
		RunDemo:  true,
		Demo:     DefaultDemo(),
	}
}

// PaperNote says what the paper reports for the round handler.
const PaperNote = "Paper [S §5.1, fig 11]: Nokia 6600 phones, J2ME, same grid; its values exist only as figure 11's plot, " +
	"which the copy of the paper we have does not contain (its text gives no number), so no paper value is printed. " +
	"The text says the cost grows with the share of updates sent and, for a reasonable object count, stays below the Bluetooth time to send them (fig 12)."

// Check is one of the goals and whether the run met it.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	Note string `json:"note"`
}

// Report is the outcome of Run.
type Report struct {
	RoundConfig struct {
		Zones  []int32  `json:"zones"`
		Field  int      `json:"field_half_side"`
		Scale  []string `json:"scale"`
		Rounds int      `json:"rounds"`
		Mode   string   `json:"mode"`
	} `json:"round_config"`
	Paper  string      `json:"paper"`
	Rounds []RoundRow  `json:"rounds"`
	Demo   *DemoReport `json:"demo,omitempty"`
	Goals  []Check     `json:"goals"`
}

// Run measures what cfg selects.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	rep := &Report{Paper: PaperNote}
	rep.RoundConfig.Zones = []int32{Field / 3, 2 * Field / 3}
	rep.RoundConfig.Field = Field
	for _, v := range RoundScale {
		rep.RoundConfig.Scale = append(rep.RoundConfig.Scale, v.String())
	}
	rep.RoundConfig.Rounds = cfg.Rounds
	rep.RoundConfig.Mode = "corrected"
	if cfg.Literal {
		rep.RoundConfig.Mode = "literal (figure 9 as printed)"
	}
	if cfg.RunRound {
		for _, n := range cfg.Objects {
			for _, pct := range cfg.Updated {
				for _, moving := range cfg.Pivots {
					if err := ctx.Err(); err != nil {
						return nil, err
					}
					row, err := MeasureRounds(RoundSetup{Objects: n, UpdatedPercent: pct, MovingPivot: moving, Literal: cfg.Literal, Seed: cfg.Seed}, cfg.Rounds)
					if err != nil {
						return nil, err
					}
					rep.Rounds = append(rep.Rounds, row)
				}
			}
		}
		worst, seen := time.Duration(0), false
		for _, r := range rep.Rounds {
			if r.Objects == 10000 {
				worst, seen = max(worst, r.Median), true
			}
		}
		if seen {
			rep.Goals = append(rep.Goals, Check{
				Name: "round cost at 10,000 objects ≤ 1 ms per client",
				OK:   worst <= time.Millisecond,
				Note: fmt.Sprintf("largest median %v", worst),
			})
		}
	}
	if cfg.RunDemo {
		d, err := RunDemo(ctx, cfg.Demo)
		if err != nil {
			return nil, err
		}
		rep.Demo = d
		ratio := float64(d.VFC.Bytes) / float64(d.SendAll.Bytes)
		rep.Goals = append(rep.Goals, Check{
			Name: fmt.Sprintf("bytes to clients ≤ 20%% of send-all (%d clients)", d.Clients),
			OK:   ratio <= 0.2,
			Note: fmt.Sprintf("%.2f%% (of the area egress before VFC: %.1f%%)", 100*ratio, 100*float64(d.VFC.Bytes)/float64(d.Area.Bytes)),
		})
		var exceeded int64
		for _, z := range d.Zones {
			exceeded += z.Exceeded
		}
		rep.Goals = append(rep.Goals, Check{
			Name: "no bound exceeded",
			OK:   exceeded == 0 && d.Missing == 0,
			Note: fmt.Sprintf("%d observations at or past a bound, %d of a copy a client did not hold", exceeded, d.Missing),
		})
	}
	return rep, nil
}

// WriteJSON prints the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText prints the report as tables.
func (r *Report) WriteText(w io.Writer) {
	if len(r.Rounds) > 0 {
		c := r.RoundConfig
		fmt.Fprintf(w, "VFC round handler, one client [S §5.1, fig 11]: one pivot, Z = %v in a ±%d field, C = ⟨%s, %s, %s⟩, 4-byte values, %d rounds each, %s mode\n",
			c.Zones, c.Field, c.Scale[0], c.Scale[1], c.Scale[2], c.Rounds, c.Mode)
		fmt.Fprintln(w, wrap(r.Paper, 100))
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%8s %8s %7s %10s %10s %10s %7s %7s %9s %9s\n", "objects", "updated", "pivot", "median", "p90", "mean", "allocs", "sent", "payload", "µs/write")
		for _, row := range r.Rounds {
			pivot := "still"
			if row.MovingPivot {
				pivot = "moving"
			}
			fmt.Fprintf(w, "%8d %7d%% %7s %10s %10s %10s %7.2f %7d %8dB %9.3f\n", row.Objects, row.UpdatedPercent, pivot,
				us(row.Median), us(row.P90), us(row.Mean), row.AllocsPerRound, row.Sent, row.PayloadBytes, float64(row.UpdateCost)/float64(time.Microsecond))
		}
		fmt.Fprintln(w, "(median/p90/mean: wall time of one Round for the one client; allocs: heap allocations per round; µs/write: one Update)")
	}
	if d := r.Demo; d != nil {
		if len(r.Rounds) > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%d-client demo: one mirror (node/mirror, CRIMP on the in-memory network, simulated time), %d bot-driven clients on the real client protocol, %d food/health objects, %d s measured, an update every %d tick(s); bytes are the encoded update frames the clients received; each policy is a run of its own\n",
			d.Clients, d.Clients, d.Objects, d.Seconds, d.FrameTicks)
		fmt.Fprintf(w, "%-28s %12s %14s %14s %10s\n", "egress", "frames", "bytes", "B/client/s", "VFC ÷ it")
		for _, tr := range []Traffic{d.VFC, d.SendAll, d.Area} {
			fmt.Fprintf(w, "%-28s %12d %14d %14.0f %9.2f%%\n", tr.Policy, tr.Frames, tr.Bytes, tr.BytesPerClientSecond, 100*float64(d.VFC.Bytes)/float64(tr.Bytes))
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Largest staleness of a copy a client held (VFC run), after every update, against the mirror's world at that update's tick, per zone against its bound [time, sequence, value]:")
		fmt.Fprintf(w, "%-8s %4s %-18s %-16s %10s %10s %8s %7s %8s %8s %15s\n", "set", "zone", "range", "bound", "pairs", "stale", "age s", "missed", "value", "exceeded", "error p99/max")
		for _, z := range d.Zones {
			errText := "-"
			if z.Set == "players" {
				errText = fmt.Sprintf("%.2f/%.2f tiles", z.P99ErrorTiles, z.MaxErrorTiles)
			}
			fmt.Fprintf(w, "%-8s %4d %-18s %-16s %10d %10d %8.3f %7d %8.1f %8d %15s\n", z.Set, z.Zone, z.Range, z.BoundText, z.PairFrames, z.StaleFrames, z.MaxAgeSeconds, z.MaxMissed, z.MaxValue, z.Exceeded, errText)
		}
		fmt.Fprintln(w, "(pairs: client-object-frame observations in the zone; stale: those whose copy was behind; value: percent of a tile of dead-reckoning error or bar points for players, percent of the maximum amount for objects; error: distance from the client's dead-reckoned position to the true one)")
		if d.Missing > 0 {
			fmt.Fprintf(w, "%d observations of something a client held no copy of\n", d.Missing)
		}
	}
	if len(r.Goals) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Goals:")
		for _, g := range r.Goals {
			mark := "met"
			if !g.OK {
				mark = "MISSED"
			}
			fmt.Fprintf(w, "  %-6s %s: %s\n", mark, g.Name, g.Note)
		}
	}
}

func us(d time.Duration) string {
	return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
}

// wrap breaks s into lines of at most width bytes at spaces.
func wrap(s string, width int) string {
	var out []byte
	line := 0
	word := []byte{}
	flush := func() {
		if len(word) == 0 {
			return
		}
		if line > 0 && line+1+len(word) > width {
			out = append(out, '\n')
			line = 0
		} else if line > 0 {
			out = append(out, ' ')
			line++
		}
		out = append(out, word...)
		line += len(word)
		word = word[:0]
	}
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			flush()
			continue
		}
		word = append(word, s[i])
	}
	flush()
	return string(out)
}
