package regions

import (
	"context"
	"sort"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
	"github.com/overworld-p2p/overworld/regions/topic"
)

// Object is one shared object of a region as the game sees it.
type Object struct {
	ID      string
	Value   []byte
	Version uint64
	// LockHolder holds the object's lock until LockExpires (zero: unlocked).
	LockHolder  peer.ID
	LockExpires time.Time
	// SingleCopy, on an update's answer: the coordinator acknowledged it
	// with no replica holding it (none was reachable), so it is lost if
	// the coordinator fails before a replica syncs.
	SingleCopy bool
}

func objectFromPB(o *pb.Object) Object {
	if o == nil {
		return Object{}
	}
	out := Object{ID: o.Id, Value: append([]byte(nil), o.Value...), Version: o.Version}
	if len(o.LockHolder) > 0 && o.LockExpiresMs > 0 {
		out.LockHolder = peer.ID(o.LockHolder)
		out.LockExpires = time.UnixMilli(o.LockExpiresMs)
	}
	return out
}

// Update is one batch of committed changes to a region, as published on
// its event topic.
type Update struct {
	Region  Coord
	Epoch   uint64
	LeaseID uint64
	Objects []Object
}

// Subscription delivers a region's committed updates. Updates arrive at
// most once and may be missed (the topic is best effort); the member cache
// behind it keeps the highest version of every object.
type Subscription struct {
	C      <-chan Update
	c      chan Update
	region Coord
	s      *Service
	once   sync.Once
}

// Close ends the subscription.
func (sub *Subscription) Close() {
	sub.once.Do(func() { sub.s.unsubscribe(sub) })
}

// regionTopic is this peer's membership of one region's event topic.
type regionTopic struct {
	m    topic.Channel
	subs []*Subscription
	// The member cache: highest version of each object seen.
	epoch uint64
	cache map[string]*pb.Object
	// signed holds, per object, the newest entry that came with its
	// coordinator's signature and grant (events): what a rebuild takes.
	signed map[string]*pb.SignedEntry
}

// EventTopic is the name of region c's event topic.
func EventTopic(world string, c Coord) string { return TopicPrefix(world, c) + "/events" }

// joinTopicLocked returns the region's topic, joining it (with its
// validator) on first use. Caller holds s.topicMu.
func (s *Service) joinTopicLocked(c Coord) (*regionTopic, error) {
	if rt := s.topics[c]; rt != nil {
		return rt, nil
	}
	want := c
	m, err := s.tr.JoinTopic(EventTopic(s.cfg.World, c), func(author peer.ID, data []byte) (pubsub.ValidationResult, any) {
		ev, err := decodeEvent(data)
		if err != nil || ev.World != s.cfg.World || int(ev.X) != want.X || int(ev.Y) != want.Y {
			s.metrics.refused.WithLabelValues(refusedBounds).Inc()
			return pubsub.ValidationReject, nil
		}
		if verdict := s.checkEvent(want, author, ev); verdict != pubsub.ValidationAccept {
			return verdict, nil
		}
		return pubsub.ValidationAccept, ev
	})
	if err != nil {
		return nil, err
	}
	rt := &regionTopic{m: m, cache: map[string]*pb.Object{}, signed: map[string]*pb.SignedEntry{}}
	s.topics[c] = rt
	return rt, nil
}

// closeTopics ends every subscription and leaves the topics; the read
// loops are waited for outside s.topicMu, which they take.
func (s *Service) closeTopics() {
	s.topicMu.Lock()
	var left []topic.Channel
	for _, rt := range s.topics {
		for _, sub := range rt.subs {
			close(sub.c)
		}
		left = append(left, rt.m)
	}
	s.topics = map[Coord]*regionTopic{}
	s.topicMu.Unlock()
	for _, m := range left {
		if err := m.Leave(); err != nil {
			s.log.Debug("leave region topic", "topic", m.Name(), "err", err)
		}
	}
}

