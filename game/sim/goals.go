package sim

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Issue #14's goals for the simulator's figures, told beside the scale
// table. They are goals to read, not tests: a run says how far it is from
// each, and nothing fails.
const (
	// goalBandwidthSpread: per-player bandwidth at constant density
	// within 10 % across world sizes (max over min, minus one).
	goalBandwidthSpread = 0.10
	// goalAggregateFactor: aggregation sends at least half the messages
	// per node of direct mode.
	goalAggregateFactor = 2.0
	// goalNextCoordinatorMS: a region has its next coordinator within a
	// second of its coordinator leaving.
	goalNextCoordinatorMS = 1000.0
)

// kindTable writes the per-player bytes sent by kind, all players and
// interior players, for the reports that have the split.
func kindTable(w io.Writer, sorted []*Report) {
	var with []*Report
	for _, r := range sorted {
		if r.Bandwidth != nil {
			with = append(with, r)
		}
	}
	if len(with) == 0 {
		return
	}
	fmt.Fprintln(w, "\nbytes sent per player per second by kind, all players / interior players (other streams are not in the totals above):")
	fmt.Fprintf(w, "\n| mode | players |")
	for _, k := range bandwidthKinds {
		fmt.Fprintf(w, " %s |", k)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "|---|---|"+strings.Repeat("---|", len(bandwidthKinds)))
	for _, r := range with {
		fmt.Fprintf(w, "| %s | %d |", r.modeName(), r.Players)
		for _, k := range bandwidthKinds {
			fmt.Fprintf(w, " %.0f / %.0f |", r.Bandwidth.All.SentByKind[k], r.Bandwidth.Interior.SentByKind[k])
		}
		fmt.Fprintln(w)
	}
}

// scaleGoals writes how the reports stand against issue #14's goals.
func scaleGoals(w io.Writer, sorted []*Report) {
	fmt.Fprintln(w, "\ngoals (issue #14):")
	// (a) Bandwidth spread per mode across player counts.
	for _, group := range byDensity(byMode(sorted)) {
		// A spread across world sizes: runs of one size alone say
		// nothing about growth.
		if group[0].Players == group[len(group)-1].Players {
			continue
		}
		all := spread(group, func(r *Report) (float64, bool) { return r.BytesSentPerSec.Avg, r.BytesSentPerSec.Avg > 0 })
		line := fmt.Sprintf("  bandwidth spread, %s, %d runs (%d-%d players): all %s",
			group[0].modeName(), len(group), group[0].Players, group[len(group)-1].Players, spreadText(all))
		interior := spread(group, func(r *Report) (float64, bool) {
			if r.Bandwidth == nil || r.Bandwidth.Interior.Players == 0 {
				return 0, false
			}
			return r.Bandwidth.Interior.BytesSentPerSec.Avg, true
		})
		line += ", interior " + spreadText(interior)
		fmt.Fprintf(w, "%s (goal within %.0f%%)\n", line, 100*goalBandwidthSpread)
	}
	// (b) Delay p99 against the link's, direct mode.
	for _, r := range sorted {
		if r.Aggregate || r.DelayMS.Count == 0 {
			continue
		}
		bound := 1.25*r.LinkLatencyMS.P99 + 10
		verdict := "met"
		if r.DelayMS.P99 > bound {
			verdict = "missed"
		}
		perDelivery := ""
		if p := r.Paths; p != nil && p.OneHop+p.Forwarded > 0 {
			// With links of different latencies, each delivery against
			// its own link.
			all := float64(p.OneHop + p.Forwarded)
			slower := p.Forwarded - p.ForwardedByCause[causeFasterPath]
			perDelivery = fmt.Sprintf("; %.2f%% of direct updates over 1.25 x their own link + 10 ms, %.2f%% forwarded later than their link's latency",
				100*float64(p.LateOneHop+p.LateForwarded)/all, 100*float64(slower)/all)
		}
		fmt.Fprintf(w, "  delay p99, %s, %d players: %.0f ms against 1.25 x link p99 %.0f ms + 10 ms = %.0f ms: %s%s\n",
			r.modeName(), r.Players, r.DelayMS.P99, r.LinkLatencyMS.P99, bound, verdict, perDelivery)
	}
	// (c) Messages per node, aggregated against direct, at equal player
	// counts and otherwise equal settings.
	for _, a := range sorted {
		if !a.Aggregate {
			continue
		}
		for _, d := range sorted {
			if d.Aggregate || d.Players != a.Players || d.Regions != a.Regions || d.modeName() != strings.Replace(a.modeName(), "aggregated", "direct", 1) {
				continue
			}
			msgs := func(r *Report) float64 { return r.MsgsSentPerSec.Avg + r.MsgsRecvPerSec.Avg }
			if msgs(a) == 0 {
				continue
			}
			factor := msgs(d) / msgs(a)
			verdict := "met"
			if factor < goalAggregateFactor {
				verdict = "missed"
			}
			fmt.Fprintf(w, "  messages per node (sent + received), %d players: direct %.0f/s, aggregated %.0f/s, %.1fx fewer (goal %.0fx): %s\n",
				a.Players, msgs(d), msgs(a), factor, goalAggregateFactor, verdict)
		}
	}
	// (d) Time to a region's next coordinator.
	for _, r := range sorted {
		if r.Churn == nil || r.Churn.NextCoordinatorMS.Count == 0 {
			continue
		}
		c := r.Churn.NextCoordinatorMS
		verdict := "met"
		if c.P99 >= goalNextCoordinatorMS || r.Churn.NextCoordinatorPending > 0 {
			verdict = "missed"
		}
		fmt.Fprintf(w, "  time to next coordinator, %s, %d players, links %.0f-%.0f ms: p99 %.0f ms over %d, %d pending (goal under %.0f ms): %s\n",
			r.modeName(), r.Players, r.LatencyMS[0], r.LatencyMS[1], c.P99, c.Count, r.Churn.NextCoordinatorPending, goalNextCoordinatorMS, verdict)
	}
}

