package vfc

import (
	"errors"
	"fmt"
	"strings"
)

// Coord is the integer type of positions in the virtual world. The game
// uses int32 fixed-point units; zones are compared in the same units.
type Coord interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64
}

// Point is a position in the 2-dimensional virtual world.
type Point[C Coord] struct{ X, Y C }

// ObjectID names an object of the pool: a dense index from 0.
type ObjectID int32

// ViewID names a view (one client's replica of the world).
type ViewID int32

// Default limits. Memory grows as views × objects × (21 bytes plus the
// size of a value): a view keeps a due time, a send time, a count, a zone
// and the value sent for every object.
const (
	DefaultMaxObjects = 1 << 20
	DefaultMaxViews   = 1 << 12
	// MaxZones bounds the zones of one set (zones are stored in a byte).
	MaxZones = 255
	// MaxSets bounds the object sets (stored in a uint16).
	MaxSets = 1 << 16
)

// SetConfig is one object set φi = [Oi, Z, C, V] [S §2.3, fig 5] minus V,
// which the views carry: which objects it holds, how its zones are drawn
// and the consistency degree of each zone.
type SetConfig[C Coord] struct {
	Name string
	// Objects is Oi. The sets of a Config are disjoint and together hold
	// every object of the initial pool.
	Objects []ObjectID
	// Zones is Z = [λ1, …, λn−1]: half the side of each zone's outer square,
	// strictly increasing. Zone i (from 0) holds the objects whose
	// Chebyshev distance z to the closest pivot has λi−1 < z ≤ λi; the last
	// zone is everything beyond λn−1. Empty means one zone: a global
	// vector, the paper's version 2.
	Zones []C
	// Scale is C = ⟨κ1, …, κn⟩, one vector per zone (len(Zones)+1),
	// weakening outward: each is at least as weak as the one inside it in
	// every dimension.
	Scale []Vector
}

// ViewConfig is one view: a client's replica and its pivots (V of fig 5).
type ViewConfig struct {
	Name string
	// Pivots are the view's pivot objects for every set; the closest one
	// decides an object's zone [S §2.3]. A view without pivots puts every
	// object in the outermost zone.
	Pivots []ObjectID
	// SetPivots, when not nil, gives each set its own pivots (one entry per
	// set, by index) and overrides Pivots: φi's V is per set.
	SetPivots [][]ObjectID
}

func (vc ViewConfig) pivotsOf(set int) []ObjectID {
	if vc.SetPivots != nil {
		return vc.SetPivots[set]
	}
	return vc.Pivots
}

// Config is the ϕ settings of a CMB [S §2.3, §3.2] plus the views present
// at start.
type Config[C Coord] struct {
	// Objects is the initial pool size #O: objects 0..Objects-1, each in
	// exactly one set. More can be added later (CMB.AddObject).
	Objects int
	Sets    []SetConfig[C]
	Views   []ViewConfig
	// Literal runs figure 9 as printed, for comparison: the value test
	// uses the signed ν(u) − Sν, zones found in a round take effect in the
	// next, and a time bound resends an unchanged object. The corrected
	// default takes |valueDiff|, zones the round itself, and resends only
	// copies that are stale. (The figure's pivot loop from 0 to #P reads
	// one pivot past the end; both modes visit each pivot once.)
	Literal bool
	// MaxObjects and MaxViews bound the pool and the views (0: defaults).
	MaxObjects, MaxViews int
}

func (c Config[C]) maxObjects() int {
	if c.MaxObjects > 0 {
		return c.MaxObjects
	}
	return DefaultMaxObjects
}

func (c Config[C]) maxViews() int {
	if c.MaxViews > 0 {
		return c.MaxViews
	}
	return DefaultMaxViews
}

// Validate reports every contradiction in c, naming the values: a zone list
// out of order or negative, a scale whose length is not zones + 1 or that
// strengthens outward, NaN or negative bounds, sets that overlap or leave an
// object out, and pivots on unknown objects.
func (c Config[C]) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.MaxObjects < 0 || c.MaxViews < 0 {
		add("limits of %d objects and %d views: need non-negative values (0 for the defaults)", c.MaxObjects, c.MaxViews)
	}
	if c.Objects < 0 || c.Objects > c.maxObjects() {
		add("pool of %d objects: need 0..%d", c.Objects, c.maxObjects())
	}
	if len(c.Sets) == 0 {
		add("no object sets: need at least one")
	}
	if len(c.Sets) > MaxSets {
		add("%d object sets: at most %d", len(c.Sets), MaxSets)
	}
	if len(c.Views) > c.maxViews() {
		add("%d views: at most %d", len(c.Views), c.maxViews())
	}
	for i, s := range c.Sets {
		errs = append(errs, s.validate(i)...)
	}
	errs = append(errs, c.validateMembership()...)
	for i, v := range c.Views {
		errs = append(errs, v.validate(i, len(c.Sets), func(o ObjectID) bool { return o >= 0 && int(o) < c.Objects }, c.Objects)...)
	}
	return errors.Join(errs...)
}