// checkEvent decides whether an event on region c's topic comes from the
// region's coordinator: its author (pubsub checked the author's signature)
// is placed and, with a lease service, shows a grant of the region naming
// it, current and not older than the newest known, under which every
// entry was committed; and each entry carries the author's signature, so
// members can keep it for rebuilds. A stale or lapsed grant may be an
// honest coordinator's delayed event: ignored, not penalised. So is an
// event from an author this peer does not place but whose current grant
// checks out: the lease service found it entitled, and views differ while
// the routing tables settle (an early coordinator with a thin view keeps a
// region until it hands it off); refused all the same, but the peers that
// forwarded it are not penalised for it.
func (s *Service) checkEvent(c Coord, author peer.ID, ev *pb.Event) pubsub.ValidationResult {
	if author == s.h.ID() {
		return pubsub.ValidationAccept
	}
	reason, ignore := "", false
	if !s.placed(c, author) {
		reason = refusedNotPlaced
		if s.cfg.Proofs != nil {
			_, r := s.checkProof(c, ev.Grant, true, author)
			ignore = r == ""
		}
	} else if cl, r := s.checkProof(c, ev.Grant, true, author); r != "" {
		reason = r
	} else {
		for i, e := range ev.Entries {
			if (s.cfg.Proofs != nil && e.LeaseId > cl.leaseID) ||
				!s.verifySig(author, entryDigest(s.cfg.World, c, ev.Epoch, e), ev.EntrySignatures[i]) {
				reason = refusedEventForged
				break
			}
		}
	}
	if reason == "" {
		return pubsub.ValidationAccept
	}
	s.refuse(c, author, "event", reason)
	if ignore || reason == refusedProofStale || reason == refusedProofExpired {
		return pubsub.ValidationIgnore
	}
	return pubsub.ValidationReject
}

// publish sends a committed batch to the region's members, each entry
// signed with this peer's key.
func (s *Service) publish(c Coord, ev *pb.Event) {
	ev.World, ev.X, ev.Y = s.cfg.World, int32(c.X), int32(c.Y)
	ev.EntrySignatures = make([][]byte, len(ev.Entries))
	for i, e := range ev.Entries {
		ev.EntrySignatures[i] = s.sign(entryDigest(s.cfg.World, c, ev.Epoch, e))
	}
	s.topicMu.Lock()
	if s.ctx.Err() != nil {
		s.topicMu.Unlock()
		return
	}
	rt, err := s.joinTopicLocked(c)
	s.topicMu.Unlock()
	if err != nil {
		s.log.Warn("join region topic", "region", c, "err", err)
		return
	}
	const perEvent = 32 // keeps an event under the topic's size limit
	for start := 0; start < len(ev.Entries); start += perEvent {
		end := min(start+perEvent, len(ev.Entries))
		part := &pb.Event{World: ev.World, X: ev.X, Y: ev.Y, Epoch: ev.Epoch, LeaseId: ev.LeaseId, Grant: ev.Grant,
			Entries: ev.Entries[start:end], EntrySignatures: ev.EntrySignatures[start:end]}
		data, err := proto.Marshal(part)
		if err != nil {
			s.log.Warn("encode region event", "region", c, "err", err)
			return
		}
		if err := rt.m.Publish(s.ctx, data); err != nil && s.ctx.Err() == nil {
			s.log.Warn("publish region event", "region", c, "err", err)
		}
	}
}

// Subscribe makes this peer a member of region c: it receives the
// region's committed updates and keeps a cache of its objects, from which
// the region can be rebuilt if its coordinator and replica both fail.
func (s *Service) Subscribe(c Coord) (*Subscription, error) {
	if !s.cfg.Contains(c) {
		return nil, errOutside(c, s.cfg)
	}
	s.topicMu.Lock()
	defer s.topicMu.Unlock()
	if s.ctx.Err() != nil {
		return nil, context.Canceled
	}
	rt, err := s.joinTopicLocked(c)
	if err != nil {
		return nil, err
	}
	if err := rt.m.Subscribe(s.ctx, 256, func(author peer.ID, value any) { s.takeEvent(c, author, value) }); err != nil {
		return nil, err
	}
	ch := make(chan Update, 256)
	sub := &Subscription{C: ch, c: ch, region: c, s: s}
	rt.subs = append(rt.subs, sub)
	return sub, nil
}

func (s *Service) unsubscribe(sub *Subscription) {
	s.topicMu.Lock()
	defer s.topicMu.Unlock()
	rt := s.topics[sub.region]
	if rt == nil {
		return
	}
	for i, x := range rt.subs {
		if x == sub {
			rt.subs = append(rt.subs[:i], rt.subs[i+1:]...)
			close(sub.c)
			break
		}
	}
	if len(rt.subs) == 0 {
		// Stay joined (coordinators publish here) but stop receiving;
		// the cache is kept for rebuilds until the service closes.
		rt.m.Unsubscribe()
	}
}

