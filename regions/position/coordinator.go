package position

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/pbframe"
	"github.com/overworld-p2p/overworld/regions"
)

// ProtocolID is the player -> coordinator stream protocol: Join (answered
// with Members) and, in aggregated mode, the player's updates.
const ProtocolID protocol.ID = "/overworld/position/1.0.0"

const streamTimeout = 5 * time.Second

// handleStream serves one player's stream until it ends or sends something
// invalid.
func (s *Service) handleStream(st network.Stream) {
	remote := st.Conn().RemotePeer()
	r := bufio.NewReader(countingReader{r: st, n: &s.count.streamIn})
	s.mu.Lock()
	running := s.runCtx != nil
	s.mu.Unlock()
	if !running {
		_ = st.Reset()
		return
	}
	// The run's end resets the stream (see Service.streams), not a
	// context callback per stream: a coordinator serves thousands.
	if !s.track(st) {
		return
	}
	defer s.untrack(st)
	for {
		m, err := decodeStreamMessage(r)
		if errors.Is(err, io.EOF) {
			// The player is done; a reset here could discard the answer
			// still on its way.
			_ = st.Close()
			return
		}
		if err != nil {
			_ = st.Reset()
			return
		}
		switch b := m.Body.(type) {
		case *StreamMessage_Join:
			c := coordOf(b.Join.RegionX, b.Join.RegionY)
			if !s.grid.Contains(c) {
				_ = st.Reset()
				return
			}
			s.count.joinsSeen.Add(1)
			_ = st.SetWriteDeadline(time.Now().Add(streamTimeout))
			n, err := pbframe.WriteMessage(st, s.register(c, remote, b.Join.Member), maxMembersBytes)
			s.count.streamOut.Add(uint64(n))
			if err != nil {
				_ = st.Reset()
				return
			}
		case *StreamMessage_Update:
			s.count.uplinkReceived.Add(1)
			v, reason := s.ingestUpdate(remote, b.Update)
			s.count.verdict(v, reason)
			if v == Reject {
				_ = st.Reset()
				return
			}
		}
	}
}

// registration is a peer's rendezvous with a region this peer
// coordinates: whether the peer is in the region (a member, which
// publishes there in direct mode) or only follows it from around, and
// until when it counts.
type registration struct {
	until  time.Time
	member bool
}

// register records that p follows region c, as a member if member, and
// returns the peers it should connect to so that gossipsub meets the
// region's publishers and subscribers in one hop: a member gets every
// peer registered for the region (its subscribers, who take its updates
// in direct mode), a follower only the members (who publish there). Two
// followers of a region need no connection: they share no publisher but
// the members and the coordinator, and naming them made every player
// connect to everyone within two regions of it instead of one (about
// 125 peers at five players a region instead of 45).
func (s *Service) register(c regions.Coord, p peer.ID, member bool) *Members {
	now := s.cfg.Now()
	s.mu.Lock()
	m := s.interested[c]
	if m == nil {
		m = map[peer.ID]registration{}
		s.interested[c] = m
	}
	if _, known := m[p]; !known && len(m) >= maxInterested {
		dropSoonest(m)
	}
	m[p] = registration{until: now.Add(3 * s.cfg.Rendezvous), member: member}
	ids := make([]peer.ID, 0, len(m))
	for id, reg := range m {
		if id != p && (member || reg.member) {
			ids = append(ids, id)
		}
	}
	e, known := s.coordinator[c]
	s.mu.Unlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	if len(ids) > s.cfg.MaxMembers {
		ids = ids[:s.cfg.MaxMembers]
	}
	out := &Members{RegionX: int32(c.X), RegionY: int32(c.Y), Coordinator: !known || e.id == s.self}
	for _, id := range ids {
		var addrs []ma.Multiaddr
		if id == s.self {
			addrs = s.h.Addrs()
		} else {
			addrs = s.h.Peerstore().Addrs(id)
		}
		mem := &Member{Id: []byte(id)}
		for _, a := range addrs[:min(len(addrs), 16)] {
			mem.Addrs = append(mem.Addrs, a.Bytes())
		}
		out.Members = append(out.Members, mem)
	}
	return out
}

