// Package tssbench measures trailing state synchronization on the game
// world against table 3.1 of Cronin et al. (2001, §3.6), which ran seven
// delay configurations over one trace of 3 users on each of 2 mirrors
// (18,593 commands seen at mirror 1), and against the Time Warp baseline
// and the delays ChooseDelays picks.
//
// Data flow: Generate makes the workload (bots on each mirror, a command
// every 30 ms per player, decided on the in-order world); Arrivals sends it
// over CRIMP between the mirrors on crimp's in-memory network and
// simulated clock (the paper does not state its network, so the link is a
// parameter and printed) and returns when each command reached mirror 1;
// Run feeds those arrivals to a synchronizer per configuration, to
// tss.TimeWarp, and to the configuration ChooseDelays picks from the
// measured latency and costs, timing execution and rollbacks, and checks
// every last state against the in-order run. The package also holds the
// world-trace glue (NewWorldTraceWriter, ReplayWorld) that `overworld
// replay` uses.
package tssbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/tss"
)

// PaperRow is one row of table 3.1.
type PaperRow struct {
	Delays       []time.Duration `json:"delays_ns"`
	Executed     int             `json:"executed"`
	ExecSeconds  float64         `json:"exec_s"`
	Rollbacks    int             `json:"rollbacks"`
	RollbackSecs float64         `json:"rollback_s"`
	TotalSeconds float64         `json:"total_s"`
}

// PaperCommands is the number of commands mirror 1 saw in the paper's trace.
const PaperCommands = 18593

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

// PaperTable31 is table 3.1, "Trailing State Synchronization Execution Times".
var PaperTable31 = []PaperRow{
	{ms(0, 50), 40780, 6.135408, 817, 1.148895, 8.953207},
	{ms(0, 100), 45401, 6.369374, 870, 1.226166, 9.317506},
	{ms(0, 50, 100), 59981, 9.024021, 938, 1.315154, 12.296119},
	{ms(0, 100, 1000), 331687, 26.195788, 6687, 10.105350, 43.772133},
	{ms(0, 50, 100, 150), 79357, 12.144979, 1092, 1.534347, 15.904039},
	{ms(0, 50, 100, 500), 99730, 13.261478, 2370, 3.361073, 19.375112},
	{ms(0, 50, 500, 1000), 251044, 23.223288, 6995, 10.513721, 39.266619},
}

// Config is the bench setup. Zero fields take Default's values.
type Config struct {
	Workload Workload      `json:"workload"`
	Link     Link          `json:"link"`
	History  time.Duration `json:"history_ns"` // CRIMP history (and Time Warp's window)
	Observer uint32        `json:"observer"`   // the mirror whose synchronizer is measured
	// WeakMargin for position differences (game units).
	WeakMargin int64 `json:"weak_margin"`
	// Delays are the configurations to run (default: the paper's seven).
	Delays [][]time.Duration `json:"delays_ns"`
	Seed   int64             `json:"seed"`
	// Repeats runs every configuration this many times and keeps the
	// shortest times (the counts must come out the same every time: a run
	// is deterministic).
	Repeats int `json:"repeats"`
}

// Default is a paper-sized run: 2 mirrors × 3 bots, a command every 30 ms
// per player, 18,593 commands, on a 2×2-region world (six players in one
// Quake level met often; a small world keeps them close); mirrors joined
// by a 25 ms link with 10 ms jitter and 5 % loss (CRIMP's table 4.1
// bridge); CRIMP history 1 s; positions may differ by a quarter tile.
func Default() Config {
	world := game.DefaultConfig()
	world.RegionsX, world.RegionsY = 2, 2
	return Config{
		Workload: Workload{
			World: world, Mirrors: 2, BotsPerMirror: 3, Interval: 30 * time.Millisecond,
			Commands: PaperCommands, Epoch: time.Date(2001, 6, 1, 0, 0, 0, 0, time.UTC).UnixNano(), Seed: 1,
		},
		Link:       Link{Delay: 25 * time.Millisecond, Jitter: 10 * time.Millisecond, Loss: 0.05},
		History:    time.Second,
		Observer:   1,
		WeakMargin: game.TileUnits / 4,
		Seed:       1,
		Repeats:    5,
	}
}

