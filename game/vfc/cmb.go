package vfc

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// AllSets, passed to SetPivots, gives every set the same pivots.
const AllSets = -1

type objectState uint8

const (
	slotFree    objectState = iota
	slotLive                // in the pool
	slotRemoved             // removed; its drops go out in the next round
)

// CMB is the paper's consistency management block, version 3 [S §3.2,
// fig 9]: it holds the primary copy of every object (position and value),
// remembers for every (view, object) pair what the view was last sent, and
// decides in each round which objects each view must be sent so that no
// copy exceeds the bounds of its zone.
//
// It is a pure state machine: Update records a write, Round takes the time
// and computes every view's sends; nothing runs in the background and no
// clock is read. Not safe for concurrent use.
//
// C is the coordinate type; T the value type sent to views. diff(sent,
// current) measures how far a view's copy sent is from the current value,
// in the unit of the sets' value bounds (by convention percent, as §4.2's
// valueDiff); it may be signed (the corrected mode takes its absolute
// value) and is called only for sets with a value bound.
type CMB[C Coord, T any] struct {
	literal    bool
	diff       func(sent, current T) float64
	maxObjects int
	maxViews   int

	sets []objectSet

	// Per object, indexed by ObjectID (struct of arrays: the round loop
	// reads one or two of them per object).
	pos    []Point[C]
	val    []T
	setOf  []uint16
	state  []objectState
	member []int32 // index in its set's members
	moved  []bool  // position changed since the last round

	movedList   []ObjectID
	removedList []ObjectID
	freeSlots   []ObjectID
	liveCount   int

	views     []*view[T] // indexed by ViewID; nil for a free slot
	freeViews []ViewID

	rounds    int
	lastRound int64
}

type objectSet struct {
	name    string
	zones   []uint64 // λ1..λn−1
	bounds  []bound  // one per zone
	members []ObjectID
}

// zoneAt is the zone of an object at Chebyshev distance d from the closest
// pivot: zone i iff λi−1 < d ≤ λi.
func (s *objectSet) zoneAt(d uint64) uint8 {
	for i, l := range s.zones {
		if d <= l {
			return uint8(i)
		}
	}
	return uint8(len(s.zones))
}

// view is one client's consistency view: the per-(view, object) state of
// figure 9 (D, Sθ, Sσ, Sν, K) as parallel arrays indexed by ObjectID.
type view[T any] struct {
	name   string
	pivots [][]ObjectID // per set
	// rezone marks the sets whose every member needs its zone recomputed
	// in the next round (new view, new pivots).
	rezone []bool

	// due is when the copy must be sent: dirty (D = 1) for now, never
	// while the copy is current, else the time its time bound runs out.
	// One compare per object decides a round.
	due    []int64
	sentAt []int64  // Sθ (unsent if never sent)
	since  []uint32 // Sσ
	zone   []uint8  // K, as the index of the zone
	sent   []T      // the value sent, for Sν

	sends, drops []ObjectID
}

// New returns a CMB for the settings cfg. Objects start at (0, 0) with
// the zero value; every view is due every object in its first round (the
// setup phase's transfer [S §4.1]). diff may be nil only if no vector
// bounds the value.
func New[C Coord, T any](cfg Config[C], diff func(sent, current T) float64) (*CMB[C, T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("vfc: %w", err)
	}
	if diff == nil {
		for i, s := range cfg.Sets {
			for j, v := range s.Scale {
				if !math.IsInf(v.Value, 1) {
					return nil, fmt.Errorf("vfc: %s zone %d bounds the value (%v) but no value-difference function was given", setName(i, s.Name), j+1, v)
				}
			}
		}
	}
	m := &CMB[C, T]{
		literal:    cfg.Literal,
		diff:       diff,
		maxObjects: cfg.maxObjects(),
		maxViews:   cfg.maxViews(),
		sets:       make([]objectSet, len(cfg.Sets)),
		pos:        make([]Point[C], cfg.Objects),
		val:        make([]T, cfg.Objects),
		setOf:      make([]uint16, cfg.Objects),
		state:      make([]objectState, cfg.Objects),
		member:     make([]int32, cfg.Objects),
		moved:      make([]bool, cfg.Objects),
		liveCount:  cfg.Objects,
	}
	for i, sc := range cfg.Sets {
		s := &m.sets[i]
		s.name = sc.Name
		for _, l := range sc.Zones {
			s.zones = append(s.zones, uint64(l))
		}
		for _, v := range sc.Scale {
			s.bounds = append(s.bounds, boundOf(v))
		}
		s.members = slices.Clone(sc.Objects)
		for j, o := range sc.Objects {
			m.setOf[o] = uint16(i)
			m.member[o] = int32(j)
			m.state[o] = slotLive
		}
	}
	for _, vc := range cfg.Views {
		if _, err := m.AddView(vc); err != nil {
			return nil, fmt.Errorf("vfc: %w", err)
		}
	}
	return m, nil
}

