package tss

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Choosing the delays is the paper's open question [Cronin et al. 2001,
// §3.5.3]: "given the delay distribution, message frequency, cost of
// executing a message and the cost of a context copy, it should be
// possible to build a model". This is that model.
//
// A command with arrival latency L (arrival minus stamp) is in time for the
// state with delay d when it arrives before that state runs its tick, i.e.
// L ≤ d + σ, σ being the time from the stamp to the end of its tick
// (uniform in [0, P)). So a fraction Fe(d) = E_σ[F(d+σ)] of commands is in
// time for delay d, F being the latency distribution.
//
//   - The last delay covers the tail: dk = Quantile(q) + P, at most CRIMP's
//     history; commands later than that are too late for every state.
//     MIRROR_MODE.md takes q = 0.999; we cover the whole observed tail
//     (q = 1) by default instead: a too-late command makes the mirrors'
//     last states differ and costs a resync, CRIMP's history bounds the
//     tail anyway, and a longer dk costs little (only the last state's
//     rollbacks of the state ahead re-execute more). Quantile = 0.999
//     restores the document's rule.
//   - A command in time for state i but not for state i-1 (a fraction
//     Fe(di) - Fe(di-1)) ran out of order in states 0..i-1; with
//     probability p it makes a difference state i detects. State i then
//     rolls back state i-1, whose re-execution rolls back the states ahead
//     of it: i copies, and state j re-executes di - dj of simulated time.
//     One rollback cancels the others found in its window (di - di-1), so
//     with λi = rate·p·(Fe(di) - Fe(di-1)) mismatching commands per second,
//     state i rolls back λi / (1 + λi·(di - di-1)) times per second.
//   - Every state executes every command and every tick: (k+1)·(rate·cCmd
//     + cTick/P) per second, which is what stops the model from adding
//     states without end.
//
// ChooseDelays minimises the total (steady execution + re-execution +
// copies) per second of wall time over the number of trailing states
// (1..MaxTrailing) and the inner delays (on a grid between d0 and dk),
// subject to d1 - d0 ≤ MaxGap (100 ms: rollbacks of the leading state,
// the ones players see, stay "unnoticeable" [§3.3.3]).

// Distribution is an empirical distribution of arrival latency.
type Distribution struct {
	// Either sorted samples or a histogram (bounds ascending, cum the
	// fraction of samples at or below each bound).
	sorted []time.Duration
	bounds []time.Duration
	cum    []float64
	n      uint64
}

// NewDistribution returns the empirical distribution of samples (copied).
func NewDistribution(samples []time.Duration) Distribution {
	s := slices.Clone(samples)
	slices.Sort(s)
	return Distribution{sorted: s, n: uint64(len(s))}
}

// DistributionFromHistogram builds a distribution from a latency histogram
// such as Metrics.LatencyHistogram or crimp's perceived latency: counts[i]
// samples in (bounds[i-1], bounds[i]], spread evenly, and over samples
// beyond the last bound, put at twice it (a histogram cannot say more; a
// last bound at CRIMP's history is exact, nothing is delivered later).
func DistributionFromHistogram(bounds []time.Duration, counts []uint64, over uint64) (Distribution, error) {
	if len(bounds) == 0 || len(bounds) != len(counts) {
		return Distribution{}, fmt.Errorf("histogram with %d bounds and %d counts", len(bounds), len(counts))
	}
	if !slices.IsSorted(bounds) || bounds[0] < 0 {
		return Distribution{}, errors.New("histogram bounds must be ascending and non-negative")
	}
	total := over
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return Distribution{}, errors.New("empty histogram")
	}
	d := Distribution{bounds: slices.Clone(bounds), n: total}
	var run uint64
	for _, c := range counts {
		run += c
		d.cum = append(d.cum, float64(run)/float64(total))
	}
	if over > 0 {
		d.bounds = append(d.bounds, 2*bounds[len(bounds)-1])
		d.cum = append(d.cum, 1)
	}
	return d, nil
}

// N is the number of samples behind the distribution.
func (d Distribution) N() uint64 { return d.n }

// CDF is the fraction of latencies at or below x.
func (d Distribution) CDF(x time.Duration) float64 {
	if d.n == 0 {
		return 1
	}
	if d.sorted != nil {
		i, found := slices.BinarySearch(d.sorted, x)
		for found && i < len(d.sorted) && d.sorted[i] == x {
			i++
		}
		return float64(i) / float64(len(d.sorted))
	}
	lo, plo := time.Duration(0), 0.0
	for i, b := range d.bounds {
		if x <= b {
			if b == lo {
				return d.cum[i]
			}
			return plo + (d.cum[i]-plo)*float64(x-lo)/float64(b-lo)
		}
		lo, plo = b, d.cum[i]
	}
	return 1
}

