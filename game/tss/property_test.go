package tss

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFigure31 checks the facts of the paper's example directly (the
// golden file testdata/scenarios/fig31.txt shows the whole run): no
// rollback for the on-time MOVE, exactly one for the late FIRE, found by
// the first trailing state at t=300 and restoring the leading state to
// t=200, after which every state equals the in-order run.
func TestFigure31(t *testing.T) {
	ms := func(v int64) int64 { return v * int64(time.Millisecond) }
	cfg := Config{Delays: []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}, TickPeriod: 50 * time.Millisecond}
	s, err := newFxSync(cfg, Options[fxCmd]{})
	if err != nil {
		t.Fatal(err)
	}
	move := fxCmd{Stamp: ms(150), Mirror: 1, Seq: 1, Player: 0, Op: fxMove, Arg: 5}
	fire := fxCmd{Stamp: ms(200), Mirror: 2, Seq: 1, Player: 1, Op: fxFire}
	var rollbacks []Rollback
	tick := func(now int64) {
		rollbacks = append(rollbacks, s.Tick(now).Rollbacks...)
	}
	if v := s.Deliver(move, ms(150)); v != Accepted {
		t.Fatalf("move: %v", v)
	}
	for now := int64(150); now <= 225; now += 25 {
		tick(ms(now))
	}
	if len(rollbacks) != 0 {
		t.Fatalf("the on-time move rolled back: %+v", rollbacks)
	}
	if v := s.Deliver(fire, ms(225)); v != Accepted {
		t.Fatalf("fire: %v", v)
	}
	for now := int64(250); now <= 1000; now += 25 {
		tick(ms(now))
	}
	if len(rollbacks) != 1 {
		t.Fatalf("%d rollbacks, want exactly 1: %+v", len(rollbacks), rollbacks)
	}
	rb := rollbacks[0]
	if rb.State != 0 || rb.By != 1 || rb.At != ms(300) || time.Duration(rb.Tick)*cfg.TickPeriod != 200*time.Millisecond {
		t.Fatalf("rollback %+v, want state 0 restored to 200 ms by state 1 at 300 ms", rb)
	}
	ref := fxReference(cfg, []fxCmd{move, fire}, 40)
	for i := range s.States() {
		if st := s.State(i); st.Hash() != ref[st.Tick()] {
			t.Errorf("state %d at tick %d differs from the in-order run", i, st.Tick())
		}
	}
}

// propertyRun is one random run: deliveries with arrival delays up to the
// last delay, Ticks at random times.
type propertyRun struct {
	cfg        Config
	deliveries []delivery
	ticks      []int64 // Tick times (sorted, interleaved with deliveries by time)
	end        int64
}

type delivery struct {
	at  int64
	cmd fxCmd
}

func randomRun(seed uint64, trailing int) propertyRun {
	rng := rand.New(rand.NewPCG(seed, 0x7455))
	periods := []time.Duration{10 * time.Millisecond, time.Second / 30, 50 * time.Millisecond}
	cfg := Config{TickPeriod: periods[rng.IntN(len(periods))], CheckpointTicks: 1}
	d := time.Duration(0)
	if rng.IntN(3) == 0 {
		d = time.Duration(rng.IntN(20)) * time.Millisecond
	}
	cfg.Delays = []time.Duration{d}
	for range trailing {
		d += time.Duration(5+rng.IntN(200)) * time.Millisecond
		cfg.Delays = append(cfg.Delays, d)
	}
	if rng.IntN(2) == 0 {
		cfg.WeakMargin = int64(1 + rng.IntN(5))
	}
	dk := int64(d)
	run := propertyRun{cfg: cfg}
	n := 20 + rng.IntN(150)
	span := int64(time.Second) + rng.Int64N(int64(2*time.Second))
	seqs := map[uint32]uint64{}
	for range n {
		c := fxCmd{
			Stamp:  int64(time.Millisecond) + rng.Int64N(span),
			Mirror: uint32(1 + rng.IntN(3)),
			Player: uint8(rng.IntN(fxPlayers)),
			Op:     fxOp(1 + rng.IntN(int(fxOps)-1)),
			Arg:    int64(rng.IntN(21) - 10),
		}
		seqs[c.Mirror]++
		c.Seq = seqs[c.Mirror]
		run.deliveries = append(run.deliveries, delivery{at: c.Stamp + rng.Int64N(dk+1), cmd: c})
		if rng.IntN(10) == 0 { // a duplicate from the network
			run.deliveries = append(run.deliveries, delivery{at: c.Stamp + rng.Int64N(dk+1), cmd: c})
		}
	}
	slices.SortStableFunc(run.deliveries, func(a, b delivery) int { return int(min(max(a.at-b.at, -1), 1)) })
	for now := int64(0); now < span+dk; now += rng.Int64N(int64(80 * time.Millisecond)) {
		run.ticks = append(run.ticks, now)
	}
	run.end = span + dk + int64(2*cfg.TickPeriod) + dk
	return run
}

