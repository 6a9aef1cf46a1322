package mirror

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/vfc/vfcworld"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// EgressMode selects what each client is sent every frame.
type EgressMode uint8

const (
	// EgressVFC sends what vector-field consistency (game/vfc, over the
	// leading world: vfcworld) says each client needs this frame: every
	// change of the player itself, nearby players when the client's dead
	// reckoning of them drifts past its zone's bound, far ones and objects
	// at the outer zones' rates; the client keeps and dead-reckons the
	// rest (Welcome.reckon_ticks).
	EgressVFC EgressMode = iota
	// EgressArea sends every player of the client's Interest area and the
	// area's objects that changed, every frame.
	EgressArea
	// EgressAll sends every player and every object of the world every
	// frame: the baseline benches compare with.
	EgressAll
)

// ParseEgressMode reads "vfc", "area" or "all".
func ParseEgressMode(s string) (EgressMode, error) {
	switch s {
	case "vfc":
		return EgressVFC, nil
	case "area":
		return EgressArea, nil
	case "all":
		return EgressAll, nil
	}
	return 0, fmt.Errorf("egress %q: want vfc, area or all", s)
}

func (m EgressMode) String() string {
	switch m {
	case EgressVFC:
		return "vfc"
	case EgressArea:
		return "area"
	case EgressAll:
		return "all"
	}
	return fmt.Sprintf("egress(%d)", uint8(m))
}

func (c Config) validateEgress() error {
	if c.Egress > EgressAll {
		return fmt.Errorf("egress mode %d unknown", c.Egress)
	}
	if c.Egress != EgressVFC {
		return nil
	}
	if err := c.Consistency.Validate(); err != nil {
		return fmt.Errorf("consistency: %w", err)
	}
	if c.Consistency.ReckonTicks < 1 || c.Consistency.ReckonTicks > maxReckonTicks {
		// 0 tells clients "whole areas, no reckoning" on the wire.
		return fmt.Errorf("consistency: reckoning of %d ticks outside [1, %d]", c.Consistency.ReckonTicks, maxReckonTicks)
	}
	return nil
}

// maxReckonTicks bounds how long clients dead-reckon a silent player.
const maxReckonTicks = 3600

// Area is what one client is sent of the leading state.
type Area struct {
	Players []game.Player // the other players it sees
	Objects []game.ObjectEntry
}

// Interest picks a client's area from the leading state's world; self is
// its player (EgressArea).
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

// everything is EgressAll's area: the whole world.
func everything(w *game.World, self game.Player) Area {
	var a Area
	for _, p := range w.Players() {
		if p.ID != self.ID {
			a.Players = append(a.Players, p)
		}
	}
	for y := range w.Config().RegionsY {
		for x := range w.Config().RegionsX {
			a.Objects = append(a.Objects, w.Objects(game.RegionCoord{X: x, Y: y})...)
		}
	}
	return a
}

// nearby is the players whose events concern a client: itself and those
// in the regions its page draws.
func nearby(w *game.World, self game.Player) map[game.PlayerID]bool {
	near := map[game.RegionCoord]bool{}
	for _, rc := range w.Neighbours(w.RegionOf(self.Pos)) {
		near[rc] = true
	}
	seen := map[game.PlayerID]bool{self.ID: true}
	for _, p := range w.Players() {
		if near[w.RegionOf(p.Pos)] {
			seen[p.ID] = true
		}
	}
	return seen
}

// vfcEgress is the mirror's VFC filter over its leading world and the
// clients that have a view in it.
type vfcEgress struct {
	filter *vfcworld.Filter
	tick   uint64 // the leading tick of the last frame
	views  map[game.PlayerID]clientView
	sends  []vfcworld.State
	watch  func(EgressFrame)
	failed bool // the last frame failed: send only each client's own player
}

// clientView is the filter's view of one session's client.
type clientView struct {
	session uint64
	// ready: the view took part in this frame's round (a view added
	// after it gets its first sends in the next).
	ready bool
}

// EgressFrame is what a watcher (Server.WatchEgress) sees of each frame:
// the leading world the updates were cut from, after they were sent.
type EgressFrame struct {
	Tick  uint64
	World *game.World
}

// WatchEgress calls f, under the server's lock, after every egress frame
// (benches measure staleness with it; f must not keep World).
func (s *Server) WatchEgress(f func(EgressFrame)) {
	s.locked(func() { s.vfcState().watch = f })
}

func (s *Server) vfcState() *vfcEgress {
	if s.vfc == nil {
		s.vfc = &vfcEgress{views: map[game.PlayerID]clientView{}}
	}
	return s.vfc
}

// vfcFrame runs VFC's round for the leading world lw: views follow the
// playing sessions (a view whose player the filter has not seen yet waits
// a frame), then the filter observes lw.
func (s *Server) vfcFrame(lw *game.World, playing []*session) {
	v := s.vfcState()
	if v.filter != nil && lw.Tick() < v.tick {
		// A resync put the leading state behind the filter's clock: start
		// over (every client gets everything again).
		v.filter = nil
	}
	if v.filter == nil {
		f, err := vfcworld.New(lw, s.cfg.Consistency)
		if err != nil {
			s.vfcFailed(v, err)
			return
		}
		v.filter = f
		clear(v.views)
	}
	want := make(map[game.PlayerID]uint64, len(playing))
	for _, sess := range playing {
		want[sess.player] = sess.id
	}
	for _, id := range slices.Sorted(maps.Keys(v.views)) {
		if sid, ok := want[id]; !ok || sid != v.views[id].session {
			_ = v.filter.RemoveClient(id)
			delete(v.views, id)
		} else {
			v.views[id] = clientView{session: sid, ready: true}
		}
	}
	s.vfcAddViews(playing, true)
	if err := v.filter.Frame(lw); err != nil {
		v.filter = nil
		s.vfcFailed(v, err)
		return
	}
	v.tick, v.failed = lw.Tick(), false
	// Players the filter saw for the first time get their views now and
	// everything in the next frame.
	s.vfcAddViews(playing, false)
}