func (c Config) withDefaults() Config {
	d := Default()
	if c.Workload.Mirrors == 0 {
		c.Workload.Mirrors = d.Workload.Mirrors
	}
	if c.Workload.BotsPerMirror == 0 {
		c.Workload.BotsPerMirror = d.Workload.BotsPerMirror
	}
	if c.Workload.Interval == 0 {
		c.Workload.Interval = d.Workload.Interval
	}
	if c.Workload.Commands == 0 {
		c.Workload.Commands = d.Workload.Commands
	}
	if c.Workload.World.TickRate == 0 {
		c.Workload.World = d.Workload.World
	}
	if c.Workload.Epoch == 0 {
		c.Workload.Epoch = d.Workload.Epoch
	}
	if c.History == 0 {
		c.History = d.History
	}
	if c.Observer == 0 {
		c.Observer = d.Observer
	}
	if c.Repeats <= 0 {
		c.Repeats = d.Repeats
	}
	if c.Delays == nil {
		for _, p := range PaperTable31 {
			c.Delays = append(c.Delays, p.Delays)
		}
	}
	return c
}

// Row is one measured synchronizer run.
type Row struct {
	Label     string          `json:"label"`
	Delays    []time.Duration `json:"delays_ns"`
	Executed  uint64          `json:"executed"` // command executions, re-executions included
	Ticks     uint64          `json:"ticks"`    // tick executions, re-executions included
	ExecTime  time.Duration   `json:"exec_ns"`
	Rollbacks uint64          `json:"rollbacks"` // = state copies
	RbTime    time.Duration   `json:"rollback_ns"`
	Total     time.Duration   `json:"total_ns"` // exec + rollback (the paper's total also had 1.7-7.5 s unexplained)
	CmdCost   time.Duration   `json:"cmd_cost_ns"`
	RbCost    time.Duration   `json:"rollback_cost_ns"`
	RbPer1000 float64         `json:"rollbacks_per_1000"`
	XCmds     float64         `json:"x_cmds"`    // executed / commands seen
	TooLate   uint64          `json:"too_late"`  // commands later than the last delay
	InOrder   bool            `json:"in_order"`  // the last state ended equal to the in-order run
	MaxDepth  uint64          `json:"max_depth"` // most ticks one rollback re-executed
	ByState   []uint64        `json:"rollbacks_by_state"`
	Paper     *PaperRow       `json:"paper,omitempty"`
	Predicted *tss.Cost       `json:"predicted,omitempty"` // the model's view (ChooseDelays row)
}

// WarpRow is the Time Warp baseline's run.
type WarpRow struct {
	Executed  uint64        `json:"executed"`
	Snapshots uint64        `json:"snapshots"`
	Restores  uint64        `json:"restores"`
	Copies    uint64        `json:"copies"` // snapshots + restores
	ExecTime  time.Duration `json:"exec_ns"`
	CopyTime  time.Duration `json:"copy_ns"`
	Total     time.Duration `json:"total_ns"`
	InOrder   bool          `json:"in_order"`
}

// Check is one of the goals and whether the run met it.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	Note string `json:"note"`
}

// Report is a full bench result.
type Report struct {
	Config    Config          `json:"config"`
	Commands  int             `json:"commands"` // commands that reached the observer
	Duration  time.Duration   `json:"trace_ns"` // first to last stamp
	Arrivals  ArrivalStats    `json:"arrivals"`
	Rows      []Row           `json:"rows"`
	Warp      WarpRow         `json:"time_warp"`
	Choice    tss.DelayChoice `json:"choice"`
	Model     ModelInputs     `json:"model"`
	Goals     []Check         `json:"goals"`
	CostRatio [2]float64      `json:"rollback_over_command_cost"` // min and max over the rows with rollbacks
	Wall      time.Duration   `json:"wall_ns"`
}

