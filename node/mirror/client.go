package mirror

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// ClientCore is the client side of the mirror protocol without a
// transport: Handle takes each frame from the mirror and returns the
// frames to answer with; Input encodes the next input frame. It keeps the
// client's view of the game: the player, the others in its area, the
// objects it was sent, the events and the mirror's status. The WebSocket
// client (Client) and the in-process one (LocalClient) drive it. Not safe
// for concurrent use.
type ClientCore struct {
	key   crypto.PrivKey
	token string

	phase   clientPhase
	seq     uint64
	recent  []*mirrorpb.Input // the last inputs sent, newest first
	welcome *mirrorpb.Welcome
	cfg     game.Config
	view    ClientView
	objects map[game.ObjectID]ClientObject
	held    map[game.PlayerID]HeldPlayer // VFC deltas: every player sent (vfcclient.go)
	events  map[uint64]int               // tentative event id -> index in view.Events
	err     *mirrorpb.Error
}

type clientPhase uint8

const (
	phaseChallenge clientPhase = iota
	phaseWelcome
	phasePlaying
	phaseClosed
)

// maxClientEvents bounds the events a client view keeps.
const maxClientEvents = 128

// ClientView is what a client knows of the game.
type ClientView struct {
	Player game.PlayerID
	Name   string
	Mirror uint32
	Config game.Config
	// Restored says the character came back as saved (or was still in
	// the world), not fresh.
	Restored                   bool
	LeadingTick, ConfirmedTick uint64
	InputSeq                   uint64 // the newest input the mirror took
	Self                       game.Player
	HasSelf                    bool
	Players                    []game.Player
	Objects                    []ClientObject
	Events                     []ClientEvent // newest last
	Status                     MirrorStatus
	Updates                    uint64
	UpdatedAt                  time.Time
}

// ClientObject is an object as the client was last told.
type ClientObject struct {
	ID      game.ObjectID
	Kind    game.ObjectKind
	Pos     game.Vec
	Amount  int
	Max     int
	Version uint64
}

// ClientEvent is an event note; Tentative until Confirmed or Retracted.
type ClientEvent struct {
	ID                   uint64
	Event                game.Event
	Tentative, Retracted bool
}

// MirrorStatus is the mirror's status as the client last heard it.
type MirrorStatus struct {
	Mirror, Authority  uint32
	Members            []uint32
	Rollbacks          uint64
	LeadingRollbacks   uint64
	CheckpointTick     uint64
	Agreed, Mismatched uint64
	Resyncs, TooLate   uint64
	MaxSkew            time.Duration
	Delays             []time.Duration
	Agreeing           bool // the latest comparison found no new mismatch
	// The event protocol's ("event"; empty under the command protocol):
	// decisions the mirror took in, of them decided late, actions never
	// decided, guesses taken back.
	Protocol                                    string
	Decided, DecidedLate, Undecided, Reconciled uint64
	lastMismatchedSeen                          uint64
	lastCheckpointChange                        uint64
}

// ErrClosedByMirror wraps the fatal error a mirror ended the session with.
var ErrClosedByMirror = errors.New("mirror closed the session")

// MirrorError is a fatal error frame from the mirror.
type MirrorError struct {
	Code, Message string
	MovedTo       uint32
}

func (e *MirrorError) Error() string {
	if e.MovedTo != 0 {
		return fmt.Sprintf("mirror: %s: %s (the player is on mirror %d)", e.Code, e.Message, e.MovedTo)
	}
	return fmt.Sprintf("mirror: %s: %s", e.Code, e.Message)
}

func (e *MirrorError) Unwrap() error { return ErrClosedByMirror }

// ElsewhereNow reports whether the mirror turned the client away for
// reasons of its own, so that another mirror of the group may take it at
// once: it is not ready (joining, resyncing, its clock off or its state
// lost), or it was dropped from the group and closes its sessions to join
// again.
func (e *MirrorError) ElsewhereNow() bool {
	return e.Code == refusedNotReady || e.Code == closedMirrorDropped
}

// NewClientCore starts a client that logs in with tok, proving it holds
// key (the libp2p key the token was issued to).
func NewClientCore(key crypto.PrivKey, tok string) *ClientCore {
	return &ClientCore{key: key, token: tok, objects: map[game.ObjectID]ClientObject{}, events: map[uint64]int{}}
}

// Playing reports whether the mirror welcomed the client.
func (c *ClientCore) Playing() bool { return c.phase == phasePlaying }

