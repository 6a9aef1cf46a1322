package arbiter

import (
	"encoding/binary"
	"hash/fnv"
	"slices"

	pb "github.com/overworld-p2p/overworld/game/arbiter/arbiterpb"
)

// grant is one first-come decision: the seq-th grant of the game.
type grant struct {
	seq      uint64
	stamp    Stamp
	resource ResourceID
	to       MemberID
}

func (g grant) wire() *pb.GrantEntry {
	return &pb.GrantEntry{Seq: g.seq, Stamp: g.stamp.wire(), Resource: uint64(g.resource), To: uint32(g.to)}
}

func grantOf(e *pb.GrantEntry) grant {
	return grant{seq: e.GetSeq(), stamp: stampOf(e.GetStamp()), resource: ResourceID(e.GetResource()), to: MemberID(e.GetTo())}
}

// grantLog is every member's copy of the recent grants, numbered by a
// sequence that only the arbiter on duty extends. GRANTs are multicast, so
// every member fills its copy as they go by; the holes loss leaves are
// filled through PING (repairs from the arbiter) and PONG (grants the
// arbiter lacks), so that a new arbiter knows what its predecessors granted
// before it decides anything. Only the last `window` grants are kept.
type grantLog struct {
	window     uint64
	entries    map[uint64]grant
	byResource map[ResourceID]uint64 // the grant of each resource that stands
	multi      map[ResourceID]bool   // resources granted more than once in the window
	gaps       [][2]uint64           // ranges (from, to] known to hold no grant
	have       uint64                // every grant up to have is known or given up
	last       uint64                // newest grant known
}

func newGrantLog(window int) grantLog {
	return grantLog{window: uint64(window), entries: map[uint64]grant{}, byResource: map[ResourceID]uint64{}, multi: map[ResourceID]bool{}}
}

// floor is the oldest sequence number still remembered.
func (l *grantLog) floor() uint64 {
	if l.last <= l.window {
		return 1
	}
	return l.last - l.window + 1
}

// add records g; it reports whether g was new (or replaced another), and
// whether it conflicts with what the log held: the same sequence number or
// the same resource granted by two arbiters, which only happens when a
// minority arbiter granted in its last lease and the majority, not knowing,
// took over. The grant of the later stamp stands: the majority's term
// fenced the other.
func (l *grantLog) add(g grant) (isNew, conflict bool) {
	if g.seq < l.floor() {
		return false, false
	}
	if old, ok := l.entries[g.seq]; ok {
		if old.stamp == g.stamp || !stampLess(old.stamp, g.stamp) {
			return false, old.stamp != g.stamp
		}
		l.forget(g.seq)
		conflict = true
	}
	l.entries[g.seq] = g
	if prev, ok := l.byResource[g.resource]; ok && prev != g.seq {
		conflict = true
		l.multi[g.resource] = true
		if stampLess(l.entries[prev].stamp, g.stamp) {
			l.byResource[g.resource] = g.seq
		}
	} else {
		l.byResource[g.resource] = g.seq
	}
	l.raise(g.seq)
	l.advance()
	return true, conflict
}

// skipTo gives up every grant up to seq that has not arrived.
func (l *grantLog) skipTo(seq uint64) {
	l.raise(seq)
	if seq > l.have {
		l.have = seq
	}
	l.advance()
}

// raise moves last up to seq and forgets what falls below the window.
func (l *grantLog) raise(seq uint64) {
	if seq <= l.last {
		return
	}
	oldFloor := l.floor()
	l.last = seq
	newFloor := l.floor()
	if newFloor-oldFloor <= l.window {
		for s := oldFloor; s < newFloor; s++ {
			l.forget(s)
		}
		return
	}
	// A jump past the whole window: every entry goes. Walking the map
	// (at most window entries) is cheaper than walking the gap; deletion
	// order does not matter.
	for s := range l.entries {
		if s < newFloor {
			l.forget(s)
		}
	}
}