// ModelInputs are what ChooseDelays was given (measured on this trace).
type ModelInputs struct {
	Rate         float64       `json:"rate"`
	TickCost     time.Duration `json:"tick_cost_ns"`
	CopyCost     time.Duration `json:"copy_cost_ns"`
	MismatchProb float64       `json:"mismatch_prob"`
	P999         time.Duration `json:"p999_ns"`
}

// Run generates the trace, delivers it over CRIMP and runs every
// configuration, Time Warp and ChooseDelays' pick on it. If trace is not
// nil, the ChooseDelays run is recorded to it (a world trace, see
// ReplayWorld).
func Run(ctx context.Context, cfg Config, trace io.Writer) (*Report, error) {
	cfg = cfg.withDefaults()
	start := time.Now()
	rep := &Report{Config: cfg}
	cmds, err := Generate(cfg.Workload)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	arrivals, st, err := Arrivals(ctx, cmds, cfg.Workload.Mirrors, cfg.Observer, cfg.Link, cfg.History, cfg.Seed)
	if err != nil {
		return nil, fmt.Errorf("arrivals: %w", err)
	}
	rep.Arrivals, rep.Commands = st, len(arrivals)
	rep.Duration = time.Duration(cmds[len(cmds)-1].Stamp - cmds[0].Stamp)

	period := cfg.Workload.TickPeriod()
	base := tss.Config{Epoch: cfg.Workload.Epoch, TickPeriod: period, WeakMargin: cfg.WeakMargin, History: cfg.History}
	end := arrivals[len(arrivals)-1].At + int64(cfg.History) + int64(4*period)
	delivered := make([]game.Command, len(arrivals))
	for i, a := range arrivals {
		delivered[i] = a.Cmd
	}
	ref, err := ReferenceHashes(cfg.Workload.World, base, delivered, base.TickOf(end)+1)
	if err != nil {
		return nil, err
	}
	newWorld := func() *game.World {
		w, _ := game.NewWorld(cfg.Workload.World)
		return w
	}
	var calMetrics *tss.Metrics // of the first configuration, for ChooseDelays
	for _, d := range cfg.Delays {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		row, met, err := repeatTSS(cfg.Repeats, base, d, arrivals, end, ref, newWorld)
		if err != nil {
			return nil, err
		}
		if calMetrics == nil {
			calMetrics = met
		}
		for _, p := range PaperTable31 {
			if slices.Equal(p.Delays, d) {
				row.Paper = &p
			}
		}
		rep.Rows = append(rep.Rows, row)
	}
	for i := range cfg.Repeats {
		w, err := runWarp(base, arrivals, end, ref, newWorld)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			if w.Copies != rep.Warp.Copies || w.Executed != rep.Warp.Executed {
				return nil, fmt.Errorf("time warp: repeat %d made %d copies, the first %d: not deterministic", i, w.Copies, rep.Warp.Copies)
			}
			w.ExecTime, w.CopyTime = min(w.ExecTime, rep.Warp.ExecTime), min(w.CopyTime, rep.Warp.CopyTime)
			w.Total = w.ExecTime + w.CopyTime
		}
		rep.Warp = w
	}

	// ChooseDelays from what this trace measured: arrival latency at the
	// observer, the command rate, execution cost per tick and copy cost
	// from the first configuration's run, and how often a command run out
	// of order made a difference.
	var lat []time.Duration
	for _, a := range arrivals {
		lat = append(lat, time.Duration(a.At-a.Cmd.Stamp))
	}
	cal := rep.Rows[0]
	m := tss.DelayModel{
		Latency:    tss.NewDistribution(lat),
		Rate:       float64(len(arrivals)) / rep.Duration.Seconds(),
		TickPeriod: period,
		TickCost:   cal.ExecTime / time.Duration(max(cal.Ticks, 1)),
		History:    cfg.History,
	}
	if cal.Rollbacks > 0 {
		m.CopyCost = cal.RbTime / time.Duration(cal.Rollbacks)
	}
	if ooo := calMetrics.OutOfOrder(0); ooo > 0 {
		m.MismatchProb = min(float64(calMetrics.RollbacksBy(1))/float64(ooo), 1)
	}
	rep.Model = ModelInputs{Rate: m.Rate, TickCost: m.TickCost, CopyCost: m.CopyCost, MismatchProb: m.MismatchProb, P999: m.Latency.Quantile(0.999)}
	if rep.Choice, err = tss.ChooseDelays(m); err != nil {
		return nil, err
	}
	var tw *tss.TraceWriter[game.Command]
	var tracer tss.Tracer[game.Command] // stays a nil interface without a trace
	if trace != nil {
		if tw, err = NewWorldTraceWriter(trace, cfg.Workload.World, withDelays(base, rep.Choice.Delays)); err != nil {
			return nil, err
		}
		tracer = tw
	}
	row, _, err := runTSS(base, rep.Choice.Delays, arrivals, end, ref, newWorld, tracer)
	if err != nil {
		return nil, err
	}
	if cfg.Repeats > 1 { // timed again without the trace writer in the way
		timed, _, err := repeatTSS(cfg.Repeats, base, rep.Choice.Delays, arrivals, end, ref, newWorld)
		if err != nil {
			return nil, err
		}
		if timed.Rollbacks != row.Rollbacks {
			return nil, fmt.Errorf("ChooseDelays run: %d rollbacks traced, %d untraced", row.Rollbacks, timed.Rollbacks)
		}
		row = timed
	}
	if tw != nil {
		if err := tw.Flush(); err != nil {
			return nil, err
		}
	}
	row.Label = "ChooseDelays"
	pred := rep.Choice.Predicted
	row.Predicted = &pred
	rep.Rows = append(rep.Rows, row)
	rep.Goals, rep.CostRatio = goals(rep)
	rep.Wall = time.Since(start)
	return rep, nil
}

