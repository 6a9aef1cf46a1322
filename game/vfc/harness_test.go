package vfc

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// chooser draws the scenario's choices: a seeded generator in the property
// tests, the fuzzer's bytes in FuzzRound.
type chooser interface {
	IntN(n int) int
}

// byteChooser reads choices from fuzz input; once it runs dry every
// choice is 0.
type byteChooser struct{ b []byte }

func (c *byteChooser) IntN(n int) int {
	if n <= 1 {
		return 0
	}
	var v int
	for k := 0; k < 2 && (k == 0 || n > 256); k++ {
		if len(c.b) == 0 {
			return 0
		}
		v = v<<8 | int(c.b[0])
		c.b = c.b[1:]
	}
	return v % n
}

func signedDiff(sent, cur int64) float64 { return float64(cur - sent) }

// randomScale draws n vectors weakening outward: each dimension starts
// somewhere and only grows, and may turn into '.' for good.
func randomScale(c chooser, n int) []Vector {
	out := make([]Vector, n)
	cur := [3]float64{
		float64(c.IntN(4)) * 0.02, // time in seconds, multiples of 20 ms
		float64(c.IntN(4)),        // sequence
		float64(c.IntN(6)) * 2,    // value
	}
	steps := [3]func() float64{
		func() float64 { return float64(c.IntN(5)) * 0.02 },
		func() float64 { return float64(c.IntN(3)) },
		func() float64 { return float64(c.IntN(4)) * 3 },
	}
	for i := range out {
		for d := range cur {
			if i > 0 {
				if c.IntN(6) == 0 {
					cur[d] = Unbounded
				} else {
					cur[d] += steps[d]()
				}
			} else if c.IntN(8) == 0 {
				cur[d] = Unbounded
			}
		}
		out[i] = Vector{cur[0], cur[1], cur[2]}
	}
	return out
}

func randomZones(c chooser, n int) []int32 {
	zones := make([]int32, n)
	l := int32(c.IntN(4)) - 1
	for i := range zones {
		l += 1 + int32(c.IntN(12))
		zones[i] = l
	}
	return zones
}

// randomConfig draws a valid configuration of 1-3 sets over objects
// objects, and 1-3 views with 0-3 pivots per set.
func randomConfig(c chooser, objects int, literal bool) Config[int32] {
	cfg := Config[int32]{Objects: objects, Literal: literal}
	nsets := 1 + c.IntN(3)
	cfg.Sets = make([]SetConfig[int32], nsets)
	for o := 0; o < objects; o++ {
		s := c.IntN(nsets)
		cfg.Sets[s].Objects = append(cfg.Sets[s].Objects, ObjectID(o))
	}
	for s := range cfg.Sets {
		nz := c.IntN(4)
		cfg.Sets[s].Name = fmt.Sprintf("s%d", s)
		cfg.Sets[s].Zones = randomZones(c, nz)
		cfg.Sets[s].Scale = randomScale(c, nz+1)
	}
	nviews := 1 + c.IntN(3)
	for v := 0; v < nviews; v++ {
		cfg.Views = append(cfg.Views, randomViewConfig(c, objects, nsets, func(ObjectID) bool { return true }))
	}
	return cfg
}