func (l *grantLog) forget(seq uint64) {
	g, ok := l.entries[seq]
	if !ok {
		return
	}
	delete(l.entries, seq)
	if l.byResource[g.resource] != seq {
		return
	}
	delete(l.byResource, g.resource)
	if !l.multi[g.resource] {
		return
	}
	// The resource was granted more than once: the newest grant left
	// stands. Rare (conflicts only), so a walk of the window is fine.
	best, count := grant{}, 0
	for _, e := range l.entries {
		if e.resource == g.resource {
			if count == 0 || stampLess(best.stamp, e.stamp) {
				best = e
			}
			count++
		}
	}
	if count > 0 {
		l.byResource[g.resource] = best.seq
	}
	if count < 2 {
		delete(l.multi, g.resource)
	}
}

func (l *grantLog) advance() {
	if f := l.floor(); l.have+1 < f {
		l.have = f - 1
	}
	for {
		if _, ok := l.entries[l.have+1]; ok {
			l.have++
			continue
		}
		i := slices.IndexFunc(l.gaps, func(g [2]uint64) bool { return g[0] <= l.have && l.have < g[1] })
		if i < 0 {
			return
		}
		l.have = l.gaps[i][1]
		l.gaps = slices.Delete(l.gaps, i, i+1)
	}
}

// absent records that no grant was made in (from, to]: a takeover left
// that room. Only the newest few ranges are kept.
func (l *grantLog) absent(from, to uint64) {
	if to <= from || to <= l.have {
		return
	}
	for _, g := range l.gaps {
		if g[0] <= from && to <= g[1] {
			return
		}
	}
	if len(l.gaps) >= maxGaps {
		l.gaps = l.gaps[1:]
	}
	l.gaps = append(l.gaps, [2]uint64{from, to})
	l.raise(to)
	l.advance()
}

const maxGaps = 8

// countAfter counts the grants held with a sequence number above seq.
func (l *grantLog) countAfter(seq uint64) int {
	c := 0
	for s := max(seq+1, l.floor()); s <= l.last; s++ {
		if _, ok := l.entries[s]; ok {
			c++
		}
	}
	return c
}

// holderOf returns the grant of r, if it is remembered.
func (l *grantLog) holderOf(r ResourceID) (grant, bool) {
	seq, ok := l.byResource[r]
	if !ok {
		return grant{}, false
	}
	return l.entries[seq], true
}

// after returns up to max grants this log holds in (seq, upTo], in
// sequence order.
func (l *grantLog) after(seq, upTo uint64, max int) []*pb.GrantEntry {
	var out []*pb.GrantEntry
	from := max64(seq+1, l.floor())
	for s := from; s <= min(upTo, l.last) && len(out) < max; s++ {
		if g, ok := l.entries[s]; ok {
			out = append(out, g.wire())
		}
	}
	return out
}

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// startAt starts a newcomer's log: the newest grant is seq, and the window
// before it is to be filled by repairs.
func (l *grantLog) startAt(seq uint64) {
	l.last = seq
	l.have = l.floor() - 1
	if seq == 0 {
		l.have = 0
	}
}

// stampLess orders stamps of any epochs: epoch, then lap, then ts.
func stampLess(a, b Stamp) bool {
	if a.Epoch != b.Epoch {
		return a.Epoch < b.Epoch
	}
	if a.Lap != b.Lap {
		return a.Lap < b.Lap
	}
	return a.TS < b.TS
}

// digestRange is the range (from, to] a digest of the grants up to have
// covers: everything remembered.
func (l *grantLog) digestRange() (from, to uint64) {
	return l.floor() - 1, l.have
}

// digest hashes the grants this log holds in (from, to], in order.
func (l *grantLog) digest(from, to uint64) uint64 {
	h := fnv.New64a()
	var b [8 + 8 + 8 + 4 + 8 + 4 + 4]byte
	for s := from + 1; s <= to && s > from; s++ {
		g, ok := l.entries[s]
		if !ok {
			continue
		}
		binary.LittleEndian.PutUint64(b[0:], g.seq)
		binary.LittleEndian.PutUint64(b[8:], g.stamp.Epoch)
		binary.LittleEndian.PutUint64(b[16:], g.stamp.Lap)
		binary.LittleEndian.PutUint32(b[24:], g.stamp.TS)
		binary.LittleEndian.PutUint64(b[28:], uint64(g.resource))
		binary.LittleEndian.PutUint32(b[36:], uint32(g.to))
		h.Write(b[:40])
	}
	return h.Sum64()
}
