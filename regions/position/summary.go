package position

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/game/vfc"
	"github.com/overworld-p2p/overworld/regions"
)

// Summaries (aggregated mode, Config.Summaries): a player pays full rate
// only for its own region (and, near a border, the region across it); for
// the other regions within Radius it subscribes to their summary topics,
// on which each region's coordinator publishes, once per interval, what
// vector-field consistency (game/vfc, paper 004) says the neighbours need:
// a player close to the region's border — close to the neighbours — when
// their dead reckoning of it drifts a little, one deep inside the region
// rarely. Zones are distances from the region's border inward, measured
// as one VFC view whose pivot stands on the border: each player is put at
// its distance from the border, so the paper's concentric squares become
// bands parallel to the border. Each player's update of an interval is a
// write; the vector's time bound makes even a player standing still go
// out every Time seconds, which keeps it in the receivers' views (Time
// must stay under Expire).
//
// Trust: a receiver takes a summary whole only from the peer it names the
// region's coordinator (the check batches get); from anyone else only if
// it holds the author's own entry alone, signed by the author as a direct
// update is. A player publishing directly because its coordinator does not
// answer (failover.go) summarises itself on its region's summary topic
// with the same settings, so neighbours keep hearing it while the region
// has no working coordinator.

// SummaryConfig configures summaries. Every peer of a world must use the
// same: the topic names carry a digest of it (Digest), so peers that
// differ do not hear each other's summaries.
type SummaryConfig struct {
	Enabled bool
	// Zones are distances in units from the region's border inward,
	// strictly increasing; Scale has one vector per zone, the zone at the
	// border first, weakening inward. Value is the receivers' dead
	// reckoning error in percent of a tile.
	Zones []int32
	Scale []vfc.Vector
}

// DefaultSummaries are on: within 4 tiles of the border a player goes out
// when the neighbours' reckoning is a quarter tile off, at least every
// 0.3 s; within 12 tiles at half a tile or 1 s; deeper at a tile or 2 s.
func DefaultSummaries() SummaryConfig {
	return SummaryConfig{
		Enabled: true,
		Zones:   []int32{4 * TileUnits, 12 * TileUnits},
		Scale:   []vfc.Vector{vfc.V(0.3, vfc.Unbounded, 25), vfc.V(1, vfc.Unbounded, 50), vfc.V(2, vfc.Unbounded, 100)},
	}
}

func (sc SummaryConfig) vfcConfig() vfc.Config[int32] {
	return vfc.Config[int32]{
		Objects: 1, // the pivot on the border
		Sets:    []vfc.SetConfig[int32]{{Name: "players", Objects: []vfc.ObjectID{0}, Zones: sc.Zones, Scale: sc.Scale}},
		Views:   []vfc.ViewConfig{{Name: "neighbours", Pivots: []vfc.ObjectID{0}}},
		// A region's batch is bounded; so is its summary.
		MaxObjects: MaxBatchUpdates + 1,
	}
}

func (sc SummaryConfig) validate(c Config) error {
	if !sc.Enabled {
		return nil
	}
	var errs []error
	if !c.Aggregate {
		errs = append(errs, errors.New("summaries need aggregated mode (the coordinator summarises what its players send it)"))
	}
	if err := sc.vfcConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	for i, v := range sc.Scale {
		if !(v.Time > 0 && v.Time*float64(time.Second) < float64(c.Expire-c.Interval)) {
			errs = append(errs, fmt.Errorf("summary zone %d: time bound %vs must be positive and under expiry %v less an interval, or receivers forget a player standing still", i+1, v.Time, c.Expire))
		}
	}
	return errors.Join(errs...)
}

// Digest names the settings in topic names.
func (sc SummaryConfig) Digest() string {
	var b strings.Builder
	for i, v := range sc.Scale {
		if i < len(sc.Zones) {
			fmt.Fprintf(&b, "%d:", sc.Zones[i])
		}
		b.WriteString(v.String())
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:4])
}