func randomPivots(c chooser, slots int, live func(ObjectID) bool) []ObjectID {
	var ps []ObjectID
	if slots == 0 {
		return nil
	}
	for k := c.IntN(4); k > 0; k-- {
		if p := ObjectID(c.IntN(slots)); live(p) && !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	return ps
}

func randomViewConfig(c chooser, slots, nsets int, live func(ObjectID) bool) ViewConfig {
	if c.IntN(2) == 0 {
		return ViewConfig{Pivots: randomPivots(c, slots, live)}
	}
	vc := ViewConfig{SetPivots: make([][]ObjectID, nsets)}
	for s := range vc.SetPivots {
		vc.SetPivots[s] = randomPivots(c, slots, live)
	}
	return vc
}

// shadowCopy is what the harness, from the sends alone, knows a view holds.
type shadowCopy struct {
	has   bool
	val   int64
	at    time.Duration
	since int // updates since it was sent, all of them
	// zone is the zone the harness found at the last round, the one whose
	// vector judges updates until the next; dirty records that an update
	// broke it.
	zone  int
	dirty bool
}

type shadowView struct {
	id     ViewID
	pivots [][]ObjectID
	copies []shadowCopy
}

// harness drives a CMB with random writes, joins, leaves and pivot changes,
// and keeps its own model of every view's copies to judge each round.
type harness struct {
	c       chooser
	cfg     Config[int32]
	m       *CMB[int32, int64]
	now     time.Duration
	pos     []Point[int32]
	val     []int64
	set     []int
	live    []bool
	views   []*shadowView
	removed []ObjectID // since the last round
	churn   bool       // add and remove objects and views, move pivots
	sends   int        // total objects sent, for sanity
	onWrite func(o ObjectID, v int64)
}

func newHarness(c chooser, cfg Config[int32], churn bool, diff func(sent, cur int64) float64) (*harness, error) {
	m, err := New[int32, int64](cfg, diff)
	if err != nil {
		return nil, err
	}
	h := &harness{c: c, cfg: cfg, m: m, churn: churn}
	h.pos = make([]Point[int32], cfg.Objects)
	h.val = make([]int64, cfg.Objects)
	h.set = make([]int, cfg.Objects)
	h.live = make([]bool, cfg.Objects)
	for s, sc := range cfg.Sets {
		for _, o := range sc.Objects {
			h.set[o], h.live[o] = s, true
		}
	}
	for i, vc := range cfg.Views {
		h.views = append(h.views, h.newShadowView(ViewID(i), vc))
	}
	// Scatter the objects before the first round.
	for o := range h.pos {
		h.write(ObjectID(o), pt(int32(c.IntN(81))-40, int32(c.IntN(81))-40), int64(c.IntN(100)))
	}
	return h, nil
}

func (h *harness) newShadowView(id ViewID, vc ViewConfig) *shadowView {
	sv := &shadowView{id: id, pivots: make([][]ObjectID, len(h.cfg.Sets)), copies: make([]shadowCopy, len(h.pos))}
	for s := range sv.pivots {
		sv.pivots[s] = slices.Clone(vc.pivotsOf(s))
	}
	return sv
}

func (h *harness) isLive(o ObjectID) bool { return o >= 0 && int(o) < len(h.live) && h.live[o] }

func (h *harness) write(o ObjectID, at Point[int32], v int64) {
	if err := h.m.Update(o, at, v); err != nil {
		panic(err)
	}
	h.pos[o], h.val[o] = at, v
	for _, sv := range h.views {
		cp := &sv.copies[o]
		cp.since++
		if cp.has && !cp.dirty {
			k := h.cfg.Sets[h.set[o]].Scale[cp.zone]
			cp.dirty = float64(cp.since) >= k.Sequence || math.Abs(signedDiff(cp.val, v)) >= k.Value
		}
	}
	if h.onWrite != nil {
		h.onWrite(o, v)
	}
}

// step makes one round's worth of changes.
func (h *harness) step() {
	if h.churn {
		h.churnStep()
	}
	// A burst of writes: each live object with a 30% chance, some twice.
	for o := range h.live {
		if !h.live[o] || h.c.IntN(10) >= 3 {
			continue
		}
		for k := 1 + h.c.IntN(2); k > 0; k-- {
			at := h.pos[o]
			switch h.c.IntN(8) {
			case 0: // a jump: respawn, teleport
				at = pt(int32(h.c.IntN(81))-40, int32(h.c.IntN(81))-40)
			case 1, 2: // stays put
			default:
				at.X += int32(h.c.IntN(7)) - 3
				at.Y += int32(h.c.IntN(7)) - 3
			}
			h.write(ObjectID(o), at, h.val[o]+int64(h.c.IntN(17))-8)
		}
	}
}

func (h *harness) churnStep() {
	switch h.c.IntN(12) {
	case 0:
		s := h.c.IntN(len(h.cfg.Sets))
		at, v := pt(int32(h.c.IntN(81))-40, int32(h.c.IntN(81))-40), int64(h.c.IntN(100))
		o, err := h.m.AddObject(s, at, v)
		if err != nil {
			panic(err)
		}
		for int(o) >= len(h.pos) {
			h.pos, h.val, h.set, h.live = append(h.pos, Point[int32]{}), append(h.val, 0), append(h.set, 0), append(h.live, false)
			for _, sv := range h.views {
				sv.copies = append(sv.copies, shadowCopy{})
			}
		}
		if slices.Contains(h.removed, o) {
			panic(fmt.Sprintf("object %d reused before the round that drops it", o))
		}
		h.pos[o], h.val[o], h.set[o], h.live[o] = at, v, s, true
		for _, sv := range h.views {
			sv.copies[o] = shadowCopy{}
		}
	case 1:
		if len(h.pos) == 0 {
			return
		}
		o := ObjectID(h.c.IntN(len(h.pos)))
		if !h.isLive(o) {
			return
		}
		if err := h.m.RemoveObject(o); err != nil {
			panic(err)
		}
		h.live[o] = false
		h.removed = append(h.removed, o)
		for _, sv := range h.views {
			for s, ps := range sv.pivots {
				sv.pivots[s] = slices.DeleteFunc(ps, func(p ObjectID) bool { return p == o })
			}
		}
	case 2:
		if len(h.views) >= 5 {
			return
		}
		vc := randomViewConfig(h.c, len(h.pos), len(h.cfg.Sets), h.isLive)
		id, err := h.m.AddView(vc)
		if err != nil {
			panic(err)
		}
		h.views = append(h.views, h.newShadowView(id, vc))
	case 3:
		if len(h.views) <= 1 {
			return
		}
		i := h.c.IntN(len(h.views))
		if err := h.m.RemoveView(h.views[i].id); err != nil {
			panic(err)
		}
		h.views = slices.Delete(h.views, i, i+1)
	case 4:
		sv := h.views[h.c.IntN(len(h.views))]
		ps := randomPivots(h.c, len(h.pos), h.isLive)
		set := AllSets
		if h.c.IntN(2) == 0 {
			set = h.c.IntN(len(h.cfg.Sets))
		}
		if err := h.m.SetPivots(sv.id, set, ps...); err != nil {
			panic(err)
		}
		for s := range sv.pivots {
			if set == AllSets || s == set {
				sv.pivots[s] = slices.Clone(ps)
			}
		}
	}
}

// round advances the clock by 1-60 ms, runs a round and returns the first
// broken rule, judged from the sends and the harness's own bookkeeping.
func (h *harness) round(oracle bool) error {
	h.now += time.Duration(1+h.c.IntN(60)) * time.Millisecond
	if err := h.m.Round(h.now); err != nil {
		return err
	}
	for _, sv := range h.views {
		if err := h.applySends(sv, oracle); err != nil {
			return err
		}
	}
	h.removed = h.removed[:0]
	if !oracle {
		return nil
	}
	for _, sv := range h.views {
		if err := h.checkBounds(sv); err != nil {
			return err
		}
	}
	return nil
}

func (h *harness) applySends(sv *shadowView, oracle bool) error {
	var wantDrops []ObjectID
	for _, o := range h.removed {
		if sv.copies[o].has {
			wantDrops = append(wantDrops, o)
		}
		sv.copies[o] = shadowCopy{}
	}
	if got := h.m.Drops(sv.id); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(wantDrops))) {
		return fmt.Errorf("view %d at %v: drops %v, want %v", sv.id, h.now, got, wantDrops)
	}
	for _, o := range h.m.Sends(sv.id) {
		if !h.isLive(o) {
			return fmt.Errorf("view %d at %v: sent object %d, which is not in the pool", sv.id, h.now, o)
		}
		cp := &sv.copies[o]
		if oracle && cp.has && cp.since == 0 {
			return fmt.Errorf("view %d at %v: resent object %d although its copy is current", sv.id, h.now, o)
		}
		if oracle && cp.has && !cp.dirty {
			z := h.shadowZone(sv, o)
			k := h.cfg.Sets[h.set[o]].Scale[z]
			if float64(cp.since) < k.Sequence && math.Abs(signedDiff(cp.val, h.val[o])) < k.Value &&
				float64(h.now-cp.at) < math.Ceil(k.Time*float64(time.Second)) {
				return fmt.Errorf("view %d at %v: sent object %d in zone %d %v though within bounds (%d updates, value %d→%d, sent at %v)",
					sv.id, h.now, o, z, k, cp.since, cp.val, h.val[o], cp.at)
			}
		}
		*cp = shadowCopy{has: true, val: h.val[o], at: h.now}
		h.sends++
	}
	return nil
}