// play runs the deliveries and ticks in time order (deliveries first at
// equal times) and reports every checkpoint and rollback.
func (r propertyRun) play(t *testing.T, s *fxSync, withTicks bool) (cps []Checkpoint, rollbacks int, accepted []fxCmd) {
	t.Helper()
	collect := func(rd Ready) {
		cps = append(cps, rd.Checkpoints...)
		rollbacks += len(rd.Rollbacks)
		if rd.Dropped > 0 {
			t.Fatalf("Ready dropped %d items", rd.Dropped)
		}
	}
	ti := 0
	for _, d := range r.deliveries {
		for withTicks && ti < len(r.ticks) && r.ticks[ti] < d.at {
			collect(s.Tick(r.ticks[ti]))
			ti++
		}
		switch v := s.Deliver(d.cmd, d.at); v {
		case Accepted:
			accepted = append(accepted, d.cmd)
		case Duplicate:
		default:
			t.Fatalf("command %+v arriving at %v: %v (arrival delays are within the last delay)", d.cmd, time.Duration(d.at), v)
		}
	}
	collect(s.Tick(r.end))
	return cps, rollbacks, accepted
}

// TestPropertyLastStateIsInOrder: over 1000 seeds, 1–4 trailing states and
// arrival delays up to the last delay, the last state equals the in-order
// run at every tick; with a zero margin every state equals it once the
// commands have stopped for dk; and how often Tick is called changes
// nothing.
func TestPropertyLastStateIsInOrder(t *testing.T) {
	seeds := 1000
	if testing.Short() {
		seeds = 200
	}
	for seed := range uint64(seeds) {
		run := randomRun(seed, 1+int(seed%4))
		s, err := newFxSync(run.cfg, Options[fxCmd]{})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		cps, rollbacks, accepted := run.play(t, s, true)
		last := s.Last().Tick()
		ref := fxReference(run.cfg, accepted, s.Leading().Tick())
		if uint64(len(cps)) != last {
			t.Fatalf("seed %d: %d checkpoints for %d ticks", seed, len(cps), last)
		}
		for _, cp := range cps {
			if cp.Hash != ref[cp.Tick] {
				t.Fatalf("seed %d (%v, margin %d): last state differs from the in-order run at tick %d", seed, run.cfg.Delays, run.cfg.WeakMargin, cp.Tick)
			}
		}
		if run.cfg.WeakMargin == 0 {
			for i := range s.States() {
				if st := s.State(i); st.Hash() != ref[st.Tick()] {
					t.Fatalf("seed %d (%v): state %d at tick %d has not converged", seed, run.cfg.Delays, i, st.Tick())
				}
			}
		}
		if s.Pending() != 0 {
			t.Fatalf("seed %d: %d commands still pending", seed, s.Pending())
		}
		// The same deliveries with a single final Tick: the same run.
		s2, _ := newFxSync(run.cfg, Options[fxCmd]{})
		cps2, rollbacks2, _ := run.play(t, s2, false)
		if rollbacks2 != rollbacks || !slices.Equal(cps2, cps) {
			t.Fatalf("seed %d: %d rollbacks with ticks, %d without; checkpoints equal: %v", seed, rollbacks, rollbacks2, slices.Equal(cps2, cps))
		}
		for i := range s.States() {
			if s.State(i).Hash() != s2.State(i).Hash() {
				t.Fatalf("seed %d: state %d depends on when Tick was called", seed, i)
			}
		}
	}
}

// TestValidate names the values it rejects.
func TestValidate(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Delays: []time.Duration{0, 100 * ms, 100 * ms}}, "Delays[2] 100ms not above Delays[1] 100ms"},
		{Config{Delays: []time.Duration{0, 200 * ms, 100 * ms}}, "Delays[2] 100ms not above Delays[1] 200ms"},
		{Config{Delays: []time.Duration{-ms, 100 * ms}}, "leading delay Delays[0] -1ms is negative"},
		{Config{Delays: []time.Duration{0, 100 * ms, 1500 * ms}, History: time.Second}, "last delay 1.5s longer than CRIMP's History 1s"},
		{Config{TickPeriod: -ms}, "TickPeriod -1ms"},
		{Config{MaxPending: -1}, "MaxPending -1"},
		{Config{WeakMargin: -2}, "WeakMargin -2"},
		{Config{Epoch: -5}, "Epoch -5"},
		{Config{Delays: make([]time.Duration, MaxStates+1)}, "17 Delays"},
	} {
		err := tc.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want it to mention %q", tc.cfg, err, tc.want)
		}
		if _, err := newFxSync(tc.cfg, Options[fxCmd]{}); err == nil {
			t.Errorf("New accepted %+v", tc.cfg)
		}
	}
	if err := (Config{History: time.Second}).WithDefaults().Validate(); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
}