// maxInterested bounds the peers a coordinator remembers per region for
// rendezvous; past it, the registration closest to expiry makes room.
const maxInterested = 4 * MaxMembers

// dropSoonest removes the entry of m that expires first.
func dropSoonest(m map[peer.ID]registration) {
	var victim peer.ID
	var at time.Time
	for id, reg := range m {
		if victim == "" || reg.until.Before(at) || (reg.until.Equal(at) && id < victim) {
			victim, at = id, reg.until
		}
	}
	delete(m, victim)
}

// ingestUpdate takes a player's update as the coordinator of its region:
// the stream's peer must be the player, admitted (WithAdmission), and the
// update must pass the coordinator's own Tracker.
func (s *Service) ingestUpdate(from peer.ID, u *Update) (Verdict, string) {
	if peer.ID(u.Player) != from {
		return Reject, ReasonForged
	}
	if v, reason := s.admit(from); v != Accept {
		return v, reason
	}
	c := coordOf(u.RegionX, u.RegionY)
	if !s.grid.Contains(c) {
		return Reject, ReasonOutOfWorld
	}
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.uplinked.Allow(from, c.String(), now) {
		return Ignore, ReasonRateLimited
	}
	v, reason := s.ingest.Observe(from, u, now)
	if v != Accept {
		return v, reason
	}
	m := s.pending[c]
	if m == nil {
		m = map[peer.ID]*Update{}
		s.pending[c] = m
	}
	m[from] = u
	if in := s.interested[c]; in != nil {
		if _, known := in[from]; !known && len(in) >= maxInterested {
			dropSoonest(in)
		}
		// The update says the player is in the region: a member now.
		in[from] = registration{until: now.Add(3 * s.cfg.Rendezvous), member: true}
	}
	return Accept, ""
}

// takeBatches turns this interval's updates into one batch per region.
// Called with s.mu held.
func (s *Service) takeBatches() []*Batch {
	regs := make([]regions.Coord, 0, len(s.pending))
	for c, m := range s.pending {
		if len(m) > 0 {
			regs = append(regs, c)
		}
	}
	sortCoords(regs)
	out := make([]*Batch, 0, len(regs))
	for _, c := range regs {
		m := s.pending[c]
		ids := make([]peer.ID, 0, len(m))
		for id := range m {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		if len(ids) > MaxBatchUpdates {
			ids = ids[:MaxBatchUpdates]
		}
		s.batchSeq[c]++
		b := &Batch{Coordinator: []byte(s.self), RegionX: int32(c.X), RegionY: int32(c.Y), Seq: s.batchSeq[c]}
		for _, id := range ids {
			b.Updates = append(b.Updates, m[id])
		}
		out = append(out, b)
		delete(s.pending, c)
	}
	return out
}

// startRendezvous starts the due rendezvous, one at a time per region.
// Called with s.mu held.
func (s *Service) startRendezvous(ctx context.Context, now time.Time) {
	for c, due := range s.rendezvous {
		if now.Before(due) || s.inFlight[c] {
			continue
		}
		s.inFlight[c] = true
		s.rendezvous[c] = now.Add(s.cfg.Rendezvous)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			err := s.rendezvousWith(ctx, c)
			s.mu.Lock()
			s.inFlight[c] = false
			if err != nil {
				// Retry soon rather than after a full period.
				if _, ok := s.rendezvous[c]; ok {
					s.rendezvous[c] = s.cfg.Now().Add(4 * s.cfg.Interval)
				}
			}
			s.mu.Unlock()
			if err != nil {
				s.count.rendezvousFail.Add(1)
				if ctx.Err() == nil {
					s.log.Debug("rendezvous failed", "region", c, "err", err)
				}
				return
			}
			s.count.rendezvousOK.Add(1)
		}()
	}
}