// shadowZone computes the zone from scratch: the closest pivot by
// Chebyshev distance, then the first λ at or beyond it.
func (h *harness) shadowZone(sv *shadowView, o ObjectID) int {
	s := h.set[o]
	best := uint64(math.MaxUint64)
	for _, p := range sv.pivots[s] {
		dx := math.Abs(float64(h.pos[p].X) - float64(h.pos[o].X))
		dy := math.Abs(float64(h.pos[p].Y) - float64(h.pos[o].Y))
		best = min(best, uint64(max(dx, dy)))
	}
	for i, l := range h.cfg.Sets[s].Zones {
		if best <= uint64(l) {
			return i
		}
	}
	return len(h.cfg.Sets[s].Zones)
}

// checkBounds is the oracle [S §2.2]: after a round, every copy the view
// holds that is behind the primary is within the bounds of its zone:
// fewer missed updates than κσ, value difference below κν, and stale for
// less than κθ (so at most κθ plus one round when the next round runs).
func (h *harness) checkBounds(sv *shadowView) error {
	for o := range h.live {
		if !h.live[o] {
			continue
		}
		cp := &sv.copies[o]
		if !cp.has {
			return fmt.Errorf("view %d at %v: object %d never sent", sv.id, h.now, o)
		}
		z := h.shadowZone(sv, ObjectID(o))
		cp.zone = z
		if cp.since == 0 {
			continue
		}
		if cp.dirty {
			return fmt.Errorf("view %d at %v: object %d was made due by an update but not sent", sv.id, h.now, o)
		}
		k := h.cfg.Sets[h.set[o]].Scale[z]
		if float64(cp.since) >= k.Sequence {
			return fmt.Errorf("view %d at %v: object %d in zone %d %v missed %d updates", sv.id, h.now, o, z, k, cp.since)
		}
		if d := math.Abs(signedDiff(cp.val, h.val[o])); d >= k.Value {
			return fmt.Errorf("view %d at %v: object %d in zone %d %v is %g off (sent %d, now %d)", sv.id, h.now, o, z, k, d, cp.val, h.val[o])
		}
		if age := h.now - cp.at; float64(age) >= math.Ceil(k.Time*float64(time.Second)) {
			return fmt.Errorf("view %d at %v: object %d in zone %d %v stale for %v", sv.id, h.now, o, z, k, age)
		}
	}
	return nil
}

func seeded(seed uint64) chooser { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