// fxStateAt is the in-order run of cmds up to tick t: what an authority
// would transfer.
func fxStateAt(cfg Config, cmds []fxCmd, t uint64) *fxState {
	cfg = cfg.WithDefaults()
	s := newFx()
	for s.Tick() < t {
		var batch []fxCmd
		for _, c := range cmds {
			if cfg.TickOf(c.Stamp) == s.Tick()+1 {
				batch = append(batch, c)
			}
		}
		slices.SortFunc(batch, compareFx)
		s.Advance(batch)
	}
	return s
}

// TestReset: a resync in the middle of a run, from a transferred state
// older than the last state (commands it already executed are filed
// again) or newer (pending commands it contains are dropped), leaves the
// last state equal to the in-order run of every command.
func TestReset(t *testing.T) {
	for seed := range uint64(200) {
		run := randomRun(seed, 1+int(seed%3))
		s, err := newFxSync(run.cfg, Options[fxCmd]{})
		if err != nil {
			t.Fatal(err)
		}
		var all []fxCmd
		seen := map[commandKey]bool{}
		for _, d := range run.deliveries {
			if k := (commandKey{d.cmd.Mirror, d.cmd.Seq}); !seen[k] {
				seen[k] = true
				all = append(all, d.cmd)
			}
		}
		half := len(run.deliveries) / 2
		for i, d := range run.deliveries {
			if i == half {
				var at uint64
				if seed%2 == 0 {
					at = s.Last().Tick() - min(s.Last().Tick(), 3)
				} else {
					at = s.Leading().Tick()
				}
				if err := s.Reset(fxStateAt(run.cfg, all, at)); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				for j := range s.States() {
					if s.State(j).Tick() != at {
						t.Fatalf("seed %d: state %d at %d after a reset to %d", seed, j, s.State(j).Tick(), at)
					}
				}
			}
			s.Deliver(d.cmd, d.at)
		}
		s.Tick(run.end)
		ref := fxReference(run.cfg, all, s.Leading().Tick())
		if s.Last().Hash() != ref[s.Last().Tick()] {
			t.Fatalf("seed %d: last state after a reset differs from the in-order run", seed)
		}
		if s.Pending() != 0 {
			t.Fatalf("seed %d: %d pending at the end", seed, s.Pending())
		}
	}
}

// TestRetunedRun: delays changed on the fly by the retuner keep the last
// state the in-order run of the commands it accepted, and with a zero
// margin every state converges.
func TestRetunedRun(t *testing.T) {
	changes := 0
	for seed := range uint64(100) {
		run := randomRun(seed, 1+int(seed%4))
		run.cfg.WeakMargin = 0
		run.cfg.History = time.Second
		s, err := newFxSync(run.cfg, Options[fxCmd]{})
		if err != nil {
			t.Fatal(err)
		}
		model := DelayModel{TickPeriod: run.cfg.TickPeriod, CommandCost: time.Microsecond, TickCost: time.Microsecond, CopyCost: 10 * time.Microsecond, History: time.Second}
		r, err := NewRetuner(RetunerConfig{Model: model, Window: 64, MinSamples: 16, Interval: 200 * time.Millisecond, Gain: 0.05, CheckEvery: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var accepted []fxCmd
		var cps []Checkpoint
		for _, d := range run.deliveries {
			if s.Deliver(d.cmd, d.at) == Accepted {
				accepted = append(accepted, d.cmd)
				r.Observe(d.at, time.Duration(d.at-d.cmd.Stamp))
			}
			if c, ok := r.Propose(d.at, s.Config().Delays); ok {
				if err := s.SetDelays(d.at, c.Delays); err != nil {
					t.Fatalf("seed %d: proposal %v: %v", seed, c.Delays, err)
				}
				changes++
			}
			cps = append(cps, s.Tick(d.at).Checkpoints...)
		}
		cps = append(cps, s.Tick(run.end+int64(2*time.Second)).Checkpoints...)
		ref := fxReference(run.cfg, accepted, s.Leading().Tick())
		for _, cp := range cps {
			if cp.Hash != ref[cp.Tick] {
				t.Fatalf("seed %d: last state off the in-order run at tick %d", seed, cp.Tick)
			}
		}
		for i := range s.States() {
			if st := s.State(i); st.Hash() != ref[st.Tick()] {
				t.Fatalf("seed %d: state %d did not converge after retuning to %v", seed, i, s.Config().Delays)
			}
		}
	}
	if changes == 0 {
		t.Fatal("the retuner never changed the delays")
	}
	t.Logf("%d delay changes", changes)
}