// Quantile is the smallest latency x with CDF(x) ≥ q.
func (d Distribution) Quantile(q float64) time.Duration {
	if d.n == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	if d.sorted != nil {
		i := int(math.Ceil(q*float64(len(d.sorted)))) - 1
		return d.sorted[min(max(i, 0), len(d.sorted)-1)]
	}
	lo, plo := time.Duration(0), 0.0
	for i, b := range d.bounds {
		if d.cum[i] >= q {
			if d.cum[i] == plo {
				return b
			}
			return lo + time.Duration(float64(b-lo)*(q-plo)/(d.cum[i]-plo))
		}
		lo, plo = b, d.cum[i]
	}
	return d.bounds[len(d.bounds)-1]
}

// DelayModel holds what ChooseDelays needs to know.
type DelayModel struct {
	Latency    Distribution
	Rate       float64 // commands per second reaching this mirror (its own included)
	TickPeriod time.Duration
	// CommandCost is the cost of executing one command, TickCost that of a
	// tick without commands (the world's own work), CopyCost that of one
	// rollback's state copy and requeue.
	CommandCost, TickCost, CopyCost time.Duration
	// MismatchProb is the probability that a command run out of order makes
	// a difference the next state detects (0 means 1, the pessimistic
	// value; Metrics gives an estimate: rollbacks over out-of-order runs).
	MismatchProb float64
	// LeadDelay is d0 (default 0).
	LeadDelay time.Duration
	// MaxGap bounds d1 - d0 (default 100 ms).
	MaxGap time.Duration
	// MaxTrailing bounds the number of trailing states (default 4, at most
	// MaxStates-1).
	MaxTrailing int
	// History is CRIMP's history: the last delay never exceeds it (0: no
	// bound).
	History time.Duration
	// Quantile of the latency the last delay covers (default 1: the
	// largest observed; MIRROR_MODE.md's rule is 0.999).
	Quantile float64
	// Step is the grid of inner delays (default 5 ms, coarser if the range
	// would make the search large).
	Step time.Duration
}

func (m DelayModel) withDefaults() DelayModel {
	if m.MismatchProb <= 0 || m.MismatchProb > 1 {
		m.MismatchProb = 1
	}
	if m.MaxGap <= 0 {
		m.MaxGap = 100 * time.Millisecond
	}
	if m.MaxTrailing <= 0 {
		m.MaxTrailing = 4
	}
	m.MaxTrailing = min(m.MaxTrailing, MaxStates-1)
	if m.Quantile <= 0 || m.Quantile > 1 {
		m.Quantile = 1
	}
	if m.Step <= 0 {
		m.Step = 5 * time.Millisecond
	}
	return m
}

func (m DelayModel) validate() error {
	var errs []error
	if m.TickPeriod <= 0 {
		errs = append(errs, fmt.Errorf("TickPeriod %v not positive", m.TickPeriod))
	}
	if m.Rate < 0 || math.IsNaN(m.Rate) || math.IsInf(m.Rate, 0) {
		errs = append(errs, fmt.Errorf("Rate %g not a non-negative number", m.Rate))
	}
	if m.CommandCost < 0 || m.TickCost < 0 || m.CopyCost < 0 {
		errs = append(errs, fmt.Errorf("negative cost (command %v, tick %v, copy %v)", m.CommandCost, m.TickCost, m.CopyCost))
	}
	if m.LeadDelay < 0 {
		errs = append(errs, fmt.Errorf("LeadDelay %v negative", m.LeadDelay))
	}
	if m.History > 0 && m.History <= m.LeadDelay {
		errs = append(errs, fmt.Errorf("History %v leaves no room above LeadDelay %v", m.History, m.LeadDelay))
	}
	return errors.Join(errs...)
}

// Cost is a configuration's predicted cost per second of wall time.
type Cost struct {
	Steady   time.Duration // executing every command and tick in every state
	Reexec   time.Duration // re-executing after rollbacks
	Copies   time.Duration // the rollbacks' state copies
	Total    time.Duration
	Rollback float64 // rollbacks (copies) per second
	TooLate  float64 // commands per second later than the last delay
}

// inTime is Fe(d): the fraction of commands in time for delay d, averaging
// over where in its tick the stamp falls.
func (m DelayModel) inTime(d time.Duration) float64 {
	const points = 8
	var sum float64
	for i := range points {
		sum += m.Latency.CDF(d + m.TickPeriod*time.Duration(2*i+1)/(2*points))
	}
	return sum / points
}

// Predict is the model's cost of a configuration.
func (m DelayModel) Predict(delays []time.Duration) Cost {
	m = m.withDefaults()
	fe := make([]float64, len(delays))
	for i, d := range delays {
		fe[i] = m.inTime(d)
	}
	return m.cost(delays, fe)
}