func withDelays(c tss.Config, d []time.Duration) tss.Config {
	c.Delays = slices.Clone(d)
	return c
}

// repeatTSS runs a configuration n times, keeps the shortest execution and
// rollback times, and fails if the counts differ between runs.
func repeatTSS(n int, base tss.Config, delays []time.Duration, arrivals []Arrival, end int64, ref [][32]byte, newWorld func() *game.World) (Row, *tss.Metrics, error) {
	best, met, err := runTSS(base, delays, arrivals, end, ref, newWorld, nil)
	for i := 1; i < n && err == nil; i++ {
		var row Row
		if row, _, err = runTSS(base, delays, arrivals, end, ref, newWorld, nil); err != nil {
			break
		}
		if row.Rollbacks != best.Rollbacks || row.Executed != best.Executed || row.TooLate != best.TooLate {
			return best, met, fmt.Errorf("delays %s: repeat %d gave %d rollbacks and %d executions, the first %d and %d: not deterministic",
				best.Label, i, row.Rollbacks, row.Executed, best.Rollbacks, best.Executed)
		}
		best.ExecTime, best.RbTime = min(best.ExecTime, row.ExecTime), min(best.RbTime, row.RbTime)
	}
	best.Total = best.ExecTime + best.RbTime
	if best.Executed > 0 {
		best.CmdCost = best.ExecTime / time.Duration(best.Executed)
	}
	if best.Rollbacks > 0 {
		best.RbCost = best.RbTime / time.Duration(best.Rollbacks)
	}
	return best, met, err
}

