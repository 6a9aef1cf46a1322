package vfcbench

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/overworld-p2p/overworld/game/vfc"
)

// RoundSetup is one cell of the paper's round-handler micro-benchmark [S
// §5.1]: a pool of Objects, one view with one pivot and three zones, and
// UpdatedPercent of the objects written (and so sent) before each round.
type RoundSetup struct {
	Objects        int
	UpdatedPercent int
	// MovingPivot moves the pivot before every round, so the round
	// recomputes every object's zone as figure 9 does; with a still pivot
	// only the written objects are rezoned.
	MovingPivot bool
	Literal     bool
	Seed        uint64
}

// Field is the half side of the square the objects are scattered over;
// the zones are drawn at a third and two thirds of it, so about 11%, 33%
// and 56% of the objects fall in zones 1, 2 and 3.
const Field = 3000

// RoundScale is the benchmark's consistency scale: the time bounds of the
// paper's .Net example (§4.2: 0.5, 1.5, 4.5 s) and a sequence bound of one
// in every zone, so that every written object passes figure 9's line 7
// test and the update percentage is the share sent, as in the paper's
// micro-benchmark (§5.1, note 3).
var RoundScale = []vfc.Vector{vfc.V(0.5, 1, vfc.Unbounded), vfc.V(1.5, 1, vfc.Unbounded), vfc.V(4.5, 1, vfc.Unbounded)}

// RoundPeriod is the simulated time between rounds.
const RoundPeriod = 100 * time.Millisecond

// RoundWorkload is a CMB set up as RoundSetup says, with 4-byte values
// (two int16 coordinates, the paper's example payload).
type RoundWorkload struct {
	setup   RoundSetup
	m       *vfc.CMB[int32, uint32]
	order   []vfc.ObjectID // objects other than the pivot, shuffled
	next    int
	perRnd  int
	now     time.Duration
	pivotAt vfc.Point[int32]
	step    int32
}

// Pivot is the object the view is centred on.
const Pivot vfc.ObjectID = 0

func packPoint(p vfc.Point[int32]) uint32 { return uint32(uint16(p.X))<<16 | uint32(uint16(p.Y)) }

// NewRoundWorkload builds the workload and runs its first round (the setup
// transfer of every object), which is not part of the measurement.
func NewRoundWorkload(s RoundSetup) (*RoundWorkload, error) {
	if s.Objects < 2 || s.UpdatedPercent < 0 || s.UpdatedPercent > 100 {
		return nil, fmt.Errorf("round workload: %d objects, %d%% updated: need at least 2 objects and 0..100%%", s.Objects, s.UpdatedPercent)
	}
	cfg := vfc.Config[int32]{
		Objects: s.Objects,
		Literal: s.Literal,
		Sets: []vfc.SetConfig[int32]{{
			Name:    "objects",
			Objects: make([]vfc.ObjectID, s.Objects),
			Zones:   []int32{Field / 3, 2 * Field / 3},
			Scale:   RoundScale,
		}},
		Views: []vfc.ViewConfig{{Name: "client", Pivots: []vfc.ObjectID{Pivot}}},
	}
	for i := range cfg.Sets[0].Objects {
		cfg.Sets[0].Objects[i] = vfc.ObjectID(i)
	}
	m, err := vfc.New[int32, uint32](cfg, nil)
	if err != nil {
		return nil, fmt.Errorf("round workload: %w", err)
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0x5eed))
	w := &RoundWorkload{setup: s, m: m, step: 1}
	for o := vfc.ObjectID(1); int(o) < s.Objects; o++ {
		at := vfc.Point[int32]{X: int32(rng.IntN(2*Field+1)) - Field, Y: int32(rng.IntN(2*Field+1)) - Field}
		if err := m.Update(o, at, packPoint(at)); err != nil {
			return nil, err
		}
		w.order = append(w.order, o)
	}
	rng.Shuffle(len(w.order), func(i, j int) { w.order[i], w.order[j] = w.order[j], w.order[i] })
	w.perRnd = len(w.order) * s.UpdatedPercent / 100
	if err := w.m.Round(w.now); err != nil {
		return nil, err
	}
	return w, nil
}

