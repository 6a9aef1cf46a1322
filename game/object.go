package game

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
)

// ObjectKind says what a mutable object is.
type ObjectKind uint8

const (
	ObjectFood       ObjectKind = 1 // Amount is the nutrition units left
	ObjectHealthPack ObjectKind = 2 // Amount is the health it restores; 0 once taken
)

func (k ObjectKind) String() string {
	switch k {
	case ObjectFood:
		return "food"
	case ObjectHealthPack:
		return "health"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MaxObjectAmount bounds Object.Amount and Object.Max.
const MaxObjectAmount = 1000

// Object is the value of one mutable object: what a region's object store
// holds under a version number. It is small and fixed-size on the wire.
type Object struct {
	Kind ObjectKind
	// TileX, TileY place the object within its region (tile coordinates).
	TileX, TileY uint16
	// Amount is what is left (nutrition units, or health for a pack).
	Amount uint16
	// Max is the amount when full; regrowth restores Amount to Max.
	Max uint16
	// RegrowAt is the tick at which an exhausted object is restored; zero
	// while the object still has something left.
	RegrowAt uint64
}

// ObjectID names a mutable object: the region it lives in and its slot
// there. Slots are dense from zero, food first, then health packs.
type ObjectID struct {
	Region RegionCoord
	Slot   uint16
}

// Key is the object's name inside its region, as the region store keys it.
func (id ObjectID) Key() string { return fmt.Sprintf("obj/%d", id.Slot) }

func (id ObjectID) String() string { return fmt.Sprintf("%s/%d", id.Region, id.Slot) }

func compareObjectIDs(a, b ObjectID) int {
	if a.Region.Y != b.Region.Y {
		return a.Region.Y - b.Region.Y
	}
	if a.Region.X != b.Region.X {
		return a.Region.X - b.Region.X
	}
	return int(a.Slot) - int(b.Slot)
}

// Errors returned by the object rules.
var (
	ErrNothingLeft     = errors.New("object has nothing left")
	ErrWrongKind       = errors.New("object is of the wrong kind")
	ErrVersionConflict = errors.New("object changed since it was read")
	ErrUnknownObject   = errors.New("unknown object")
)

// Eaten returns the food's value after one unit of nutrition is eaten at
// tick. The last unit starts the regrowth timer. This is the new value a
// read-write "eat" update proposes against the version the player read.
func (o Object) Eaten(tick, regrowTicks uint64) (Object, error) {
	if o.Kind != ObjectFood {
		return o, fmt.Errorf("eat %s: %w", o.Kind, ErrWrongKind)
	}
	if o.Amount == 0 {
		return o, fmt.Errorf("eat: %w", ErrNothingLeft)
	}
	o.Amount--
	if o.Amount == 0 {
		o.RegrowAt = tick + max(regrowTicks, 1)
	}
	return o, nil
}

// Taken returns a health pack's value after it is picked up at tick.
func (o Object) Taken(tick, respawnTicks uint64) (Object, error) {
	if o.Kind != ObjectHealthPack {
		return o, fmt.Errorf("pick up %s: %w", o.Kind, ErrWrongKind)
	}
	if o.Amount == 0 {
		return o, fmt.Errorf("pick up: %w", ErrNothingLeft)
	}
	o.Amount = 0
	o.RegrowAt = tick + max(respawnTicks, 1)
	return o, nil
}

// Regrown reports whether an exhausted object is due to be restored at tick,
// and the restored value. The region's authority applies it as a blind write.
func (o Object) Regrown(tick uint64) (Object, bool) {
	if o.Amount != 0 || o.RegrowAt == 0 || tick < o.RegrowAt {
		return o, false
	}
	o.Amount, o.RegrowAt = o.Max, 0
	return o, true
}

// ObjectWireSize is the exact length of an encoded Object.
const ObjectWireSize = 18

const objectFormat = 1

// MarshalBinary encodes o in its fixed 18-byte form: format, kind, tile x,
// tile y, amount, max (big-endian uint16s) and the regrow tick (uint64).
func (o Object) MarshalBinary() ([]byte, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	return o.appendBinary(make([]byte, 0, ObjectWireSize)), nil
}

func (o Object) appendBinary(b []byte) []byte {
	b = append(b, objectFormat, byte(o.Kind))
	b = binary.BigEndian.AppendUint16(b, o.TileX)
	b = binary.BigEndian.AppendUint16(b, o.TileY)
	b = binary.BigEndian.AppendUint16(b, o.Amount)
	b = binary.BigEndian.AppendUint16(b, o.Max)
	return binary.BigEndian.AppendUint64(b, o.RegrowAt)
}

// UnmarshalObject decodes and validates an Object. It accepts only the
// canonical form, so decode followed by encode gives back the input.
func UnmarshalObject(b []byte) (Object, error) {
	if len(b) != ObjectWireSize {
		return Object{}, fmt.Errorf("decode object: %d bytes, want %d", len(b), ObjectWireSize)
	}
	if b[0] != objectFormat {
		return Object{}, fmt.Errorf("decode object: format %d, want %d", b[0], objectFormat)
	}
	o := Object{
		Kind:     ObjectKind(b[1]),
		TileX:    binary.BigEndian.Uint16(b[2:]),
		TileY:    binary.BigEndian.Uint16(b[4:]),
		Amount:   binary.BigEndian.Uint16(b[6:]),
		Max:      binary.BigEndian.Uint16(b[8:]),
		RegrowAt: binary.BigEndian.Uint64(b[10:]),
	}
	if err := o.validate(); err != nil {
		return Object{}, fmt.Errorf("decode object: %w", err)
	}
	return o, nil
}

func (o Object) validate() error {
	switch {
	case o.Kind != ObjectFood && o.Kind != ObjectHealthPack:
		return fmt.Errorf("unknown object kind %d", o.Kind)
	case o.TileX >= MaxRegionTiles || o.TileY >= MaxRegionTiles:
		return fmt.Errorf("object tile (%d,%d) outside a %d-tile region", o.TileX, o.TileY, MaxRegionTiles)
	case o.Max == 0 || o.Max > MaxObjectAmount:
		return fmt.Errorf("object max %d: need 1..%d", o.Max, MaxObjectAmount)
	case o.Amount > o.Max:
		return fmt.Errorf("object amount %d above its max %d", o.Amount, o.Max)
	case o.Amount != 0 && o.RegrowAt != 0:
		return fmt.Errorf("object with amount %d has a regrow tick %d", o.Amount, o.RegrowAt)
	}
	return nil
}

// VersionedObject is an object value with the version the store gave it.
// Every applied update increases the version by one.
type VersionedObject struct {
	Version uint64
	Object  Object
}

// ObjectTable holds every mutable object of a world under version numbers,
// with the two update kinds of the region protocol: Initialize (blind write)
// and ReadWrite (applies only against the current version). It is what a
// single authority (local play, a mirror) uses; a P2P region coordinator
// keeps the same semantics in the region store.
//
// Objects live in one page per region, pages sorted by region (row, then
// column) and entries within a page by slot, so iteration is canonical.
// Pages are copy-on-write: copyFrom shares the source's pages instead of
// copying them, and a table copies a shared page only when it first
// changes it. A copy therefore costs one pointer per region plus the pages
// that changed since, which is what makes a trailing-state copy cheap.
type ObjectTable struct {
	pages []*objectPage
}

// objectPage is one region's objects. Once shared is set the page is
// immutable: it may be referenced by several tables (and by the terrain's
// starting pages), and a table about to change it takes a private copy.
type objectPage struct {
	region RegionCoord
	shared atomic.Bool
	// digest caches sum(); nil until computed and after a change.
	digest  atomic.Pointer[[32]byte]
	entries []tableEntry
}

type tableEntry struct {
	id ObjectID
	v  VersionedObject
}

// NewObjectTable returns an empty table.
func NewObjectTable() *ObjectTable { return &ObjectTable{} }

func compareRegions(a, b RegionCoord) int {
	if a.Y != b.Y {
		return a.Y - b.Y
	}
	return a.X - b.X
}

func (t *ObjectTable) findPage(rc RegionCoord) (int, bool) {
	return slices.BinarySearchFunc(t.pages, rc, func(p *objectPage, rc RegionCoord) int { return compareRegions(p.region, rc) })
}

func (p *objectPage) find(slot uint16) (int, bool) {
	// Slots are dense from zero in every world-made page; try that first.
	if int(slot) < len(p.entries) && p.entries[slot].id.Slot == slot {
		return int(slot), true
	}
	return slices.BinarySearchFunc(p.entries, slot, func(e tableEntry, s uint16) int { return int(e.id.Slot) - int(s) })
}

// Get returns the object's current value and version.
func (t *ObjectTable) Get(id ObjectID) (VersionedObject, bool) {
	pi, ok := t.findPage(id.Region)
	if !ok {
		return VersionedObject{}, false
	}
	p := t.pages[pi]
	i, ok := p.find(id.Slot)
	if !ok {
		return VersionedObject{}, false
	}
	return p.entries[i].v, true
}

// IDs returns every object ID in canonical order (region row, column, slot).
func (t *ObjectTable) IDs() []ObjectID {
	out := make([]ObjectID, 0, t.Len())
	for _, p := range t.pages {
		for _, e := range p.entries {
			out = append(out, e.id)
		}
	}
	return out
}

// Len is the number of objects.
func (t *ObjectTable) Len() int {
	n := 0
	for _, p := range t.pages {
		n += len(p.entries)
	}
	return n
}

// region returns the entries of region rc, for reading only.
func (t *ObjectTable) region(rc RegionCoord) []tableEntry {
	pi, ok := t.findPage(rc)
	if !ok {
		return nil
	}
	return t.pages[pi].entries
}

// writable returns page pi ready to be changed in place, copying it first
// if it is shared.
func (t *ObjectTable) writable(pi int) *objectPage {
	p := t.pages[pi]
	if !p.shared.Load() {
		p.digest.Store(nil)
		return p
	}
	c := &objectPage{region: p.region, entries: slices.Clone(p.entries)}
	t.pages[pi] = c
	return c
}

// setEntry replaces the value of entry i of page pi.
func (t *ObjectTable) setEntry(pi, i int, v VersionedObject) {
	t.writable(pi).entries[i].v = v
}

// put stores v under id, inserting the ID in order if it is new.
func (t *ObjectTable) put(id ObjectID, v VersionedObject) {
	pi, ok := t.findPage(id.Region)
	if !ok {
		t.pages = slices.Insert(t.pages, pi, &objectPage{region: id.Region})
	}
	p := t.pages[pi]
	if i, ok := p.find(id.Slot); ok {
		t.setEntry(pi, i, v)
		return
	}
	p = t.writable(pi)
	i, _ := p.find(id.Slot)
	p.entries = slices.Insert(p.entries, i, tableEntry{id, v})
}

// Initialize writes o regardless of the current value and returns the new
// version (1 for a new object).
func (t *ObjectTable) Initialize(id ObjectID, o Object) (VersionedObject, error) {
	if err := o.validate(); err != nil {
		return VersionedObject{}, fmt.Errorf("initialize %s: %w", id, err)
	}
	cur, _ := t.Get(id)
	next := VersionedObject{Version: cur.Version + 1, Object: o}
	t.put(id, next)
	return next, nil
}

// ReadWrite writes o only if the object is still at readVersion. Otherwise
// it returns ErrVersionConflict together with the current value, so the
// caller can look again and decide whether to retry.
func (t *ObjectTable) ReadWrite(id ObjectID, readVersion uint64, o Object) (VersionedObject, error) {
	cur, ok := t.Get(id)
	if !ok {
		return VersionedObject{}, fmt.Errorf("update %s: %w", id, ErrUnknownObject)
	}
	if cur.Version != readVersion {
		return cur, fmt.Errorf("update %s read at version %d, now %d: %w", id, readVersion, cur.Version, ErrVersionConflict)
	}
	if err := o.validate(); err != nil {
		return cur, fmt.Errorf("update %s: %w", id, err)
	}
	next := VersionedObject{Version: cur.Version + 1, Object: o}
	t.put(id, next)
	return next, nil
}

// Set stores a value and version that an authority elsewhere committed (for
// a cache fed by a region's event topic). Older versions are ignored; it
// reports whether the value was taken.
func (t *ObjectTable) Set(id ObjectID, v VersionedObject) bool {
	if v.Object.validate() != nil {
		return false
	}
	if cur, ok := t.Get(id); ok && cur.Version >= v.Version {
		return false
	}
	t.put(id, v)
	return true
}

// copyFrom makes t an exact copy of src by sharing src's pages. Pages the
// two tables already share are skipped, so the work is one pointer
// comparison per region plus one store per page that differs.
func (t *ObjectTable) copyFrom(src *ObjectTable) {
	if len(t.pages) != len(src.pages) {
		t.pages = slices.Grow(t.pages[:0], len(src.pages))[:len(src.pages)]
		clear(t.pages)
	}
	for i, p := range src.pages {
		if t.pages[i] != p {
			p.shared.Store(true)
			t.pages[i] = p
		}
	}
}

// InitialObjects returns the starting objects of region rc: food objects in
// slots 0..FoodPerRegion-1, then health packs, each on a distinct open tile.
func InitialObjects(cfg Config, m *RegionMap) []Object {
	rng := NewRand(derive("overworld/objects", cfg.Seed, uint64(m.Coord.X), uint64(m.Coord.Y)))
	used := make(map[int]bool)
	place := func() (uint16, uint16) {
		for {
			x, y := rng.Range(1, m.Size-2), rng.Range(1, m.Size-2)
			if !m.At(x, y).Blocks() && !used[y*m.Size+x] {
				used[y*m.Size+x] = true
				return uint16(x), uint16(y)
			}
		}
	}
	out := make([]Object, 0, cfg.FoodPerRegion+cfg.HealthPacksPerRegion)
	for i := 0; i < cfg.FoodPerRegion; i++ {
		x, y := place()
		n := uint16(rng.Range(3, 8))
		out = append(out, Object{Kind: ObjectFood, TileX: x, TileY: y, Amount: n, Max: n})
	}
	for i := 0; i < cfg.HealthPacksPerRegion; i++ {
		x, y := place()
		out = append(out, Object{Kind: ObjectHealthPack, TileX: x, TileY: y, Amount: 40, Max: 40})
	}
	return out
}