// rendezvousWith registers with region c's coordinator and connects to the
// peers it names, so that gossipsub sees their subscriptions.
func (s *Service) rendezvousWith(ctx context.Context, c regions.Coord) error {
	ctx, cancel := context.WithTimeout(ctx, streamTimeout)
	defer cancel()
	s.lookUp(ctx, c)
	coord, err := s.coordinatorFor(ctx, c)
	if err != nil {
		return err
	}
	var members *Members
	if coord == s.self {
		members = s.register(c, s.self, s.ownRegion() == c)
	} else {
		members, err = s.join(ctx, coord, c)
		if err != nil {
			s.forgetCoordinator(c)
			return fmt.Errorf("join region %s at %s: %w", c, coord, err)
		}
	}
	connectMembers(ctx, s.h, s.log, c, members.Members)
	return nil
}

// memberDials bounds the connections one rendezvous opens at a time.
const memberDials = 32

// connectMembers connects h to the members a rendezvous named, several at
// a time, and returns when every attempt has ended. A connection waits for
// identify, a round trip; one after the other, a newcomer meeting the
// fifty players around it took seconds (past the rendezvous timeout at
// longer links), and until then its updates and theirs reached each other
// only through forwarding peers, a hop late.
func connectMembers(ctx context.Context, h host.Host, log *slog.Logger, c regions.Coord, members []*Member) {
	self := h.ID()
	slots := make(chan struct{}, memberDials)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, mem := range members {
		id := peer.ID(mem.Id)
		if id == self || h.Network().Connectedness(id) == network.Connected {
			continue
		}
		var addrs []ma.Multiaddr
		for _, b := range mem.Addrs {
			if a, err := ma.NewMultiaddrBytes(b); err == nil {
				addrs = append(addrs, a)
			}
		}
		h.Peerstore().AddAddrs(id, addrs, peerstore.TempAddrTTL)
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := h.Connect(ctx, peer.AddrInfo{ID: id, Addrs: addrs}); err != nil {
				log.Debug("connect to region member", "region", c, "peer", id, "err", err)
			}
		})
	}
}

func (s *Service) join(ctx context.Context, coord peer.ID, c regions.Coord) (*Members, error) {
	st, err := s.h.NewStream(ctx, coord, ProtocolID)
	if err != nil {
		return nil, err
	}
	if !s.track(st) {
		return nil, errors.New("position service closing")
	}
	defer s.untrack(st)
	defer st.Close()
	// Not every transport honours deadlines (the in-memory one does not):
	// the timeout resets the stream, and so does the run's end.
	stop := context.AfterFunc(ctx, func() { _ = st.Reset() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	own := s.ownRegion()
	join := &Join{RegionX: int32(c.X), RegionY: int32(c.Y), Member: own == c}
	n, err := pbframe.WriteMessage(st, &StreamMessage{Body: &StreamMessage_Join{Join: join}}, maxStreamMessageBytes)
	s.count.streamOut.Add(uint64(n))
	if err != nil {
		_ = st.Reset()
		return nil, err
	}
	if err := st.CloseWrite(); err != nil {
		_ = st.Reset()
		return nil, err
	}
	m, err := decodeMembers(bufio.NewReader(countingReader{r: st, n: &s.count.streamIn}))
	if err != nil {
		_ = st.Reset()
		return nil, err
	}
	return m, nil
}

func (s *Service) ownRegion() regions.Coord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grid.RegionOf(s.pos)
}

// coordinatorFor returns region c's coordinator (placeCoordinator), cached
// for coordinatorTTL.
func (s *Service) coordinatorFor(ctx context.Context, c regions.Coord) (peer.ID, error) {
	now := s.cfg.Now()
	s.mu.Lock()
	e, ok := s.coordinator[c]
	s.mu.Unlock()
	if ok && now.Before(e.until) {
		return e.id, nil
	}
	coord, err := s.placeCoordinator(ctx, c)
	if err != nil {
		return "", err
	}
	if coord == "" {
		return "", fmt.Errorf("no coordinator for region %s", c)
	}
	s.mu.Lock()
	s.coordinator[c] = coordinatorEntry{id: coord, until: now.Add(s.cfg.CoordinatorTTL)}
	s.mu.Unlock()
	return coord, nil
}

// placeCoordinator is region c's coordinator by WithCoordinators, else by
// placement over the candidates that run the position protocol.
func (s *Service) placeCoordinator(ctx context.Context, c regions.Coord) (peer.ID, error) {
	if s.coordinatorOf != nil {
		return s.coordinatorOf(c), nil
	}
	key := regions.Key(s.cfg.World, c)
	cands, err := s.candidates(ctx, key)
	if err != nil {
		return "", fmt.Errorf("coordinator candidates for region %s: %w", c, err)
	}
	sorted := node.SortByDistance(key, append(append([]peer.ID(nil), cands...), s.self))
	var running []peer.ID
	for _, p := range sorted {
		// Placement needs the coordinator and the replica; the peers past
		// the second that runs the protocol do not matter.
		if len(running) == 2 {
			break
		}
		if p == s.self || s.runsProtocol(ctx, p) {
			running = append(running, p)
		}
	}
	coord, _ := regions.Placement(key, running)
	return coord, nil
}

func (s *Service) forgetCoordinator(c regions.Coord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.coordinator, c)
}