// Prepare writes the next UpdatedPercent of the objects (each moves one
// unit and its value changes) and, with MovingPivot, moves the pivot. It
// allocates nothing.
func (w *RoundWorkload) Prepare() error {
	for k := 0; k < w.perRnd; k++ {
		o := w.order[w.next]
		w.next++
		if w.next == len(w.order) {
			w.next = 0
		}
		at := w.m.Position(o)
		at.X += w.step
		if err := w.m.Update(o, at, packPoint(at)); err != nil {
			return err
		}
	}
	if w.setup.MovingPivot {
		w.pivotAt.X += w.step
		if err := w.m.Update(Pivot, w.pivotAt, packPoint(w.pivotAt)); err != nil {
			return err
		}
	}
	w.step = -w.step // objects and pivot oscillate, so zones stay put on average
	return nil
}

// Round runs one round and returns how many objects the view is sent.
func (w *RoundWorkload) Round() (int, error) {
	w.now += RoundPeriod
	if err := w.m.Round(w.now); err != nil {
		return 0, err
	}
	return len(w.m.Sends(0)), nil
}

// RoundRow is the measured cost of one RoundSetup.
type RoundRow struct {
	Objects        int  `json:"objects"`
	UpdatedPercent int  `json:"updated_percent"`
	MovingPivot    bool `json:"moving_pivot"`
	Rounds         int  `json:"rounds"`
	// Per round for the one client: median, 90th percentile and mean
	// wall time of Round, in nanoseconds.
	Median time.Duration `json:"median_ns"`
	P90    time.Duration `json:"p90_ns"`
	Mean   time.Duration `json:"mean_ns"`
	// AllocsPerRound counts heap allocations per Prepare+Round, averaged.
	AllocsPerRound float64 `json:"allocs_per_round"`
	// UpdateCost is the mean wall time of one write (CMB-UPDATE-RECEIVED
	// for one view).
	UpdateCost time.Duration `json:"update_ns"`
	// Sent is the objects sent per round; PayloadBytes those times four,
	// the volume figure 11 annotates.
	Sent         int `json:"sent"`
	PayloadBytes int `json:"payload_bytes"`
}

// MeasureRounds runs rounds rounds of s and times each Round call.
func MeasureRounds(s RoundSetup, rounds int) (RoundRow, error) {
	w, err := NewRoundWorkload(s)
	if err != nil {
		return RoundRow{}, err
	}
	// Warm up: grow the reused slices and settle the zones.
	for i := 0; i < 3; i++ {
		if err := w.Prepare(); err != nil {
			return RoundRow{}, err
		}
		if _, err := w.Round(); err != nil {
			return RoundRow{}, err
		}
	}
	durs := make([]time.Duration, rounds)
	var ms0, ms1 runtime.MemStats
	var prep time.Duration
	sent := 0
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	for i := range durs {
		t0 := time.Now()
		if err := w.Prepare(); err != nil {
			return RoundRow{}, err
		}
		t1 := time.Now()
		n, err := w.Round()
		if err != nil {
			return RoundRow{}, err
		}
		durs[i] = time.Since(t1)
		prep += t1.Sub(t0)
		sent = n
	}
	runtime.ReadMemStats(&ms1)
	var total time.Duration
	for _, d := range durs {
		total += d
	}
	slices.Sort(durs)
	row := RoundRow{
		Objects:        s.Objects,
		UpdatedPercent: s.UpdatedPercent,
		MovingPivot:    s.MovingPivot,
		Rounds:         rounds,
		Median:         durs[len(durs)/2],
		P90:            durs[len(durs)*9/10],
		Mean:           total / time.Duration(rounds),
		AllocsPerRound: float64(ms1.Mallocs-ms0.Mallocs) / float64(rounds),
		Sent:           sent,
		PayloadBytes:   4 * sent,
	}
	if writes := rounds * (w.perRnd + btoi(s.MovingPivot)); writes > 0 {
		row.UpdateCost = prep / time.Duration(writes)
	}
	return row, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
