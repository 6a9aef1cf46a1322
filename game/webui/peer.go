package webui

import (
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play"
)

// PeerSession is the page's Session over a P2P player's runtime: it turns
// the runtime's View into the page's and the page's controls into the
// game's input. The runtime knows nothing of the page; the dependency
// points from here to it.
func PeerSession(p *play.Peer) Session { return peerSession{p} }

type peerSession struct{ p *play.Peer }

func (s peerSession) Snapshot() View {
	pv := s.p.Snapshot()
	v := View{
		Tick:     pv.Tick,
		Self:     PlayerView(pv.Self),
		World:    WorldInfoOf(pv.World),
		Messages: make([]Message, len(pv.Messages)),
		Status:   Status{Mode: pv.Status.Mode, Peers: pv.Status.Peers, Region: pv.Status.Region, Coordinator: pv.Status.Coordinator, LatencyMs: pv.Status.LatencyMs},
	}
	for _, o := range pv.Players {
		v.Players = append(v.Players, PlayerView(o))
	}
	for _, e := range pv.Objects {
		v.Objects = append(v.Objects, ObjectViewOf(e))
	}
	for _, rc := range pv.Regions {
		v.Regions = append(v.Regions, RegionRef{X: rc.X, Y: rc.Y, Revision: 1})
	}
	for i, m := range pv.Messages {
		v.Messages[i] = Message(m)
	}
	return v
}

func (s peerSession) Map(rc game.RegionCoord) (MapView, bool) {
	m := s.p.Map(rc)
	if m == nil {
		return MapView{}, false
	}
	return NewMapView(m, 1), true
}

func (s peerSession) Input(c Control) error {
	if err := c.Validate(); err != nil {
		return err
	}
	return s.p.Input(c.GameInput(s.p.ID()))
}

func (s peerSession) Chat(text, to string) error { return s.p.Chat(text, to) }