// Handle takes one frame from the mirror. It returns frames to send back
// (the hello), or an error: a protocol violation, or a *MirrorError when
// the mirror ended the session.
func (c *ClientCore) Handle(frame []byte, now time.Time) ([][]byte, error) {
	f, err := DecodeServerFrame(frame)
	if err != nil {
		return nil, err
	}
	switch body := f.Body.(type) {
	case *mirrorpb.ServerFrame_Challenge:
		if c.phase != phaseChallenge {
			return nil, errors.New("challenge out of order")
		}
		sig, err := c.key.Sign(HelloMessage(body.Challenge.Nonce, body.Challenge.Mirror))
		if err != nil {
			return nil, fmt.Errorf("sign hello: %w", err)
		}
		pub, err := crypto.MarshalPublicKey(c.key.GetPublic())
		if err != nil {
			return nil, err
		}
		c.phase = phaseWelcome
		return [][]byte{encode(&mirrorpb.ClientFrame{Body: &mirrorpb.ClientFrame_Hello{Hello: &mirrorpb.Hello{
			Version: ProtocolVersion, Token: c.token, PublicKey: pub, Signature: sig,
		}}})}, nil
	case *mirrorpb.ServerFrame_Welcome:
		if c.phase != phaseWelcome {
			return nil, errors.New("welcome out of order")
		}
		cfg, err := game.UnmarshalConfig(body.Welcome.WorldConfig)
		if err != nil {
			return nil, err
		}
		c.welcome, c.cfg, c.phase = body.Welcome, cfg, phasePlaying
		c.view.Player, c.view.Name, c.view.Mirror = game.PlayerID(body.Welcome.Player), body.Welcome.Name, body.Welcome.Mirror
		c.view.Config, c.view.Restored = cfg, body.Welcome.Restored
	case *mirrorpb.ServerFrame_Update:
		if c.phase != phasePlaying {
			return nil, errors.New("update before welcome")
		}
		c.update(body.Update, now)
	case *mirrorpb.ServerFrame_Error:
		e := body.Error
		if e.Fatal {
			c.phase = phaseClosed
			return nil, &MirrorError{Code: e.Code, Message: e.Message, MovedTo: e.MovedTo}
		}
		c.err = e
	}
	return nil, nil
}

func (c *ClientCore) update(u *mirrorpb.Update, now time.Time) {
	v := &c.view
	v.LeadingTick, v.ConfirmedTick, v.InputSeq = u.LeadingTick, u.ConfirmedTick, u.InputSeq
	v.Self, v.HasSelf = playerOf(u.Self), true
	if c.welcome.ReckonTicks > 0 {
		c.mergeDelta(u)
	} else {
		v.Players = v.Players[:0]
		for _, p := range u.Players {
			v.Players = append(v.Players, playerOf(p))
		}
	}
	if len(c.objects) > maxUpdateObjects {
		clear(c.objects)
	}
	for _, o := range u.Objects {
		id := game.ObjectID{Region: game.RegionCoord{X: int(o.RegionX), Y: int(o.RegionY)}, Slot: uint16(o.Slot)}
		c.objects[id] = ClientObject{ID: id, Kind: game.ObjectKind(o.Kind), Pos: game.Vec{X: o.X, Y: o.Y}, Amount: int(o.Amount), Max: int(o.Max), Version: o.Version}
	}
	for _, e := range u.Events {
		ev := game.Event{Tick: e.Tick, Kind: game.EventKind(e.Kind), Player: game.PlayerID(e.Player), Other: game.PlayerID(e.Other), Amount: e.Amount}
		v.Events = append(v.Events, ClientEvent{ID: e.Id, Event: ev, Tentative: e.Tentative})
	}
	mark := func(ids []uint64, retract bool) {
		for _, id := range ids {
			for i := len(v.Events) - 1; i >= 0; i-- {
				if v.Events[i].ID == id {
					v.Events[i].Tentative = false
					v.Events[i].Retracted = retract
					break
				}
			}
		}
	}
	mark(u.Confirmed, false)
	mark(u.Retracted, true)
	if n := len(v.Events); n > maxClientEvents {
		v.Events = append(v.Events[:0], v.Events[n-maxClientEvents:]...)
	}
	if st := u.Status; st != nil {
		prev := v.Status
		v.Status = MirrorStatus{
			Mirror: st.Mirror, Authority: st.Authority, Members: slices.Clone(st.Members),
			Rollbacks: st.Rollbacks, LeadingRollbacks: st.LeadingRollbacks, CheckpointTick: st.CheckpointTick,
			Agreed: st.Agreed, Mismatched: st.Mismatched, Resyncs: st.Resyncs, TooLate: st.TooLate,
			MaxSkew: time.Duration(st.MaxSkewNs), Protocol: st.Protocol,
			Decided: st.Decided, DecidedLate: st.DecidedLate, Undecided: st.Undecided, Reconciled: st.Reconciled,
		}
		for _, d := range st.DelaysNs {
			v.Status.Delays = append(v.Status.Delays, time.Duration(d))
		}
		// Agreeing: no mismatch since the last status, or comparisons went
		// on without one since.
		v.Status.Agreeing = st.Mismatched == prev.Mismatched || (st.Agreed > prev.Agreed && st.Mismatched == prev.lastMismatchedSeen)
		v.Status.lastMismatchedSeen = st.Mismatched
	}
	v.Updates++
	v.UpdatedAt = now
}