// runTSS delivers the arrivals to a synchronizer with the given delays,
// ticking it at every tick boundary as a mirror's frame loop would.
func runTSS(base tss.Config, delays []time.Duration, arrivals []Arrival, end int64, ref [][32]byte, newWorld func() *game.World, tracer tss.Tracer[game.Command]) (Row, *tss.Metrics, error) {
	row := Row{Label: label(delays), Delays: delays}
	started := time.Now()
	opts := tss.Options[game.Command]{CostClock: func() time.Duration { return time.Since(started) }, Tracer: tracer}
	s, err := tss.New[*game.World, game.Command, game.TickRecord](withDelays(base, delays), newWorld(), newWorld, opts)
	if err != nil {
		return row, nil, err
	}
	inOrder := true
	check := func(r tss.Ready) {
		for _, cp := range r.Checkpoints {
			if cp.Tick >= uint64(len(ref)) || cp.Hash != ref[cp.Tick] {
				inOrder = false
			}
		}
		for _, rb := range r.Rollbacks {
			row.MaxDepth = max(row.MaxDepth, rb.Depth)
		}
	}
	frame := base.Epoch
	for _, a := range arrivals {
		for frame+int64(base.TickPeriod) < a.At {
			frame += int64(base.TickPeriod)
			check(s.Tick(frame))
		}
		s.Deliver(a.Cmd, a.At)
	}
	for frame < end {
		frame += int64(base.TickPeriod)
		check(s.Tick(frame))
	}
	last := s.Last()
	row.InOrder = inOrder && last.Tick() < uint64(len(ref)) && last.Hash() == ref[last.Tick()]
	met := s.Metrics()
	row.Executed, row.Ticks = met.Executed.Load(), met.Ticks.Load()
	row.ExecTime, row.RbTime = met.ExecTime(), met.RollbackTime()
	row.Rollbacks, row.TooLate = met.Rollbacks.Load(), met.TooLate.Load()
	row.Total = row.ExecTime + row.RbTime
	if row.Executed > 0 {
		row.CmdCost = row.ExecTime / time.Duration(row.Executed)
	}
	if row.Rollbacks > 0 {
		row.RbCost = row.RbTime / time.Duration(row.Rollbacks)
	}
	n := float64(len(arrivals))
	row.RbPer1000 = float64(row.Rollbacks) / n * 1000
	row.XCmds = float64(row.Executed) / n
	for i := 1; i < len(delays); i++ {
		row.ByState = append(row.ByState, met.RollbacksBy(i))
	}
	return row, met, nil
}

func runWarp(base tss.Config, arrivals []Arrival, end int64, ref [][32]byte, newWorld func() *game.World) (WarpRow, error) {
	var row WarpRow
	started := time.Now()
	w, err := tss.NewTimeWarp[*game.World, game.Command, game.TickRecord](withDelays(base, []time.Duration{0, base.History}), newWorld(), newWorld,
		tss.Options[game.Command]{CostClock: func() time.Duration { return time.Since(started) }})
	if err != nil {
		return row, err
	}
	for _, a := range arrivals {
		w.Deliver(a.Cmd, a.At)
	}
	w.Tick(end)
	met := w.Metrics()
	row.Executed = met.Executed.Load()
	row.Snapshots, row.Restores = met.Copies.Load(), met.Rollbacks.Load()
	row.Copies = row.Snapshots + row.Restores
	row.ExecTime, row.CopyTime = met.ExecTime(), met.RollbackTime()
	row.Total = row.ExecTime + row.CopyTime
	st := w.State()
	row.InOrder = st.Tick() < uint64(len(ref)) && st.Hash() == ref[st.Tick()]
	return row, nil
}

func label(d []time.Duration) string {
	parts := make([]string, len(d))
	for i, v := range d {
		parts[i] = fmt.Sprint(v.Milliseconds())
	}
	return strings.Join(parts, ",")
}