func (m *CMB[C, T]) live(o ObjectID) bool {
	return o >= 0 && int(o) < len(m.state) && m.state[o] == slotLive
}

func (m *CMB[C, T]) viewOf(v ViewID) (*view[T], error) {
	if v < 0 || int(v) >= len(m.views) || m.views[v] == nil {
		return nil, fmt.Errorf("vfc: no view %d", v)
	}
	return m.views[v], nil
}

func (m *CMB[C, T]) markMoved(o ObjectID) {
	if !m.moved[o] {
		m.moved[o] = true
		m.movedList = append(m.movedList, o)
	}
}

// exceeds is the value test of figure 9 line 7: the paper's signed
// ν(u) − Sν ≥ κν in Literal mode, else |valueDiff| ≥ κν; a NaN difference
// counts as exceeding, so a broken diff sends too much rather than nothing.
func (m *CMB[C, T]) exceeds(d, limit float64) bool {
	if m.literal {
		return d >= limit
	}
	return !(math.Abs(d) < limit)
}

// Update is CMB-UPDATE-RECEIVED [S fig 9a]: object o was written with value
// v and now stands at at. Every view whose copy is not already dirty counts
// one more missed update and becomes dirty if that reaches its sequence
// bound or the value moved past its value bound.
func (m *CMB[C, T]) Update(o ObjectID, at Point[C], v T) error {
	if !m.live(o) {
		return fmt.Errorf("vfc: update of unknown object %d", o)
	}
	if at != m.pos[o] {
		m.pos[o] = at
		m.markMoved(o)
	}
	m.val[o] = v
	s := &m.sets[m.setOf[o]]
	for _, w := range m.views {
		if w == nil || w.due[o] == dirty {
			continue
		}
		n := w.since[o]
		if n < seqNever-1 {
			n++
		}
		w.since[o] = n
		b := &s.bounds[w.zone[o]]
		if n >= b.seq || (b.valueBounded && m.exceeds(m.diff(w.sent[o], v), b.value)) {
			w.due[o] = dirty
			continue
		}
		if !m.literal && n == 1 {
			// The copy has just gone stale: its time bound starts to bite.
			w.due[o] = addTime(w.sentAt[o], b.time)
		}
	}
	return nil
}

// Round is CMB-ROUND-TRIGGERED [S fig 9b] at time now (any epoch the
// caller keeps; it must not go backwards or below zero). For every view it
// recomputes the zones that may have changed, then lists the objects due:
// dirty, or stale for as long as the time bound of their zone. Sends and
// Drops return the result until the next Round.
func (m *CMB[C, T]) Round(now time.Duration) error {
	t := int64(now)
	if t < 0 {
		return fmt.Errorf("vfc: round at %v: time must not be negative", now)
	}
	if m.rounds > 0 && t < m.lastRound {
		return fmt.Errorf("vfc: round at %v after a round at %v: time went backwards", now, time.Duration(m.lastRound))
	}
	for _, w := range m.views {
		if w == nil {
			continue
		}
		if !m.literal {
			m.rezone(w)
		}
		m.send(w, t)
		if m.literal {
			// Figure 9 computes K after the send test (lines 11-18), so
			// a zone found now governs the next round.
			m.rezone(w)
		}
		w.drops = w.drops[:0]
		for _, o := range m.removedList {
			if w.sentAt[o] != unsent {
				w.drops = append(w.drops, o)
			}
		}
	}
	for _, o := range m.movedList {
		m.moved[o] = false
	}
	m.movedList = m.movedList[:0]
	for _, o := range m.removedList {
		m.freeSlot(o)
	}
	m.removedList = m.removedList[:0]
	m.rounds++
	m.lastRound = t
	return nil
}