// takeEvent takes a validated event of region c into the member cache.
func (s *Service) takeEvent(c Coord, author peer.ID, value any) {
	ev, ok := value.(*pb.Event)
	if !ok {
		return
	}
	signed := make([]*pb.SignedEntry, len(ev.Entries))
	for i, e := range ev.Entries {
		signed[i] = &pb.SignedEntry{Epoch: ev.Epoch, Entry: e, Grant: ev.Grant, Author: []byte(author), Signature: ev.EntrySignatures[i]}
	}
	s.absorbSigned(c, ev.Epoch, ev.LeaseId, ev.Entries, signed)
}

// absorb updates the member cache with objects a coordinator answered
// (no signatures: they are for reading only, never for rebuilds).
func (s *Service) absorb(c Coord, epoch, leaseID uint64, entries []*pb.Entry, deliver bool) {
	s.absorbAll(c, epoch, leaseID, entries, nil, deliver)
}

// absorbSigned updates the member cache with an event's entries, keeping
// each signed entry for rebuilds, and hands them to the subscribers.
func (s *Service) absorbSigned(c Coord, epoch, leaseID uint64, entries []*pb.Entry, signed []*pb.SignedEntry) {
	s.absorbAll(c, epoch, leaseID, entries, signed, true)
}

func (s *Service) absorbAll(c Coord, epoch, leaseID uint64, entries []*pb.Entry, signed []*pb.SignedEntry, deliver bool) {
	s.topicMu.Lock()
	defer s.topicMu.Unlock()
	rt := s.topics[c]
	if rt == nil || !rt.m.Subscribed() {
		return
	}
	rt.epoch = max(rt.epoch, epoch)
	up := Update{Region: c, Epoch: epoch, LeaseID: leaseID}
	for i, e := range entries {
		if cur := rt.cache[e.Object.Id]; (cur == nil && len(rt.cache) < MaxObjectsInRegion) || (cur != nil && e.Object.Version >= cur.Version) {
			rt.cache[e.Object.Id] = proto.Clone(e.Object).(*pb.Object)
		}
		if signed != nil {
			if cur := rt.signed[e.Object.Id]; cur == nil || newerEntry(signed[i], cur) {
				if cur != nil || len(rt.signed) < MaxObjectsInRegion {
					rt.signed[e.Object.Id] = signed[i]
				}
			}
		}
		up.Objects = append(up.Objects, objectFromPB(e.Object))
	}
	if !deliver {
		return
	}
	for _, sub := range rt.subs {
		select {
		case sub.c <- up:
		default: // a slow reader misses updates; its cache does not
		}
	}
}

// newerEntry orders two signed entries of one object: the later epoch,
// then the higher version.
func newerEntry(a, b *pb.SignedEntry) bool {
	if a.Epoch != b.Epoch {
		return a.Epoch > b.Epoch
	}
	return a.Entry.Object.Version >= b.Entry.Object.Version
}

// cacheOf returns this member's cache of region c: the objects, and the
// signed entries a rebuild may take.
func (s *Service) cacheOf(c Coord) (uint64, []*pb.Object, []*pb.SignedEntry) {
	s.topicMu.Lock()
	defer s.topicMu.Unlock()
	rt := s.topics[c]
	if rt == nil {
		return 0, nil, nil
	}
	out := make([]*pb.Object, 0, len(rt.cache))
	for _, o := range rt.cache {
		if len(out) < MaxObjectsInRegion {
			out = append(out, proto.Clone(o).(*pb.Object))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	signed := make([]*pb.SignedEntry, 0, len(rt.signed))
	for _, se := range rt.signed {
		signed = append(signed, proto.Clone(se).(*pb.SignedEntry))
	}
	sort.Slice(signed, func(i, j int) bool { return signed[i].Entry.Object.Id < signed[j].Entry.Object.Id })
	return rt.epoch, out, signed
}

// Cached returns this member's cached copy of region c's objects.
func (s *Service) Cached(c Coord) []Object {
	_, objs, _ := s.cacheOf(c)
	out := make([]Object, len(objs))
	for i, o := range objs {
		out[i] = objectFromPB(o)
	}
	return out
}