// byMode splits reports sorted by sortScale into runs of one mode.
func byMode(sorted []*Report) [][]*Report {
	var out [][]*Report
	for i := 0; i < len(sorted); {
		j := i
		for j < len(sorted) && sorted[j].modeName() == sorted[i].modeName() {
			j++
		}
		out = append(out, sorted[i:j])
		i = j
	}
	return out
}

// byDensity splits each mode's runs (sorted by players) into runs of about
// one density (players per region within 10 % of the first's): the goal
// is flat bandwidth at constant density.
func byDensity(groups [][]*Report) [][]*Report {
	density := func(r *Report) float64 { return float64(r.Players) / float64(r.Regions) }
	var out [][]*Report
	for _, g := range groups {
		var cur []*Report
		for _, r := range g {
			if len(cur) > 0 && (density(r) > 1.1*density(cur[0]) || density(r) < density(cur[0])/1.1) {
				out = append(out, cur)
				cur = nil
			}
			cur = append(cur, r)
		}
		out = append(out, cur)
	}
	return out
}

// spreadResult is how far a figure spreads over several runs.
type spreadResult struct {
	runs     int
	min, max float64
}

// spread is the smallest and largest of the figure over the reports that
// have it.
func spread(rs []*Report, figure func(*Report) (float64, bool)) spreadResult {
	var xs []float64
	for _, r := range rs {
		if x, ok := figure(r); ok {
			xs = append(xs, x)
		}
	}
	if len(xs) == 0 {
		return spreadResult{}
	}
	return spreadResult{runs: len(xs), min: slices.Min(xs), max: slices.Max(xs)}
}

func (s spreadResult) share() float64 { return s.max/s.min - 1 }

func spreadText(s spreadResult) string {
	if s.runs < 2 || s.min <= 0 {
		return "n/a"
	}
	verdict := "met"
	if s.share() > goalBandwidthSpread {
		verdict = "missed"
	}
	return fmt.Sprintf("%.0fk-%.0fk B/s, %.1f%% (%s)", s.min/1000, s.max/1000, 100*s.share(), verdict)
}