// SummaryTopic is the name of region c's summary topic under settings sc.
func SummaryTopic(world string, c regions.Coord, sc SummaryConfig) string {
	return regions.TopicPrefix(world, c) + "/sum/" + sc.Digest()
}

// Reasons specific to summaries.
const (
	// ReasonSummaryNotCoordinator marks a summary from a peer that does not
	// coordinate the region and holds more than its own entry.
	ReasonSummaryNotCoordinator = "summary_not_coordinator"
)

// summariser is VFC over one region's players for its neighbours.
type summariser struct {
	cmb   *vfc.CMB[int32, *Update]
	objs  map[peer.ID]vfc.ObjectID
	who   map[vfc.ObjectID]peer.ID
	seen  map[peer.ID]time.Time
	epoch time.Time
	last  time.Duration
	seq   uint64
	sends []*Update
}

func newSummariser(sc SummaryConfig, diff func(a, b *Update) float64, epoch time.Time) (*summariser, error) {
	cmb, err := vfc.New[int32, *Update](sc.vfcConfig(), diff)
	if err != nil {
		return nil, err
	}
	return &summariser{cmb: cmb, objs: map[peer.ID]vfc.ObjectID{}, who: map[vfc.ObjectID]peer.ID{}, seen: map[peer.ID]time.Time{}, epoch: epoch}, nil
}

// observe writes a player's update at depth d (units from the border).
func (m *summariser) observe(u *Update, d int32, now time.Time) error {
	id := peer.ID(u.Player)
	at := vfc.Point[int32]{X: d}
	o, ok := m.objs[id]
	if !ok {
		var err error
		if o, err = m.cmb.AddObject(0, at, u); err != nil {
			return err
		}
		m.objs[id], m.who[o] = o, id
	} else if err := m.cmb.Update(o, at, u); err != nil {
		return err
	}
	m.seen[id] = now
	return nil
}

