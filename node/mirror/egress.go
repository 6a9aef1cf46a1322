package mirror

import (
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// Area is what one client is sent of the leading state.
type Area struct {
	Players []game.Player // the other players it sees
	Objects []game.ObjectEntry
}

// Interest picks a client's area from the leading state's world; self is
// its player. It is the one place that decides what a client sees, so a
// finer filter (vector-field consistency) replaces just this function.
type Interest func(w *game.World, self game.Player) Area

// NeighbourInterest is the default area: the player's region and the
// regions around it, as the browser page draws them.
func NeighbourInterest(w *game.World, self game.Player) Area {
	here := w.RegionOf(self.Pos)
	var a Area
	near := map[game.RegionCoord]bool{}
	for _, rc := range w.Neighbours(here) {
		near[rc] = true
		a.Objects = append(a.Objects, w.Objects(rc)...)
	}
	for _, p := range w.Players() {
		if p.ID != self.ID && near[w.RegionOf(p.Pos)] {
			a.Players = append(a.Players, p)
		}
	}
	return a
}

// egressState is what the mirror remembers of what it sent one client.
type egressState struct {
	objects   map[game.ObjectID]uint64 // object versions the client has
	tentative []sentEvent              // leading-state events not yet confirmed or retracted
	leadTick  uint64                   // events of the leading state sent up to here
	confTick  uint64                   // events of the last state settled up to here
	nextID    uint64
	frames    uint64
}

type sentEvent struct {
	id uint64
	ev game.Event
}

// maxTentative bounds the unconfirmed events kept per client.
const maxTentative = 1024

// egress sends every playing client its update from the leading state.
func (s *Server) egress(now time.Time) {
	leading, last := s.sync.Leading(), s.sync.Last()
	lw := leading.World()
	var status *mirrorpb.MirrorStatus
	for _, sess := range s.sessionList() {
		if sess.state != sessionPlaying {
			continue
		}
		self, ok := lw.Player(sess.player)
		if !ok {
			continue
		}
		eg := &sess.egress
		area := s.cfg.Interest(lw, self)
		u := &mirrorpb.Update{LeadingTick: leading.Tick(), ConfirmedTick: last.Tick(), Self: playerState(self), InputSeq: sess.lastSeq}
		seen := map[game.PlayerID]bool{self.ID: true}
		for _, p := range area.Players {
			seen[p.ID] = true
			u.Players = append(u.Players, playerState(p))
		}
		fresh := make(map[game.ObjectID]uint64, len(area.Objects))
		for _, o := range area.Objects {
			fresh[o.ID] = o.Version
			if v, ok := eg.objects[o.ID]; ok && v == o.Version {
				continue
			}
			u.Objects = append(u.Objects, &mirrorpb.ObjectState{
				RegionX: uint32(o.ID.Region.X), RegionY: uint32(o.ID.Region.Y), Slot: uint32(o.ID.Slot),
				Kind: uint32(o.Object.Kind), X: o.Pos.X, Y: o.Pos.Y,
				Amount: uint32(o.Object.Amount), Max: uint32(o.Object.Max), Version: o.Version,
			})
		}
		eg.objects = fresh
		s.events(eg, u, leading, last, seen)
		if eg.frames%uint64(max(s.cfg.Game.TickRate/s.cfg.FrameTicks, 1)) == 0 {
			if status == nil {
				status = s.status()
			}
			u.Status = status
		}
		eg.frames++
		frame := encode(&mirrorpb.ServerFrame{Body: &mirrorpb.ServerFrame_Update{Update: u}})
		if !sess.link.Send(frame) {
			s.m.updatesDropped.Add(1)
			eg.objects = nil // the client missed object changes: send them all again
			continue
		}
		s.m.updatesSent.Add(1)
		s.m.updateBytes.Add(uint64(len(frame)))
	}
}

// events adds to u the strict events that concern the client: the
// leading state's new ones as tentative notes, and for every tick the last
// state has settled since the previous update, the confirmation or
// retraction of each tentative note plus the events only the last state
// produced.
func (s *Server) events(eg *egressState, u *mirrorpb.Update, leading, last *State, seen map[game.PlayerID]bool) {
	relevant := func(e game.Event) bool { return seen[e.Player] || (e.Other != "" && seen[e.Other]) }
	from := func(done, now uint64) uint64 {
		if now >= recentTicks && done < now-recentTicks+1 {
			return now - recentTicks + 1
		}
		return done + 1
	}
	lt := leading.Tick()
	if eg.leadTick == 0 {
		// A new client: nothing older than now is news.
		eg.leadTick, eg.confTick = lt, last.Tick()
	}
	for t := from(eg.leadTick, lt); t <= lt; t++ {
		evs, ok := leading.EventsOf(t)
		if !ok {
			continue
		}
		for _, e := range evs {
			if !relevant(e) {
				continue
			}
			eg.nextID++
			eg.tentative = append(eg.tentative, sentEvent{eg.nextID, e})
			u.Events = append(u.Events, eventNote(eg.nextID, e, true))
		}
	}
	eg.leadTick = max(eg.leadTick, lt)
	ct := last.Tick()
	for t := from(eg.confTick, ct); t <= ct; t++ {
		evs, ok := last.EventsOf(t)
		if !ok {
			continue
		}
		for _, e := range evs {
			matched := false
			for i, te := range eg.tentative {
				if te.ev == e {
					u.Confirmed = append(u.Confirmed, te.id)
					eg.tentative = append(eg.tentative[:i], eg.tentative[i+1:]...)
					matched = true
					break
				}
			}
			if !matched && relevant(e) {
				eg.nextID++
				u.Events = append(u.Events, eventNote(eg.nextID, e, false))
			}
		}
	}
	if ct > eg.confTick {
		eg.confTick = ct
	}
	kept := eg.tentative[:0]
	for _, te := range eg.tentative {
		if te.ev.Tick <= eg.confTick {
			u.Retracted = append(u.Retracted, te.id)
			continue
		}
		kept = append(kept, te)
	}
	eg.tentative = kept
	if n := len(eg.tentative); n > maxTentative {
		eg.tentative = append(eg.tentative[:0], eg.tentative[n-maxTentative:]...)
	}
}

func eventNote(id uint64, e game.Event, tentative bool) *mirrorpb.EventNote {
	return &mirrorpb.EventNote{
		Id: id, Tick: e.Tick, Kind: uint32(e.Kind), Player: string(e.Player), Other: string(e.Other),
		Amount: e.Amount, Tentative: tentative,
	}
}

func playerState(p game.Player) *mirrorpb.PlayerState {
	return &mirrorpb.PlayerState{
		Id: string(p.ID), Name: p.Name, X: p.Pos.X, Y: p.Pos.Y, Vx: p.Vel.X, Vy: p.Vel.Y,
		Health: p.Health, Hunger: p.Hunger, Score: p.Score, Skill: p.Skill, Alive: p.Alive,
	}
}

// status is what the page shows about this mirror.
func (s *Server) status() *mirrorpb.MirrorStatus {
	st := &mirrorpb.MirrorStatus{
		Mirror: uint32(s.id), Authority: s.authority,
		Rollbacks: s.tssm.Rollbacks.Load(), LeadingRollbacks: s.m.leadingRollbacks.Load(),
		CheckpointTick: s.cps.lastCompared, Agreed: s.m.checkpointsAgreed.Load(), Mismatched: s.m.checkpointsMismatched.Load(),
		Resyncs: s.m.resyncs.Load(), TooLate: s.tssm.TooLate.Load(),
	}
	st.Authority = uint32(s.holderID())
	s.member.crimp(func(n *crimp.Node) {
		for _, id := range n.Members() {
			st.Members = append(st.Members, uint32(id))
		}
	})
	for _, p := range s.skew.estimates() {
		if abs64(int64(p.Offset)) > abs64(st.MaxSkewNs) {
			st.MaxSkewNs = int64(p.Offset)
		}
	}
	for _, d := range s.sync.Config().Delays {
		st.DelaysNs = append(st.DelaysNs, int64(d))
	}
	s.eventStatus(st)
	return st
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