// send moves every due copy into the view's sends and resets its state
// (figure 9 lines 7-10).
func (m *CMB[C, T]) send(w *view[T], t int64) {
	sends := w.sends[:0]
	due := w.due
	sentAt, since, sent, val := w.sentAt[:len(due)], w.since[:len(due)], w.sent[:len(due)], m.val[:len(due)]
	if m.literal {
		zone, setOf := w.zone[:len(due)], m.setOf[:len(due)]
		for i, d := range due {
			if d <= t {
				sends = append(sends, ObjectID(i))
				sentAt[i], since[i], sent[i] = t, 0, val[i]
				due[i] = addTime(t, m.sets[setOf[i]].bounds[zone[i]].time)
			}
		}
	} else {
		for i, d := range due {
			if d <= t {
				sends = append(sends, ObjectID(i))
				sentAt[i], since[i], sent[i], due[i] = t, 0, val[i], never
			}
		}
	}
	w.sends = sends
}

// rezone recomputes zones (figure 9 lines 11-18): every member of a set
// whose pivots moved or changed, else only the objects that moved.
func (m *CMB[C, T]) rezone(w *view[T]) {
	for s := range m.sets {
		if w.rezone[s] {
			continue
		}
		for _, p := range w.pivots[s] {
			if m.moved[p] {
				w.rezone[s] = true
				break
			}
		}
	}
	zone := w.zone
	for s := range m.sets {
		if !w.rezone[s] {
			continue
		}
		set := &m.sets[s]
		pivots := w.pivots[s]
		if len(pivots) == 1 {
			// One pivot is the common case (a client's avatar): keep its
			// position in registers.
			p := m.pos[pivots[0]]
			for _, o := range set.members {
				q := m.pos[o]
				if z := set.zoneAt(max(absDiff(p.X, q.X), absDiff(p.Y, q.Y))); z != zone[o] {
					m.setZone(w, set, o, z)
				}
			}
		} else {
			for _, o := range set.members {
				if z := m.zoneOf(set, pivots, o); z != zone[o] {
					m.setZone(w, set, o, z)
				}
			}
		}
		w.rezone[s] = false
	}
	for _, o := range m.movedList {
		if m.state[o] != slotLive {
			continue
		}
		s := m.setOf[o]
		if w.rezone[s] {
			continue
		}
		set := &m.sets[s]
		if z := m.zoneOf(set, w.pivots[s], o); z != zone[o] {
			m.setZone(w, set, o, z)
		}
	}
}

// zoneOf is the zone of object o for the closest of pivots; with no pivot
// every object is in the outermost zone.
func (m *CMB[C, T]) zoneOf(s *objectSet, pivots []ObjectID, o ObjectID) uint8 {
	q := m.pos[o]
	best := uint64(math.MaxUint64)
	for _, pv := range pivots {
		p := m.pos[pv]
		best = min(best, max(absDiff(p.X, q.X), absDiff(p.Y, q.Y)))
	}
	return s.zoneAt(best)
}

// absDiff is |a−b| without overflow for any coordinate type.
func absDiff[C Coord](a, b C) uint64 {
	x, y := int64(a), int64(b)
	if x >= y {
		return uint64(x) - uint64(y)
	}
	return uint64(y) - uint64(x)
}

// Chebyshev is max(|ax−bx|, |ay−by|), the distance whose iso-lines are
// the paper's concentric squares [S §2.1].
func Chebyshev[C Coord](a, b Point[C]) uint64 {
	return max(absDiff(a.X, b.X), absDiff(a.Y, b.Y))
}

// setZone moves o into a new zone z of w and judges the copy again
// against the new zone's vector.
func (m *CMB[C, T]) setZone(w *view[T], s *objectSet, o ObjectID, z uint8) {
	w.zone[o] = z
	d := w.due[o]
	if d == dirty || w.sentAt[o] == unsent {
		return
	}
	b := &s.bounds[z]
	if m.literal {
		// Figure 9 only swaps K: the new time bound counts from the last
		// send; sequence and value are tested at the next update.
		w.due[o] = addTime(w.sentAt[o], b.time)
		return
	}
	n := w.since[o]
	if n == 0 {
		return // current copy: nothing to bound
	}
	if n >= b.seq || (b.valueBounded && m.exceeds(m.diff(w.sent[o], m.val[o]), b.value)) {
		w.due[o] = dirty
		return
	}
	w.due[o] = addTime(w.sentAt[o], b.time)
}

// Sends returns the objects view v must be sent this round, in ID order;
// the caller reads their values with Value. The slice is reused by the
// next Round.
func (m *CMB[C, T]) Sends(v ViewID) []ObjectID {
	w, err := m.viewOf(v)
	if err != nil {
		return nil
	}
	return w.sends
}

// Drops returns the objects removed since the previous round that view v
// had a copy of. The slice is reused by the next Round.
func (m *CMB[C, T]) Drops(v ViewID) []ObjectID {
	w, err := m.viewOf(v)
	if err != nil {
		return nil
	}
	return w.drops
}