// round forgets players silent for expire and returns the updates due.
func (m *summariser) round(now time.Time, expire time.Duration) []*Update {
	var gone []peer.ID
	for id, at := range m.seen {
		if now.Sub(at) > expire {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		o := m.objs[id]
		_ = m.cmb.RemoveObject(o)
		delete(m.objs, id)
		delete(m.who, o)
		delete(m.seen, id)
	}
	t := max(now.Sub(m.epoch), m.last)
	m.last = t
	if err := m.cmb.Round(t); err != nil {
		return nil
	}
	m.sends = m.sends[:0]
	for _, o := range m.cmb.Sends(0) {
		if o != 0 {
			m.sends = append(m.sends, m.cmb.Value(o))
		}
	}
	return m.sends
}

// depth is how far p stands inside region c from its border, in units.
func (g Grid) depth(c regions.Coord, p Vec) int32 {
	x0, y0 := int64(c.X)*int64(g.RegionUnits), int64(c.Y)*int64(g.RegionUnits)
	x1, y1 := x0+int64(g.RegionUnits)-1, y0+int64(g.RegionUnits)-1
	d := min(int64(p.X)-x0, x1-int64(p.X), int64(p.Y)-y0, y1-int64(p.Y))
	return int32(max(d, 0))
}

// summaryDiff is how far off, in percent of a tile, receivers holding
// sent show the player whose update is cur: their dead reckoning from
// sent against cur's position, now and where the reckoning of a player
// standing still comes to rest; a relocation counts in full.
func (s *Service) summaryDiff(sent, cur *Update) float64 {
	if sent.Relocations != cur.Relocations {
		return math.Inf(1)
	}
	el := time.Duration(cur.SentUnixMicro-sent.SentUnixMicro) * time.Microsecond
	from, vel := Vec{sent.X, sent.Y}, Vec{sent.Vx, sent.Vy}
	at := Vec{cur.X, cur.Y}
	off := chebyshev(DeadReckon(from, vel, el, s.cfg.MaxExtrapolation), at)
	if cur.Vx == 0 && cur.Vy == 0 {
		off = max(off, chebyshev(DeadReckon(from, vel, s.cfg.MaxExtrapolation, s.cfg.MaxExtrapolation), at))
	}
	return float64(off) * 100 / TileUnits
}

func chebyshev(a, b Vec) int64 {
	dx, dy := int64(a.X)-int64(b.X), int64(a.Y)-int64(b.Y)
	return max(dx, -dx, dy, -dy)
}

// takeSummaries feeds this interval's batches to the regions' summarisers
// and returns the summaries due. Called with s.mu held.
func (s *Service) takeSummaries(batches []*Batch, now time.Time) []*Batch {
	if !s.cfg.Summaries.Enabled {
		return nil
	}
	for _, b := range batches {
		c := coordOf(b.RegionX, b.RegionY)
		m := s.summaries[c]
		if m == nil {
			var err error
			if m, err = newSummariser(s.cfg.Summaries, s.summaryDiff, now); err != nil {
				s.log.Error("summariser", "region", c, "err", err)
				continue
			}
			s.summaries[c] = m
		}
		for _, u := range b.Updates {
			if err := m.observe(u, s.grid.depth(c, Vec{u.X, u.Y}), now); err != nil {
				s.log.Debug("summarise", "region", c, "err", err)
			}
		}
	}
	regs := make([]regions.Coord, 0, len(s.summaries))
	for c := range s.summaries {
		regs = append(regs, c)
	}
	sortCoords(regs)
	var out []*Batch
	for _, c := range regs {
		m := s.summaries[c]
		due := m.round(now, s.cfg.Expire)
		if len(m.objs) == 0 {
			delete(s.summaries, c)
		}
		if len(due) == 0 {
			continue
		}
		m.seq++
		out = append(out, &Batch{Coordinator: []byte(s.self), RegionX: int32(c.X), RegionY: int32(c.Y), Seq: m.seq, Updates: slices.Clone(due)})
	}
	return out
}

// ownSummary is the summary of this player alone while it publishes
// directly (nil when none is due). Called with s.mu held.
func (s *Service) ownSummary(own regions.Coord, u *Update, direct bool, now time.Time) *Batch {
	if !s.cfg.Summaries.Enabled || !direct {
		// The next fallback starts afresh: its first summary goes out at
		// once.
		s.own = nil
		return nil
	}
	if s.own == nil || s.ownSumAt != own {
		m, err := newSummariser(s.cfg.Summaries, s.summaryDiff, now)
		if err != nil {
			return nil
		}
		s.own, s.ownSumAt = m, own
	}
	if err := s.own.observe(u, s.grid.depth(own, Vec{u.X, u.Y}), now); err != nil {
		return nil
	}
	due := s.own.round(now, s.cfg.Expire)
	if len(due) == 0 {
		return nil
	}
	s.own.seq++
	return &Batch{Coordinator: []byte(s.self), RegionX: int32(own.X), RegionY: int32(own.Y), Seq: s.own.seq, Updates: slices.Clone(due)}
}

// publishSummaries publishes summaries on their regions' summary topics.
func (s *Service) publishSummaries(ctx context.Context, sums []*Batch, own bool) {
	for _, b := range sums {
		s.publishTo(ctx, coordOf(b.RegionX, b.RegionY), true, &Envelope{Body: &Envelope_Batch{Batch: b}})
		if own {
			s.count.ownSummaries.Add(1)
		} else {
			s.count.summaries.Add(1)
			s.count.summaryEntries.Add(uint64(len(b.Updates)))
		}
	}
}

// checkSummary validates a message on region c's summary topic.
func (s *Service) checkSummary(c regions.Coord, msg *pubsub.Message) (Verdict, string, accepted) {
	if len(msg.GetData()) > MaxBatchBytes {
		return Reject, ReasonTooLarge, accepted{}
	}
	env, err := DecodeEnvelope(msg.GetData())
	if err != nil {
		return Reject, ReasonMalformed, accepted{}
	}
	bt := env.GetBatch()
	if bt == nil {
		return Reject, ReasonMalformed, accepted{}
	}
	author := msg.GetFrom()
	if peer.ID(bt.Coordinator) != author {
		return Reject, ReasonForged, accepted{}
	}
	if coordOf(bt.RegionX, bt.RegionY) != c {
		return Reject, ReasonWrongRegion, accepted{}
	}
	for _, u := range bt.Updates {
		if coordOf(u.RegionX, u.RegionY) != c {
			return Reject, ReasonWrongRegion, accepted{}
		}
	}
	if author == s.self {
		// A coordinator in a neighbouring region follows the region it
		// coordinates through its own summaries, as its neighbours do.
		acc := accepted{batched: true, summary: true}
		for _, u := range bt.Updates {
			if peer.ID(u.Player) != s.self {
				acc.updates = append(acc.updates, u)
			}
		}
		return Accept, "", acc
	}
	if v, reason := s.admit(author); v != Accept {
		return v, reason, accepted{}
	}
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.count.setTracker(s.tracker.Stats()) }()
	if !s.heard.Allow(author, msg.GetTopic(), now) {
		return Ignore, ReasonRateLimited, accepted{}
	}
	if e, ok := s.coordinator[c]; !ok || e.id != author {
		// Not the coordinator this peer can verify: its own entry alone
		// (a player summarising itself while its coordinator is down).
		if len(bt.Updates) != 1 || peer.ID(bt.Updates[0].Player) != author {
			return Ignore, ReasonSummaryNotCoordinator, accepted{}
		}
	}
	acc := accepted{batched: true, summary: true}
	for _, u := range bt.Updates {
		if peer.ID(u.Player) == s.self {
			continue
		}
		v, reason := s.tracker.Observe(peer.ID(u.Player), u, now)
		switch v {
		case Reject:
			return Reject, reason, accepted{}
		case Accept:
			acc.updates = append(acc.updates, u)
		}
	}
	if len(acc.updates) == 0 {
		return Ignore, ReasonDuplicate, accepted{}
	}
	s.count.summaryBytesIn.Add(uint64(len(msg.GetData())))
	return Accept, "", acc
}