func goals(r *Report) ([]Check, [2]float64) {
	var out []Check
	choice := r.Rows[len(r.Rows)-1]
	paperRows := r.Rows[:len(r.Rows)-1]
	allInOrder := true
	bestRb := time.Duration(-1)
	ratio := [2]float64{}
	for _, row := range r.Rows {
		if row.TooLate == 0 && !row.InOrder {
			allInOrder = false
		}
		if row.Rollbacks > 0 && row.CmdCost > 0 {
			q := float64(row.RbCost) / float64(row.CmdCost)
			if ratio[0] == 0 || q < ratio[0] {
				ratio[0] = q
			}
			ratio[1] = max(ratio[1], q)
		}
	}
	// The best rollback time among the configurations that lose no command
	// (one that drops commands as too late rolls back less because it runs
	// less, and its mirrors diverge); the best of all is printed too.
	bestAll := time.Duration(-1)
	var best Row
	for _, row := range paperRows {
		if bestAll < 0 || row.RbTime < bestAll {
			bestAll = row.RbTime
		}
		if row.TooLate == 0 && (bestRb < 0 || row.RbTime < bestRb) {
			bestRb, best = row.RbTime, row
		}
	}
	out = append(out, Check{Name: "every run without too-late commands ends with its last state equal to the in-order run", OK: allInOrder && r.Warp.InOrder})
	copiesRatio := float64(r.Warp.Copies) / float64(max(choice.Rollbacks, 1))
	out = append(out, Check{
		Name: "ChooseDelays makes at least 10x fewer state copies than Time Warp",
		OK:   copiesRatio >= 10,
		Note: fmt.Sprintf("%d vs %d: %.0fx fewer", choice.Rollbacks, r.Warp.Copies, copiesRatio),
	})
	out = append(out, Check{Name: "ChooseDelays: no command too late", OK: choice.TooLate == 0, Note: fmt.Sprintf("%d too late, delays %s", choice.TooLate, choice.Label)})
	out = append(out, Check{
		Name: "ChooseDelays: rollback time at or below the best of the paper's configurations that lose no command, on this trace",
		OK:   bestRb >= 0 && choice.RbTime <= bestRb,
		Note: fmt.Sprintf("%s vs %s (%s); rollbacks %d vs %d, total %s vs %s; best of all seven, too-late drops included: %s",
			dur(choice.RbTime), dur(bestRb), best.Label, choice.Rollbacks, best.Rollbacks, dur(choice.Total), dur(best.Total), dur(bestAll)),
	})
	return out, ratio
}

