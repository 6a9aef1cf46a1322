package sim

import (
	"context"
	"fmt"
	"strings"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/position"
)

// Play bots (Config.PlayBots): every player is game/play's runtime, the
// peer a player runs, driven by a game.Bot with SimMud's pace instead of a
// browser. The simulator measures it from outside: position deliveries
// from the position topics' messages as gossipsub delivers them (play's
// position service offers no delivery hook), eats and fights from play's
// metrics, roles by asking the region service (play's offers no role
// hook, so coordinator changes by cause are not told apart).

// playBot puts game/play's runtime on p's node, driven by a game.Bot: the
// region services, the position service, eating, fighting, chat cards, as
// a player's peer runs them. Its position deliveries are measured from the
// position topics' messages as gossipsub delivers them (wireCounter), its
// eats and fights from play's metrics.
func (r *run) playBot(ctx context.Context, p *player, start regions.Coord) (*player, error) {
	self := p.id
	p.wire.positions = func(msg *pubsub.Message) { r.positionMessage(p, msg) }
	sr := game.RegionCoord{X: start.X, Y: start.Y}
	pl, err := play.New(ctx, p.node, play.Config{
		World: r.pc.World, Game: r.game, Bot: true, BotSeed: r.cfg.Seed*2_000_003 + uint64(p.idx), StartRegion: &sr,
		PositionInterval: r.cfg.Interval, Aggregate: r.cfg.Aggregate, Logger: r.log, Registerer: p.reg,
	})
	if err != nil {
		_ = p.node.Close()
		return nil, fmt.Errorf("player %d (%s) runtime: %w", p.idx, self, err)
	}
	p.peer, p.rsvc = pl, pl.Regions()
	return p, nil
}

// positionMessage measures the updates of a position message gossipsub
// delivered to p (a play bot): the delay of each update new to p, its
// link's latency, and the updates p missed while following their sender.
func (r *run) positionMessage(p *player, msg *pubsub.Message) {
	if !strings.HasSuffix(msg.GetTopic(), "/pos") {
		return
	}
	var env position.Envelope
	if proto.Unmarshal(msg.GetData(), &env) != nil {
		return
	}
	now := time.Now()
	updates, batched := []*position.Update{env.GetUpdate()}, false
	if b := env.GetBatch(); b != nil {
		updates, batched = b.GetUpdates(), true
	}
	for _, u := range updates {
		if u == nil || peer.ID(u.GetPlayer()) == p.id {
			continue
		}
		sender := peer.ID(u.GetPlayer())
		d := position.Delivery{Player: sender, Seq: u.GetSeq(), Sent: time.UnixMicro(u.GetSentUnixMicro()), Arrived: now, Batched: batched}
		if p.follow.delivered(d) {
			r.rec.record(now.Sub(d.Sent), r.latency(sender, p.id), batched)
		}
	}
}

// playActions are the play bots' eats, pick-ups and fights in the window,
// as play's metrics count them: "eat/committed", "fight as attacker/fought"
// and so on.
func playActions(window []windowEntry) map[string]uint64 {
	out := map[string]uint64{}
	for _, e := range window {
		for k, v := range e.last.play {
			if d := v - e.first.play[k]; d > 0 {
				out[k] += d
			}
		}
	}
	return out
}

// sampleRoles tells the role log what each play bot coordinates or
// replicates now (at the window's edges).
func (r *run) sampleRoles(players []*player) {
	all := r.grid.Neighbourhood(regions.Coord{}, max(r.grid.Width, r.grid.Height))
	for _, p := range players {
		for _, c := range all {
			if role := p.rsvc.Role(c); role != regions.RoleNone {
				r.roles.sample(p, role)
			}
		}
	}
}

// PlacementCheck compares who coordinates each region at the end of the
// run with placement over the players online.
type PlacementCheck struct {
	// Regions is how many regions some peer coordinates; AsPlaced those
	// coordinated by exactly the peer placement names; Split those more
	// than one peer claims.
	Regions  int `json:"regions_coordinated"`
	AsPlaced int `json:"as_placed"`
	Split    int `json:"claimed_by_several"`
}

// placementOfAll checks every region of the world that has a coordinator.
func (r *run) placementOfAll() *PlacementCheck {
	out := &PlacementCheck{}
	online := r.online()
	for _, c := range r.grid.Neighbourhood(regions.Coord{}, max(r.grid.Width, r.grid.Height)) {
		var claimants []peer.ID
		for _, p := range online {
			if p.rsvc.Role(c) == regions.RoleCoordinator {
				claimants = append(claimants, p.id)
			}
		}
		if len(claimants) == 0 {
			continue
		}
		out.Regions++
		if len(claimants) > 1 {
			out.Split++
		}
		if placed, _ := r.place.placed(c); len(claimants) == 1 && claimants[0] == placed {
			out.AsPlaced++
		}
	}
	return out
}