// interest splits the regions a player at pos follows into those it
// takes at full rate (all within Radius, or with summaries its own and,
// near a border, those across it) and those it takes summaries of.
func (s *Service) interest(pos Vec) (full, summarised []regions.Coord) {
	all := s.grid.Subscriptions(pos, s.cfg.Radius, s.cfg.Prefetch)
	if !s.cfg.Summaries.Enabled {
		return all, nil
	}
	full = s.grid.Subscriptions(pos, 0, s.cfg.Prefetch)
	for _, c := range all {
		if !slices.Contains(full, c) {
			summarised = append(summarised, c)
		}
	}
	return full, summarised
}

// updateSummarySubscriptions subscribes to the summary topics of regs and
// lets the others linger out, as updateSubscriptions does for position
// topics. Called with s.topicMu held.
func (s *Service) updateSummarySubscriptions(ctx context.Context, now time.Time, regs []regions.Coord) (joined, left []regions.Coord) {
	need := map[regions.Coord]bool{}
	for _, c := range regs {
		need[c] = true
		rt, err := s.joinTopicOf(c, true)
		if err != nil {
			s.log.Warn("join summary topic", "region", c, "err", err)
			continue
		}
		rt.until = time.Time{}
		if rt.m.Subscribed() {
			continue
		}
		if err := rt.m.Subscribe(ctx, 256, s.deliver); err != nil {
			s.log.Warn("subscribe summary topic", "region", c, "err", err)
			continue
		}
		joined = append(joined, c)
	}
	return joined, s.lingerOut(s.sumTopics, need, now)
}