// WriteText prints the report, the paper's rows beside ours.
func (r *Report) WriteText(w io.Writer) {
	c := r.Config
	wl := c.Workload
	fmt.Fprintf(w, "TSS, table 3.1: %d mirrors x %d bots, a command every %v per player, world %dx%d regions at %d Hz (seed %d)\n",
		wl.Mirrors, wl.BotsPerMirror, wl.Interval, wl.World.RegionsX, wl.World.RegionsY, wl.World.TickRate, wl.World.Seed)
	a := r.Arrivals
	fmt.Fprintf(w, "trace: %d commands sent over %v; mirror %d saw %d (paper: %d): %d local, %d over CRIMP (%d repaired), %d lost\n",
		a.Sent, r.Duration.Round(time.Millisecond), c.Observer, r.Commands, PaperCommands, a.Local, a.Remote, a.Repaired, a.Lost)
	fmt.Fprintf(w, "link (modelled, crimp.MemNetwork on a SimClock): %v one-way + up to %v jitter, %.0f%% loss, CRIMP history %v\n",
		c.Link.Delay, c.Link.Jitter, c.Link.Loss*100, c.History)
	fmt.Fprintf(w, "remote latency at mirror %d: mean %s, p50 %s, p99 %s, p99.9 %s, max %s; weak margin %d units\n\n",
		c.Observer, dur(a.Mean), dur(a.P50), dur(a.P99), dur(a.P999), dur(a.Max), c.WeakMargin)
	fmt.Fprintf(w, "%-16s | %16s | %17s | %13s | %17s | %15s | %15s | %13s | %11s | %5s %3s %7s\n",
		"delays ms", "executed", "exec time", "rollbacks", "rollback time", "cmd cost", "rb cost", "rb/1000", "x cmds", "late", "ok", "depth")
	paper := func(p *PaperRow, f func(PaperRow) string) string {
		if p == nil {
			return "-"
		}
		return f(*p)
	}
	for _, row := range r.Rows {
		p := row.Paper
		ok := "yes"
		if !row.InOrder {
			ok = "NO"
		}
		fmt.Fprintf(w, "%-16s | %7d %8s | %8s %8s | %5d %7s | %8s %8s | %6s %8s | %6s %8s | %5.1f %7s | %4.2f %6s | %5d %3s %7d\n",
			row.Label,
			row.Executed, paper(p, func(p PaperRow) string { return fmt.Sprint(p.Executed) }),
			dur(row.ExecTime), paper(p, func(p PaperRow) string { return fmt.Sprintf("%.3fs", p.ExecSeconds) }),
			row.Rollbacks, paper(p, func(p PaperRow) string { return fmt.Sprint(p.Rollbacks) }),
			dur(row.RbTime), paper(p, func(p PaperRow) string { return fmt.Sprintf("%.3fs", p.RollbackSecs) }),
			dur(row.CmdCost), paper(p, func(p PaperRow) string { return fmt.Sprintf("%.2fms", p.ExecSeconds*1000/float64(p.Executed)) }),
			dur(row.RbCost), paper(p, func(p PaperRow) string { return fmt.Sprintf("%.2fms", p.RollbackSecs*1000/float64(p.Rollbacks)) }),
			row.RbPer1000, paper(p, func(p PaperRow) string { return fmt.Sprintf("%.1f", float64(p.Rollbacks)/PaperCommands*1000) }),
			row.XCmds, paper(p, func(p PaperRow) string { return fmt.Sprintf("%.2f", float64(p.Executed)/PaperCommands) }),
			row.TooLate, ok, row.MaxDepth)
	}
	fmt.Fprintln(w, "(each cell: ours, then the paper's; cmd cost = exec time / executed, rb cost = rollback time / rollbacks; a rollback is one state copy plus requeue)")
	tw := r.Warp
	fmt.Fprintf(w, "\nTime Warp (snapshot before every tick with commands, restore on a straggler, window %v): %d executed, %d snapshots + %d restores = %d copies, exec %s + copies %s = %s, in order: %v\n",
		c.History, tw.Executed, tw.Snapshots, tw.Restores, tw.Copies, dur(tw.ExecTime), dur(tw.CopyTime), dur(tw.Total), tw.InOrder)
	for _, row := range r.Rows {
		fmt.Fprintf(w, "  copies: TSS %-16s %6d vs Time Warp %d: %.0fx fewer; total time %s vs %s\n",
			row.Label, row.Rollbacks, tw.Copies, float64(tw.Copies)/float64(max(row.Rollbacks, 1)), dur(row.Total), dur(tw.Total))
	}
	m := r.Model
	fmt.Fprintf(w, "\nChooseDelays input (measured here): rate %.1f commands/s, p99.9 latency %s, tick cost %s, copy cost %s, mismatch probability %.2f\n",
		m.Rate, dur(m.P999), dur(m.TickCost), dur(m.CopyCost), m.MismatchProb)
	fmt.Fprintf(w, "ChooseDelays picked %s ms (tail covered: %v): predicted %.1f rollbacks/s, %s CPU per s (steady %s, re-execution %s, copies %s)\n",
		label(r.Choice.Delays), r.Choice.TailCovered, r.Choice.Predicted.Rollback, dur(r.Choice.Predicted.Total),
		dur(r.Choice.Predicted.Steady), dur(r.Choice.Predicted.Reexec), dur(r.Choice.Predicted.Copies))
	fmt.Fprintf(w, "rollback cost / command cost: %.1fx to %.1fx over these runs (paper: 9x to 19x)\n\n", r.CostRatio[0], r.CostRatio[1])
	for _, g := range r.Goals {
		mark := "FAIL"
		if g.OK {
			mark = "ok"
		}
		fmt.Fprintf(w, "goal %-4s %s %s\n", mark, g.Name, g.Note)
	}
}

func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