func playerOf(p *mirrorpb.PlayerState) game.Player {
	return game.Player{
		ID: game.PlayerID(p.Id), Name: p.Name, Pos: game.Vec{X: p.X, Y: p.Y}, Vel: game.Vec{X: p.Vx, Y: p.Vy},
		Health: p.Health, Hunger: p.Hunger, Score: p.Score, Skill: p.Skill, Alive: p.Alive,
	}
}

// View returns a copy of the client's view.
func (c *ClientCore) View() ClientView {
	v := c.view
	v.Players = slices.Clone(v.Players)
	v.Events = slices.Clone(v.Events)
	v.Objects = make([]ClientObject, 0, len(c.objects))
	for _, o := range c.objects {
		v.Objects = append(v.Objects, o)
	}
	slices.SortFunc(v.Objects, func(a, b ClientObject) int {
		if a.ID.Region != b.ID.Region {
			if a.ID.Region.Y != b.ID.Region.Y {
				return a.ID.Region.Y - b.ID.Region.Y
			}
			return a.ID.Region.X - b.ID.Region.X
		}
		return int(a.ID.Slot) - int(b.ID.Slot)
	})
	return v
}

// Input encodes the next input frame: the newest input and those of the
// last three the mirror has not acknowledged. in.Player names the
// session's player, or "" to leave it out.
func (c *ClientCore) Input(in game.Input, respawnHome bool) []byte {
	c.seq++
	x := &mirrorpb.Input{
		Seq: c.seq, MoveX: int32(in.MoveX), MoveY: int32(in.MoveY), Eat: in.Eat, PickUp: in.PickUp, Fight: in.Fight,
		Target: string(in.Target), Player: string(in.Player), RespawnHome: respawnHome,
	}
	// Repeat the earlier inputs the mirror has not acknowledged yet (its
	// updates carry the newest seq it took): on a lossless stream that is
	// usually none, after a stall up to three.
	f := &mirrorpb.InputFrame{Input: x}
	for _, r := range c.recent {
		if r.Seq > c.view.InputSeq {
			f.Previous = append(f.Previous, r)
		}
	}
	c.recent = append([]*mirrorpb.Input{x}, c.recent...)
	if len(c.recent) > MaxPreviousInputs {
		c.recent = c.recent[:MaxPreviousInputs]
	}
	return encode(&mirrorpb.ClientFrame{Body: &mirrorpb.ClientFrame_Input{Input: f}})
}

// Reauth encodes a token refresh.
func (c *ClientCore) Reauth(tok string) []byte {
	c.token = tok
	return encode(&mirrorpb.ClientFrame{Body: &mirrorpb.ClientFrame_Reauth{Reauth: &mirrorpb.Reauth{Token: tok}}})
}

// botSight is how far a bot looks (game.BotObserve's range).
const botSight = 8 * game.TileUnits

// Observation is what a bot sees in the view: the player, the nearest
// food and health pack with something left and the nearest other living
// player within sight.
func (c *ClientCore) Observation() (game.BotObservation, bool) {
	v := &c.view
	if !v.HasSelf {
		return game.BotObservation{}, false
	}
	obs := game.BotObservation{Tick: v.LeadingTick, Self: v.Self}
	limit := int64(botSight) * int64(botSight)
	bestFood, bestPack := int64(-1), int64(-1)
	var foodID, packID game.ObjectID
	for _, o := range c.objects {
		if o.Amount == 0 {
			continue
		}
		d := game.DistSq(v.Self.Pos, o.Pos)
		if d > limit {
			continue
		}
		// Ties go to the lower ID, so a bot decides alike however the
		// map is iterated.
		switch o.Kind {
		case game.ObjectFood:
			if bestFood < 0 || d < bestFood || d == bestFood && objectBefore(o.ID, foodID) {
				bestFood, foodID, obs.Food, obs.HasFood = d, o.ID, o.Pos, true
			}
		case game.ObjectHealthPack:
			if bestPack < 0 || d < bestPack || d == bestPack && objectBefore(o.ID, packID) {
				bestPack, packID, obs.Pack, obs.HasPack = d, o.ID, o.Pos, true
			}
		}
	}
	best := int64(-1)
	for _, p := range v.Players {
		if !p.Alive {
			continue
		}
		if d := game.DistSq(v.Self.Pos, p.Pos); d <= limit && (best < 0 || d < best) {
			best, obs.Opponent, obs.HasOpponent = d, p.Pos, true
		}
	}
	return obs, true
}

func objectBefore(a, b game.ObjectID) bool {
	if a.Region.Y != b.Region.Y {
		return a.Region.Y < b.Region.Y
	}
	if a.Region.X != b.Region.X {
		return a.Region.X < b.Region.X
	}
	return a.Slot < b.Slot
}