// runsProtocol reports whether p speaks ProtocolID, connecting to it and
// waiting for identify if its protocols are not known yet.
func (s *Service) runsProtocol(ctx context.Context, p peer.ID) bool {
	ps := s.h.Peerstore()
	if protos, _ := ps.GetProtocols(p); len(protos) > 0 {
		ok, _ := ps.SupportsProtocols(p, ProtocolID)
		return len(ok) > 0
	}
	if err := s.h.Connect(ctx, peer.AddrInfo{ID: p}); err != nil {
		return false
	}
	if ids, ok := s.h.(interface{ IDService() identify.IDService }); ok {
		for _, conn := range s.h.Network().ConnsToPeer(p) {
			select {
			case <-ids.IDService().IdentifyWait(conn):
			case <-ctx.Done():
				return false
			}
		}
	}
	ok, _ := ps.SupportsProtocols(p, ProtocolID)
	return len(ok) > 0
}

// uplink is the aggregated-mode stream to the coordinator of the player's
// region. Only the tick goroutine uses it.
type uplink struct {
	s      *Service
	peer   peer.ID
	stream network.Stream
}

func (u *uplink) close() {
	u.s.untrack(u.stream)
	_ = u.stream.Close()
}

// sendUplink sends the player's update to its region's coordinator (or
// queues it locally when this peer is the coordinator).
func (s *Service) sendUplink(ctx context.Context, own regions.Coord, u *Update) {
	s.mu.Lock()
	e, ok := s.coordinator[own]
	s.mu.Unlock()
	if !ok {
		s.count.uplinkFailed.Add(1)
		return
	}
	if e.id == s.self {
		if v, _ := s.ingestUpdate(s.self, u); v == Accept {
			s.count.sentUplink.Add(1)
		} else {
			s.count.uplinkFailed.Add(1)
		}
		return
	}
	if s.uplink != nil && s.uplink.peer != e.id {
		s.uplink.close()
		s.uplink = nil
	}
	if s.uplink == nil {
		sctx, cancel := context.WithTimeout(ctx, streamTimeout)
		st, err := s.h.NewStream(sctx, e.id, ProtocolID)
		cancel()
		if err != nil {
			s.count.uplinkFailed.Add(1)
			s.forgetCoordinator(own)
			return
		}
		if !s.track(st) {
			return
		}
		s.uplink = &uplink{s: s, peer: e.id, stream: st}
	}
	_ = s.uplink.stream.SetWriteDeadline(time.Now().Add(streamTimeout))
	n, err := pbframe.WriteMessage(s.uplink.stream, &StreamMessage{Body: &StreamMessage_Update{Update: u}}, maxStreamMessageBytes)
	s.count.streamOut.Add(uint64(n))
	if err != nil {
		s.untrack(s.uplink.stream)
		_ = s.uplink.stream.Reset()
		s.uplink = nil
		s.count.uplinkFailed.Add(1)
		s.forgetCoordinator(own)
		return
	}
	s.count.sentUplink.Add(1)
}