// vfcAddViews gives a view to every playing session whose player the
// filter knows; ready says whether this frame's round is still to come.
func (s *Server) vfcAddViews(playing []*session, ready bool) {
	v := s.vfc
	for _, sess := range playing {
		if _, ok := v.views[sess.player]; ok {
			continue
		}
		if v.filter.AddClient(sess.player) == nil {
			v.views[sess.player] = clientView{session: sess.id, ready: ready}
		}
	}
}

func (s *Server) vfcFailed(v *vfcEgress, err error) {
	if !v.failed {
		s.log.Error("vfc egress failed; clients get only their own player until it recovers", "err", err)
	}
	v.failed = true
	s.m.vfcFailures.Add(1)
}

// vfcUpdate fills u with what VFC sends the client of sess this frame. It
// returns false for a client whose view is new, which gets its first
// update, with everything, in the next frame; while the filter has failed
// every client gets its own player alone.
func (s *Server) vfcUpdate(sess *session, lw *game.World, u *mirrorpb.Update) bool {
	v := s.vfc
	if v == nil || v.failed || v.filter == nil {
		return true
	}
	if cv, ok := v.views[sess.player]; !ok || cv.session != sess.id || !cv.ready {
		return false
	}
	v.sends = v.filter.AppendSends(sess.player, v.sends[:0])
	for _, st := range v.sends {
		switch {
		case st.Player == sess.player:
			// Self goes out whole in every update.
		case st.Player != "":
			if p, ok := lw.Player(st.Player); ok {
				u.Players = append(u.Players, playerState(p))
			}
		default:
			u.Objects = append(u.Objects, objectState(game.ObjectEntry{
				ID: st.Object, VersionedObject: st.Value, Pos: lw.ObjectPos(st.Object, st.Value.Object),
			}))
		}
	}
	for _, id := range v.filter.Drops(sess.player) {
		u.Gone = append(u.Gone, string(id))
	}
	return true
}

// vfcResend makes the client of sess get everything again next frame: it
// missed an update, so VFC's record of what it holds is wrong.
func (s *Server) vfcResend(sess *session) {
	if v := s.vfc; v != nil && v.filter != nil && v.views[sess.player].session == sess.id {
		_ = v.filter.RemoveClient(sess.player)
		delete(v.views, sess.player)
	}
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
	var playing []*session
	for _, sess := range s.sessionList() {
		if sess.state == sessionPlaying {
			playing = append(playing, sess)
		}
	}
	if s.cfg.Egress == EgressVFC {
		s.vfcFrame(lw, playing)
	}
	var status *mirrorpb.MirrorStatus
	for _, sess := range playing {
		self, ok := lw.Player(sess.player)
		if !ok {
			continue
		}
		eg := &sess.egress
		u := &mirrorpb.Update{LeadingTick: leading.Tick(), ConfirmedTick: last.Tick(), Self: playerState(self), InputSeq: sess.lastSeq}
		var seen map[game.PlayerID]bool
		switch s.cfg.Egress {
		case EgressVFC:
			if !s.vfcUpdate(sess, lw, u) {
				continue
			}
			seen = nearby(lw, self)
		case EgressArea:
			seen = map[game.PlayerID]bool{self.ID: true}
			s.areaUpdate(eg, s.cfg.Interest(lw, self), u, seen)
		case EgressAll:
			seen = nearby(lw, self)
			eg.objects = nil // every object, every frame
			s.areaUpdate(eg, everything(lw, self), u, map[game.PlayerID]bool{})
		}
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
			// The client missed changes: send them all again.
			eg.objects = nil
			s.vfcResend(sess)
			continue
		}
		s.m.updatesSent.Add(1)
		s.m.updateBytes.Add(uint64(len(frame)))
	}
	if v := s.vfc; v != nil && v.watch != nil {
		v.watch(EgressFrame{Tick: leading.Tick(), World: lw})
	}
}

// areaUpdate fills u with area: its players whole, its objects the client
// does not have at their version. seen gains the area's players.
func (s *Server) areaUpdate(eg *egressState, area Area, u *mirrorpb.Update, seen map[game.PlayerID]bool) {
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
		u.Objects = append(u.Objects, objectState(o))
	}
	eg.objects = fresh
}

func objectState(o game.ObjectEntry) *mirrorpb.ObjectState {
	return &mirrorpb.ObjectState{
		RegionX: uint32(o.ID.Region.X), RegionY: uint32(o.ID.Region.Y), Slot: uint32(o.ID.Slot),
		Kind: uint32(o.Object.Kind), X: o.Pos.X, Y: o.Pos.Y,
		Amount: uint32(o.Object.Amount), Max: uint32(o.Object.Max), Version: o.Version,
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