// AddObject puts a new object into set at position at with value v and
// returns its ID (a freed ID may be reused). Every view is due it in the
// next round.
func (m *CMB[C, T]) AddObject(set int, at Point[C], v T) (ObjectID, error) {
	if set < 0 || set >= len(m.sets) {
		return 0, fmt.Errorf("vfc: add object to set %d: there are %d sets", set, len(m.sets))
	}
	if m.liveCount+len(m.removedList) >= m.maxObjects {
		return 0, fmt.Errorf("vfc: add object: the pool holds its limit of %d objects", m.maxObjects)
	}
	var o ObjectID
	if n := len(m.freeSlots); n > 0 {
		o = m.freeSlots[n-1]
		m.freeSlots = m.freeSlots[:n-1]
	} else {
		o = ObjectID(len(m.pos))
		m.pos = append(m.pos, Point[C]{})
		m.val = append(m.val, *new(T))
		m.setOf = append(m.setOf, 0)
		m.state = append(m.state, slotFree)
		m.member = append(m.member, 0)
		m.moved = append(m.moved, false)
		for _, w := range m.views {
			if w != nil {
				w.grow()
			}
		}
	}
	m.pos[o], m.val[o], m.setOf[o], m.state[o] = at, v, uint16(set), slotLive
	s := &m.sets[set]
	m.member[o] = int32(len(s.members))
	s.members = append(s.members, o)
	m.liveCount++
	m.markMoved(o)
	for _, w := range m.views {
		if w != nil {
			w.due[o] = dirty
		}
	}
	return o, nil
}

func (w *view[T]) grow() {
	w.due = append(w.due, never)
	w.sentAt = append(w.sentAt, unsent)
	w.since = append(w.since, 0)
	w.zone = append(w.zone, 0)
	w.sent = append(w.sent, *new(T))
}

// RemoveObject takes o out of the pool. Views that had a copy find it in
// Drops after the next round; pivots on o are dropped from their views.
func (m *CMB[C, T]) RemoveObject(o ObjectID) error {
	if !m.live(o) {
		return fmt.Errorf("vfc: remove unknown object %d", o)
	}
	m.state[o] = slotRemoved
	m.liveCount--
	m.removedList = append(m.removedList, o)
	s := &m.sets[m.setOf[o]]
	i := m.member[o]
	last := s.members[len(s.members)-1]
	s.members[i], m.member[last] = last, i
	s.members = s.members[:len(s.members)-1]
	for _, w := range m.views {
		if w == nil {
			continue
		}
		w.due[o] = never
		for si, ps := range w.pivots {
			if slices.Contains(ps, o) {
				w.pivots[si] = slices.DeleteFunc(ps, func(p ObjectID) bool { return p == o })
				w.rezone[si] = true
			}
		}
	}
	return nil
}

func (m *CMB[C, T]) freeSlot(o ObjectID) {
	var zero T
	m.state[o] = slotFree
	m.val[o] = zero
	for _, w := range m.views {
		if w != nil {
			w.due[o], w.sentAt[o], w.since[o], w.zone[o], w.sent[o] = never, unsent, 0, 0, zero
		}
	}
	m.freeSlots = append(m.freeSlots, o)
}

// AddView adds a client's view. It is due every object in the next round.
func (m *CMB[C, T]) AddView(vc ViewConfig) (ViewID, error) {
	nviews := len(m.views) - len(m.freeViews)
	if nviews >= m.maxViews {
		return 0, fmt.Errorf("add view %q: the limit of %d views is reached", vc.Name, m.maxViews)
	}
	if errs := vc.validate(nviews, len(m.sets), m.live, m.liveCount); len(errs) > 0 {
		return 0, fmt.Errorf("add view: %w", errors.Join(errs...))
	}
	n := len(m.pos)
	w := &view[T]{
		name:   vc.Name,
		pivots: make([][]ObjectID, len(m.sets)),
		rezone: make([]bool, len(m.sets)),
		due:    make([]int64, n),
		sentAt: make([]int64, n),
		since:  make([]uint32, n),
		zone:   make([]uint8, n),
		sent:   make([]T, n),
	}
	for s := range m.sets {
		w.pivots[s] = slices.Clone(vc.pivotsOf(s))
		w.rezone[s] = true
	}
	for o := range w.due {
		w.sentAt[o] = unsent
		if m.state[o] == slotLive {
			w.due[o] = dirty
		} else {
			w.due[o] = never
		}
	}
	if k := len(m.freeViews); k > 0 {
		id := m.freeViews[k-1]
		m.freeViews = m.freeViews[:k-1]
		m.views[id] = w
		return id, nil
	}
	m.views = append(m.views, w)
	return ViewID(len(m.views) - 1), nil
}