// cost is Predict with the in-time fractions fe of delays given.
func (m DelayModel) cost(delays []time.Duration, fe []float64) Cost {
	perState := m.Rate*m.CommandCost.Seconds() + m.TickCost.Seconds()/m.TickPeriod.Seconds() // CPU s per s
	steady := float64(len(delays)) * perState
	var reexec, copies, rollbacks float64
	for i := 1; i < len(delays); i++ {
		lambda := m.Rate * m.MismatchProb * max(fe[i]-fe[i-1], 0)
		rho := lambda / (1 + lambda*(delays[i]-delays[i-1]).Seconds())
		for j := range i {
			copies += rho * m.CopyCost.Seconds()
			reexec += rho * (delays[i] - delays[j]).Seconds() * perState
			rollbacks += rho
		}
	}
	sec := func(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }
	c := Cost{Steady: sec(steady), Reexec: sec(reexec), Copies: sec(copies), Rollback: rollbacks}
	c.Total = c.Steady + c.Reexec + c.Copies
	c.TooLate = m.Rate * (1 - fe[len(fe)-1])
	return c
}

// DelayChoice is ChooseDelays' answer.
type DelayChoice struct {
	Delays    []time.Duration
	Predicted Cost
	// Tail is the latency quantile the last delay is meant to cover;
	// TailCovered is false when CRIMP's history cut the last delay short
	// of Tail + one tick.
	Tail        time.Duration
	TailCovered bool
}

// ChooseDelays picks the number of trailing states and their delays (see
// the model above).
func ChooseDelays(m DelayModel) (DelayChoice, error) {
	m = m.withDefaults()
	if err := m.validate(); err != nil {
		return DelayChoice{}, fmt.Errorf("choose delays: %w", err)
	}
	d0 := m.LeadDelay
	tail := m.Latency.Quantile(m.Quantile)
	dk := tail + m.TickPeriod
	dk = (dk + time.Millisecond - 1) / time.Millisecond * time.Millisecond
	covered := true
	if m.History > 0 && dk > m.History {
		dk, covered = m.History, false
	}
	dk = max(dk, d0+time.Millisecond)
	// At most maxGrid inner candidates: C(64, 3) configurations of four
	// states is the largest search.
	const maxGrid = 64
	step := max(m.Step, (dk-d0+maxGrid-1)/maxGrid)
	step = (step + time.Millisecond - 1) / time.Millisecond * time.Millisecond
	grid := []time.Duration{d0}
	for d := d0 + step; d < dk; d += step {
		grid = append(grid, d)
	}
	grid = append(grid, dk)
	fe := make([]float64, len(grid))
	for i, d := range grid {
		fe[i] = m.inTime(d)
	}
	best := DelayChoice{Tail: tail, TailCovered: covered}
	bestTotal := time.Duration(math.MaxInt64)
	inner := len(grid) - 2 // candidates grid[1 .. len-2]
	for k := 1; k <= m.MaxTrailing && k-1 <= inner; k++ {
		delays := make([]time.Duration, k+1)
		fes := make([]float64, k+1)
		delays[0], fes[0] = d0, fe[0]
		delays[k], fes[k] = dk, fe[len(fe)-1]
		// Every increasing choice of k-1 inner delays from the grid.
		idx := make([]int, k-1)
		for i := range idx {
			idx[i] = i + 1
		}
		for {
			for i, g := range idx {
				delays[i+1], fes[i+1] = grid[g], fe[g]
			}
			if delays[1]-delays[0] <= m.MaxGap {
				if c := m.cost(delays, fes); c.Total < bestTotal {
					bestTotal = c.Total
					best.Delays, best.Predicted = slices.Clone(delays), c
				}
			}
			i := len(idx) - 1
			for i >= 0 && idx[i] == inner-len(idx)+i+1 {
				i--
			}
			if i < 0 {
				break
			}
			idx[i]++
			for j := i + 1; j < len(idx); j++ {
				idx[j] = idx[j-1] + 1
			}
		}
	}
	if best.Delays == nil {
		// Only possible when the grid is too coarse to put d1 within MaxGap.
		best.Delays = []time.Duration{d0, min(d0+m.MaxGap, dk)}
		if best.Delays[1] < dk {
			best.Delays = append(best.Delays, dk)
		}
		best.Predicted = m.Predict(best.Delays)
	}
	return best, nil
}

// RetunerConfig configures online re-tuning.
type RetunerConfig struct {
	// Model holds the costs and bounds; its Latency and Rate are replaced by
	// what the retuner observes.
	Model DelayModel
	// Window is how many recent latency samples are kept (default 8192).
	Window int
	// MinSamples must be observed before any proposal (default 1000).
	MinSamples int
	// Interval is the least time between two changes made for efficiency
	// (default 30 s).
	Interval time.Duration
	// Gain is the predicted relative saving a change must bring (default
	// 0.2: 20 %).
	Gain float64
	// CheckEvery is how often Propose actually runs the model (default
	// 1 s); calls in between return at once.
	CheckEvery time.Duration
}