func setName(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("set %d", i)
	}
	return fmt.Sprintf("set %d (%s)", i, name)
}

func viewName(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("view %d", i)
	}
	return fmt.Sprintf("view %d (%s)", i, name)
}

func (s SetConfig[C]) validate(i int) []error {
	var errs []error
	name := setName(i, s.Name)
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{name}, args...)...))
	}
	if len(s.Zones) >= MaxZones {
		add("%d zone bounds: at most %d", len(s.Zones), MaxZones-1)
	}
	for j, l := range s.Zones {
		if l < 0 {
			add("zone list %v: λ%d = %d is negative", s.Zones, j+1, l)
		}
		if j > 0 && l <= s.Zones[j-1] {
			add("zone list %v out of order: λ%d = %d is not above λ%d = %d", s.Zones, j+1, l, j, s.Zones[j-1])
		}
	}
	if len(s.Scale) != len(s.Zones)+1 {
		add("%d consistency vectors %s for %d zone bounds %v: need %d, one per zone (#C = #Z + 1)",
			len(s.Scale), formatScale(s.Scale), len(s.Zones), s.Zones, len(s.Zones)+1)
	}
	for j, v := range s.Scale {
		if err := v.Validate(); err != nil {
			add("zone %d: %w", j+1, err)
			continue
		}
		if j > 0 && s.Scale[j-1].Validate() == nil {
			if dim := strongerDimension(s.Scale[j-1], v); dim != "" {
				add("scale %s does not weaken outward: zone %d %v binds %s more tightly than zone %d %v inside it",
					formatScale(s.Scale), j+1, v, dim, j, s.Scale[j-1])
			}
		}
	}
	return errs
}

func formatScale(scale []Vector) string {
	parts := make([]string, len(scale))
	for i, v := range scale {
		parts[i] = v.String()
	}
	return "⟨" + strings.Join(parts, ", ") + "⟩"
}

// validateMembership checks that the sets partition 0..Objects-1.
func (c Config[C]) validateMembership() []error {
	if c.Objects < 0 || c.Objects > c.maxObjects() {
		return nil
	}
	var errs []error
	owner := make([]int32, c.Objects)
	for i := range owner {
		owner[i] = -1
	}
	for i, s := range c.Sets {
		for _, o := range s.Objects {
			if o < 0 || int(o) >= c.Objects {
				errs = append(errs, fmt.Errorf("%s lists object %d, outside the pool of %d objects (0..%d)", setName(i, s.Name), o, c.Objects, c.Objects-1))
				continue
			}
			if prev := owner[o]; prev >= 0 {
				if int(prev) == i {
					errs = append(errs, fmt.Errorf("%s lists object %d twice", setName(i, s.Name), o))
				} else {
					errs = append(errs, fmt.Errorf("object %d is in both %s and %s: sets must not overlap", o, setName(int(prev), c.Sets[prev].Name), setName(i, s.Name)))
				}
				continue
			}
			owner[o] = int32(i)
		}
	}
	var missing []string
	count := 0
	for o, s := range owner {
		if s < 0 {
			count++
			if len(missing) < 8 {
				missing = append(missing, fmt.Sprint(o))
			}
		}
	}
	if count > 0 {
		more := ""
		if count > len(missing) {
			more = ", …"
		}
		errs = append(errs, fmt.Errorf("objects %s%s (%d in all) are in no set: the sets must cover the pool of %d", strings.Join(missing, ", "), more, count, c.Objects))
	}
	return errs
}

func (vc ViewConfig) validate(i, sets int, known func(ObjectID) bool, pool int) []error {
	var errs []error
	name := viewName(i, vc.Name)
	if vc.SetPivots != nil && len(vc.SetPivots) != sets {
		return []error{fmt.Errorf("%s: pivots for %d sets, but there are %d sets", name, len(vc.SetPivots), sets)}
	}
	check := func(label string, ps []ObjectID) {
		for _, p := range ps {
			if !known(p) {
				errs = append(errs, fmt.Errorf("%s: pivot%s on unknown object %d (the pool has %d objects)", name, label, p, pool))
			}
		}
	}
	if vc.SetPivots != nil {
		for s, ps := range vc.SetPivots {
			check(fmt.Sprintf(" of set %d", s), ps)
		}
	} else {
		check("", vc.Pivots)
	}
	return errs
}