// RemoveView forgets view v; its ID may be reused.
func (m *CMB[C, T]) RemoveView(v ViewID) error {
	if _, err := m.viewOf(v); err != nil {
		return fmt.Errorf("remove view: %w", err)
	}
	m.views[v] = nil
	m.freeViews = append(m.freeViews, v)
	return nil
}

// SetPivots replaces view v's pivots for one set, or for every set with
// AllSets. Zones are recomputed in the next round.
func (m *CMB[C, T]) SetPivots(v ViewID, set int, pivots ...ObjectID) error {
	w, err := m.viewOf(v)
	if err != nil {
		return fmt.Errorf("set pivots: %w", err)
	}
	if set != AllSets && (set < 0 || set >= len(m.sets)) {
		return fmt.Errorf("set pivots of view %d: no set %d (there are %d)", v, set, len(m.sets))
	}
	for _, p := range pivots {
		if !m.live(p) {
			return fmt.Errorf("set pivots of view %d: pivot on unknown object %d", v, p)
		}
	}
	for s := range m.sets {
		if set == AllSets || s == set {
			w.pivots[s] = append(w.pivots[s][:0], pivots...)
			w.rezone[s] = true
		}
	}
	return nil
}

// Copy is what a view holds of an object, for inspection and tests.
type Copy struct {
	Sent   bool          // the view has been sent the object
	SentAt time.Duration // Sθ: when it was last sent
	Since  int           // Sσ: updates since
	Dirty  bool          // D: must go out in the next round
	Zone   int           // zone index from 0 (the paper's z1 is 0)
}

// Copy returns view v's state for object o.
func (m *CMB[C, T]) Copy(v ViewID, o ObjectID) (Copy, bool) {
	w, err := m.viewOf(v)
	if err != nil || !m.live(o) {
		return Copy{}, false
	}
	c := Copy{Since: int(w.since[o]), Dirty: w.due[o] == dirty, Zone: int(w.zone[o])}
	if w.sentAt[o] != unsent {
		c.Sent, c.SentAt = true, time.Duration(w.sentAt[o])
	}
	return c, true
}

// SentValue is the value view v was last sent of object o.
func (m *CMB[C, T]) SentValue(v ViewID, o ObjectID) (T, bool) {
	w, err := m.viewOf(v)
	if err != nil || !m.live(o) || w.sentAt[o] == unsent {
		var zero T
		return zero, false
	}
	return w.sent[o], true
}

// Value is the primary copy of object o.
func (m *CMB[C, T]) Value(o ObjectID) T {
	if !m.live(o) {
		var zero T
		return zero
	}
	return m.val[o]
}

// Position is where object o stands.
func (m *CMB[C, T]) Position(o ObjectID) Point[C] {
	if !m.live(o) {
		return Point[C]{}
	}
	return m.pos[o]
}

// SetOf is the index of the set holding o, or -1.
func (m *CMB[C, T]) SetOf(o ObjectID) int {
	if !m.live(o) {
		return -1
	}
	return int(m.setOf[o])
}

// Live reports whether o is in the pool.
func (m *CMB[C, T]) Live(o ObjectID) bool { return m.live(o) }

// Slots is one past the highest object ID in use so far.
func (m *CMB[C, T]) Slots() int { return len(m.pos) }

// Views lists the views in ID order.
func (m *CMB[C, T]) Views() []ViewID {
	var out []ViewID
	for i, w := range m.views {
		if w != nil {
			out = append(out, ViewID(i))
		}
	}
	return out
}

// Zones is the number of zones of set s.
func (m *CMB[C, T]) Zones(s int) int { return len(m.sets[s].bounds) }

// Bound is the consistency vector of zone z (from 0) of set s.
func (m *CMB[C, T]) Bound(s, z int) Vector { return m.sets[s].bounds[z].vector }

// ZoneOf is the zone object o would be in for view v at the current
// positions (Copy reports the zone the CMB last computed).
func (m *CMB[C, T]) ZoneOf(v ViewID, o ObjectID) (int, bool) {
	w, err := m.viewOf(v)
	if err != nil || !m.live(o) {
		return 0, false
	}
	s := m.setOf[o]
	return int(m.zoneOf(&m.sets[s], w.pivots[s], o)), true
}