// Retuner re-runs ChooseDelays on the latencies a mirror observes and
// proposes new delays with hysteresis: for efficiency only when the
// predicted cost drops by Gain and Interval has passed since the last
// change; at once when the observed tail outgrows the last delay (commands
// would become too late, which no efficiency is worth). A proposal always
// passes Config.Validate for its History; Synchronizer.SetDelays applies it
// safely at any moment (see there).
type Retuner struct {
	cfg     RetunerConfig
	samples []time.Duration
	times   []int64
	next    int
	full    bool
	seen    uint64
	last    int64
	changed bool
	checked int64
	evals   bool
}

// NewRetuner checks cfg and returns a retuner.
func NewRetuner(cfg RetunerConfig) (*Retuner, error) {
	if cfg.Window == 0 {
		cfg.Window = 8192
	}
	if cfg.MinSamples == 0 {
		cfg.MinSamples = 1000
	}
	if cfg.Interval == 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.Gain == 0 {
		cfg.Gain = 0.2
	}
	if cfg.CheckEvery == 0 {
		cfg.CheckEvery = time.Second
	}
	var errs []error
	if cfg.Window < 16 || cfg.Window > 1<<20 {
		errs = append(errs, fmt.Errorf("Window %d outside [16, %d]", cfg.Window, 1<<20))
	}
	if cfg.MinSamples < 1 || cfg.MinSamples > cfg.Window {
		errs = append(errs, fmt.Errorf("MinSamples %d outside [1, Window %d]", cfg.MinSamples, cfg.Window))
	}
	if cfg.Gain < 0 || cfg.Gain >= 1 {
		errs = append(errs, fmt.Errorf("Gain %g outside [0, 1)", cfg.Gain))
	}
	if cfg.Interval < 0 || cfg.CheckEvery < 0 {
		errs = append(errs, fmt.Errorf("Interval %v or CheckEvery %v negative", cfg.Interval, cfg.CheckEvery))
	}
	if err := cfg.Model.withDefaults().validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("retuner: %w", err)
	}
	return &Retuner{cfg: cfg, samples: make([]time.Duration, cfg.Window), times: make([]int64, cfg.Window)}, nil
}

// Observe records one accepted command's arrival latency at time now.
func (r *Retuner) Observe(now int64, latency time.Duration) {
	r.samples[r.next], r.times[r.next] = max(latency, 0), now
	r.next = (r.next + 1) % len(r.samples)
	r.full = r.full || r.next == 0
	r.seen++
}

func (r *Retuner) window() ([]time.Duration, float64) {
	n := r.next
	if r.full {
		n = len(r.samples)
	}
	if n < 2 {
		return r.samples[:n], 0
	}
	oldest := r.times[0]
	if r.full {
		oldest = r.times[r.next]
	}
	newest := r.times[(r.next+len(r.times)-1)%len(r.times)]
	span := time.Duration(newest - oldest).Seconds()
	if span <= 0 {
		return r.samples[:n], 0
	}
	return r.samples[:n], float64(n-1) / span
}

// Model is the delay model with the observed latency and rate.
func (r *Retuner) Model() DelayModel {
	samples, rate := r.window()
	m := r.cfg.Model
	m.Latency = NewDistribution(samples)
	m.Rate = rate
	return m
}

// Propose returns new delays if they should replace current now. It runs
// the model at most once per CheckEvery.
func (r *Retuner) Propose(now int64, current []time.Duration) (DelayChoice, bool) {
	samples, _ := r.window()
	if len(samples) < r.cfg.MinSamples || len(current) == 0 {
		return DelayChoice{}, false
	}
	if r.evals && time.Duration(now-r.checked) < r.cfg.CheckEvery {
		return DelayChoice{}, false
	}
	r.checked, r.evals = now, true
	m := r.Model()
	choice, err := ChooseDelays(m)
	if err != nil || slices.Equal(choice.Delays, current) {
		return DelayChoice{}, false
	}
	urgent := current[len(current)-1] < choice.Tail && choice.Delays[len(choice.Delays)-1] > current[len(current)-1]
	if !urgent {
		if r.changed && time.Duration(now-r.last) < r.cfg.Interval {
			return DelayChoice{}, false
		}
		cur := m.Predict(current)
		if float64(cur.Total-choice.Predicted.Total) < r.cfg.Gain*float64(cur.Total) {
			return DelayChoice{}, false
		}
	}
	r.last, r.changed = now, true
	return choice, true
}
