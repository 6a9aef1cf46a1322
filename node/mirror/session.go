package mirror

import (
	"context"
	crand "crypto/rand"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// Link carries frames from the server to one client. Send must not block:
// it queues the frame, or reports false when the client's queue is full
// (the frame is dropped). Close ends the connection; reason is the code of
// the refusal that ended it ("" for a normal end).
type Link interface {
	Send(frame []byte) bool
	Close(reason string)
}

// Conn is the server's side of one client connection: the transport hands
// it every frame the client sends (Receive) and says when the connection
// is gone (Closed).
type Conn struct {
	s  *Server
	id uint64
}

// Frame rate limit per session: a client sends one input per tick, so a
// burst of three seconds' worth and twice the tick rate sustained is
// generous.
const (
	rateBurst     = 90
	ratePerSecond = 60
)

type sessionState uint8

const (
	sessionHello   sessionState = iota + 1 // waiting for the hello
	sessionLoading                         // token checked, character loading
	sessionPlaying                         // joined
)

// session is one client of this mirror.
type session struct {
	id    uint64
	link  Link
	state sessionState
	nonce []byte
	hello interface{ Stop() bool }
	bad   int

	tokens float64
	filled time.Time

	player  game.PlayerID
	name    string
	peer    peer.ID
	account string
	tok     string
	expiry  time.Time
	version int64
	joinTik uint64 // the tick of the join command
	lastSeq uint64
	sent    uint64 // the tick of the last input sent
	held    *mirrorpb.Input

	egress egressState
}

// Attach registers a new client connection and sends it the challenge.
// The link receives the server's frames from now on.
func (s *Server) Attach(link Link) *Conn {
	var c *Conn
	s.locked(func() {
		s.nextSession++
		c = &Conn{s: s, id: s.nextSession}
		if s.closed || len(s.sessions) >= s.cfg.MaxSessions {
			s.m.refuse(refusedSessionLimit)
			link.Send(errorFrame(refusedSessionLimit, "this mirror is full or closing", true, 0))
			link.Close(refusedSessionLimit)
			return
		}
		if !s.m.ready.Load() {
			s.m.refuse(refusedNotReady)
			link.Send(errorFrame(refusedNotReady, "this mirror is not ready (joining, resyncing or its clock is off)", true, 0))
			link.Close(refusedNotReady)
			return
		}
		nonce := make([]byte, 32)
		_, _ = crand.Read(nonce)
		now := s.clock.Now()
		sess := &session{id: c.id, link: link, state: sessionHello, nonce: nonce, tokens: rateBurst, filled: now}
		s.sessions[sess.id] = sess
		s.m.sessions.Add(1)
		s.m.sessionsOpened.Add(1)
		sess.hello = s.clock.AfterFunc(s.cfg.HelloTimeout, func() {
			s.locked(func() {
				if cur := s.sessions[sess.id]; cur == sess && sess.state == sessionHello {
					s.m.refuse(refusedHelloTimeout)
					s.closeSession(sess, refusedHelloTimeout, "no hello in time", false)
				}
			})
		})
		link.Send(encode(&mirrorpb.ServerFrame{Body: &mirrorpb.ServerFrame_Challenge{Challenge: &mirrorpb.Challenge{
			Version: ProtocolVersion, Nonce: nonce, Mirror: uint32(s.id),
		}}}))
	})
	return c
}

// Receive handles one frame from the client.
func (c *Conn) Receive(frame []byte) {
	s := c.s
	s.locked(func() {
		sess := s.sessions[c.id]
		if sess == nil || s.closed {
			return
		}
		now := s.clock.Now()
		if len(frame) > MaxClientFrame {
			s.m.refuse(refusedOversized)
			s.closeSession(sess, refusedOversized, "frame too large", true)
			return
		}
		sess.tokens = min(rateBurst, sess.tokens+now.Sub(sess.filled).Seconds()*ratePerSecond)
		sess.filled = now
		if sess.tokens < 1 {
			s.refuseFrame(sess, refusedRateLimited, "too many frames")
			return
		}
		sess.tokens--
		f, err := DecodeClientFrame(frame)
		if err != nil {
			s.refuseFrame(sess, refusedBadFrame, err.Error())
			return
		}
		switch body := f.Body.(type) {
		case *mirrorpb.ClientFrame_Hello:
			if sess.state != sessionHello {
				s.refuseFrame(sess, refusedOutOfOrder, "hello after hello")
				return
			}
			s.hello(sess, body.Hello, now)
		case *mirrorpb.ClientFrame_Input:
			if sess.state != sessionPlaying {
				s.refuseFrame(sess, refusedOutOfOrder, "input before welcome")
				return
			}
			s.m.inputsReceived.Add(1)
			s.input(sess, body.Input, now)
		case *mirrorpb.ClientFrame_Reauth:
			if sess.state == sessionHello {
				s.refuseFrame(sess, refusedOutOfOrder, "reauth before hello")
				return
			}
			s.reauth(sess, body.Reauth.Token, now)
		}
	})
}

// Closed tells the server the connection is gone: the session's player
// leaves the world (its character saved from the last trailing state).
func (c *Conn) Closed() {
	c.s.locked(func() {
		if sess := c.s.sessions[c.id]; sess != nil {
			c.s.closeSession(sess, "", "", true)
		}
	})
}

func errorFrame(code, msg string, fatal bool, movedTo uint32) []byte {
	return encode(&mirrorpb.ServerFrame{Body: &mirrorpb.ServerFrame_Error{Error: &mirrorpb.Error{
		Code: code, Message: msg, Fatal: fatal, MovedTo: movedTo,
	}}})
}

// refuseFrame counts a refused frame, tells the client, and ends the
// session after MaxBadFrames of them.
func (s *Server) refuseFrame(sess *session, reason, msg string) {
	s.m.refuse(reason)
	sess.bad++
	if sess.bad >= s.cfg.MaxBadFrames {
		s.closeSession(sess, reason, "too many refused frames: "+msg, true)
		return
	}
	sess.link.Send(errorFrame(reason, msg, false, 0))
}

// fail refuses a frame and ends the session at once.
func (s *Server) fail(sess *session, reason, msg string) {
	s.m.refuse(reason)
	s.closeSession(sess, reason, msg, true)
}

// hello checks the client's proof of key possession and its token; the
// session's player is the token's account.
func (s *Server) hello(sess *session, h *mirrorpb.Hello, now time.Time) {
	pk, err := crypto.UnmarshalPublicKey(h.PublicKey)
	if err != nil {
		s.fail(sess, refusedBadKey, "hello: public key: "+err.Error())
		return
	}
	if ok, err := pk.Verify(HelloMessage(sess.nonce, uint32(s.id)), h.Signature); err != nil || !ok {
		s.fail(sess, refusedBadSignature, "hello: the signature does not verify")
		return
	}
	pid, err := peer.IDFromPublicKey(pk)
	if err != nil {
		s.fail(sess, refusedBadKey, "hello: peer ID: "+err.Error())
		return
	}
	claims, err := token.Verify(s.cfg.AccountKey, h.Token, pid, now)
	if err != nil {
		s.fail(sess, refusedBadToken, "hello: "+err.Error())
		return
	}
	if sess.hello != nil {
		sess.hello.Stop()
	}
	sess.player, sess.peer, sess.account = game.PlayerID(claims.Account), pid, claims.Account
	sess.name = claims.Player
	if game.ValidateName(sess.name) != nil {
		sess.name = "player"
	}
	sess.tok, sess.expiry = h.Token, claims.Expiry
	if old := s.players[sess.player]; old != nil && old != sess {
		// One session per player: the newer one wins (the old one's
		// player does not leave; it stays in the world for the new one).
		s.closeSession(old, "replaced", "a newer session of this player took over", false)
	}
	s.players[sess.player] = sess
	sess.state = sessionLoading
	if p, ok := s.sync.Last().World().Player(sess.player); ok {
		// Still in the world (it was on a mirror that died, or it left a
		// moment ago and its leave is not final yet): its character is the
		// confirmed state's. If the player is still there when the join
		// runs, the join moves it here and the world keeps its own, newer
		// copy; if a leave ran first, the join restores this one.
		ch := game.CharacterOf(p)
		s.join(sess, &ch, 0, true, now)
		return
	}
	if _, ok := s.sync.Leading().World().Player(sess.player); ok {
		// Joined a moment ago (not confirmed yet): move it here.
		s.join(sess, nil, 0, true, now)
		return
	}
	tok, player := sess.tok, sess.player
	s.spawn(func() {
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		ch, version, err := s.cfg.Characters.Load(ctx, tok)
		cancel()
		s.locked(func() {
			if cur := s.sessions[sess.id]; cur != sess || s.closed || sess.player != player {
				return
			}
			if err != nil {
				s.log.Warn("loading a character failed", "player", player, "err", err)
				s.closeSession(sess, "account_error", "the account server did not give the character: "+err.Error(), false)
				return
			}
			var saved *game.Character
			if version > 0 {
				saved = &ch
			}
			s.join(sess, saved, version, version > 0, s.clock.Now())
		})
	})
}

// join brings the session's player into the world (or moves it here) and
// welcomes the client.
func (s *Server) join(sess *session, saved *game.Character, version int64, restored bool, now time.Time) {
	if s.sync == nil {
		s.closeSession(sess, refusedNotReady, "this mirror lost its state", false)
		return
	}
	cmd := Command{Command: s.stamp(now)}
	cmd.Op, cmd.Player, cmd.Name, cmd.Saved = game.CommandJoin, sess.player, sess.name, saved
	s.issue(cmd, now)
	sess.version = version
	sess.joinTik = s.sync.Config().TickOf(cmd.Stamp)
	sess.state = sessionPlaying
	cfg, _ := s.cfg.Game.MarshalBinary()
	sess.link.Send(encode(&mirrorpb.ServerFrame{Body: &mirrorpb.ServerFrame_Welcome{Welcome: &mirrorpb.Welcome{
		Player: string(sess.player), Name: sess.name, Mirror: uint32(s.id), WorldConfig: cfg,
		TickPeriodNs: int64(s.sync.Config().TickPeriod), Restored: restored, ReckonTicks: s.reckonTicks(),
	}}}))
	s.log.Info("player joined", "player", sess.player, "name", sess.name, "restored", restored)
}

// input takes a client's input frame: the newest input it has not seen
// wins, with the one-shot actions of any skipped ones; at most one input
// per tick goes out, stamped with this mirror's clock.
func (s *Server) input(sess *session, f *mirrorpb.InputFrame, now time.Time) {
	var newest *mirrorpb.Input
	merged := &mirrorpb.Input{}
	for _, in := range append([]*mirrorpb.Input{f.Input}, f.Previous...) {
		if in.Seq <= sess.lastSeq {
			continue
		}
		if in.Player != "" && game.PlayerID(in.Player) != sess.player {
			s.refuseFrame(sess, refusedWrongPlayer, "input for another player")
			return
		}
		if newest == nil || in.Seq > newest.Seq {
			newest = in
		}
		merged.Eat = merged.Eat || in.Eat
		merged.PickUp = merged.PickUp || in.PickUp
		merged.RespawnHome = merged.RespawnHome || in.RespawnHome
		if in.Fight {
			merged.Fight, merged.Target = true, in.Target
		}
	}
	if newest == nil {
		s.m.refuse(refusedDuplicateInput)
		return
	}
	sess.lastSeq = newest.Seq
	merged.Seq, merged.MoveX, merged.MoveY = newest.Seq, newest.MoveX, newest.MoveY
	if merged.RespawnHome {
		if p, ok := s.sync.Leading().World().Player(sess.player); ok && !p.Alive {
			cmd := Command{Command: s.stamp(now)}
			cmd.Op, cmd.Player = game.CommandRespawn, sess.player
			s.issue(cmd, now)
		}
	}
	if tick := s.sync.Config().TickOf(now.UnixNano()); tick != sess.sent {
		s.sendInput(sess, merged, now, tick)
		return
	}
	if sess.held != nil {
		s.m.refuse(refusedCoalesced)
		merged.Eat = merged.Eat || sess.held.Eat
		merged.PickUp = merged.PickUp || sess.held.PickUp
		if !merged.Fight && sess.held.Fight {
			merged.Fight, merged.Target = true, sess.held.Target
		}
	}
	sess.held = merged
}

func (s *Server) sendInput(sess *session, in *mirrorpb.Input, now time.Time, tick uint64) {
	if s.event() {
		s.eventInput(sess, in, now)
		sess.sent, sess.held = tick, nil
		return
	}
	cmd := Command{Command: s.stamp(now)}
	cmd.Op, cmd.Player, cmd.Input = game.CommandInput, sess.player, gameInput(in, sess.player)
	s.issue(cmd, now)
	sess.sent, sess.held = tick, nil
}

// flushHeld sends the inputs held back for the tick that just ended.
func (s *Server) flushHeld(now time.Time) {
	tick := s.sync.Config().TickOf(now.UnixNano())
	for _, sess := range s.sessionList() {
		if sess.held != nil && sess.state == sessionPlaying && sess.sent != tick {
			s.sendInput(sess, sess.held, now, tick)
		}
	}
}

// reauth takes a fresh token for the same account and key.
func (s *Server) reauth(sess *session, tok string, now time.Time) {
	claims, err := token.Verify(s.cfg.AccountKey, tok, sess.peer, now)
	if err != nil || claims.Account != sess.account {
		msg := "reauth: a token of another account"
		if err != nil {
			msg = "reauth: " + err.Error()
		}
		s.refuseFrame(sess, refusedReauth, msg)
		return
	}
	sess.tok, sess.expiry = tok, claims.Expiry
}

// closedMirrorDropped is the code of the sessions a mirror dropped from
// the group closes: it joins again, and its clients go to another mirror.
const closedMirrorDropped = "mirror_dropped"

// closeSession ends a session. With leave, a playing session's player
// leaves the world and is saved from the last state once that state has
// executed everything up to the leave.
func (s *Server) closeSession(sess *session, code, msg string, leave bool) {
	if s.sessions[sess.id] != sess {
		return
	}
	delete(s.sessions, sess.id)
	if s.players[sess.player] == sess {
		delete(s.players, sess.player)
	}
	s.m.sessions.Add(-1)
	s.m.sessionsClosed.Add(1)
	if sess.hello != nil {
		sess.hello.Stop()
	}
	if code != "" {
		sess.link.Send(errorFrame(code, msg, true, 0))
	}
	sess.link.Close(code)
	if !leave || sess.state != sessionPlaying || s.sync == nil {
		return
	}
	if s.sync.Last().OwnerOf(sess.player) != uint32(s.id) && s.sync.Leading().OwnerOf(sess.player) != uint32(s.id) {
		return // the player has moved to another mirror
	}
	now := s.clock.Now()
	cmd := Command{Command: s.stamp(now)}
	cmd.Op, cmd.Player = game.CommandLeave, sess.player
	s.issue(cmd, now)
	if t := s.sync.Config().TickOf(cmd.Stamp); t > 0 {
		s.captures = append(s.captures, capture{player: sess.player, tok: sess.tok, version: sess.version, at: t - 1})
	}
	s.log.Info("player left", "player", sess.player, "code", code)
}

// saveCharacter saves a character read from the last state (lock held).
func (s *Server) saveCharacter(player game.PlayerID, tok string, version int64, ch game.Character) {
	s.m.savesInFlight.Add(1)
	s.spawn(func() {
		defer s.m.savesInFlight.Add(-1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v, err := s.cfg.Characters.Save(ctx, tok, ch, version)
		cancel()
		if err != nil {
			s.m.savesFailed.Add(1)
			s.log.Warn("saving a character failed", "player", player, "err", err)
			return
		}
		s.m.saves.Add(1)
		s.locked(func() {
			if sess := s.players[player]; sess != nil && sess.tok == tok {
				sess.version = v
			}
		})
	})
}

// saveSessions saves every playing session's character from the last
// state (periodically, so a crash loses at most SaveEvery).
func (s *Server) saveSessions() {
	last := s.sync.Last()
	for _, sess := range s.sessionList() {
		if sess.state != sessionPlaying || last.OwnerOf(sess.player) != uint32(s.id) {
			continue
		}
		if p, ok := last.World().Player(sess.player); ok {
			s.saveCharacter(sess.player, sess.tok, sess.version, game.CharacterOf(p))
		}
	}
}

// leaveOrphans takes out of the world the players the game has on this
// mirror while no session here holds them: their leave reached the others
// after their last delay (so the authority's state, which a resync then
// brought here, still has them). Nobody else may send their leave, so
// without this they would stand in the world for good. Only players both
// the leading and the last state have here count, so a leave on its way
// is not sent twice.
func (s *Server) leaveOrphans() {
	if s.id == 0 {
		return
	}
	last, leading := s.sync.Last(), s.sync.Leading()
	now := s.clock.Now()
	for _, o := range last.Owners() {
		if o.Mirror != uint32(s.id) || s.players[o.Player] != nil || leading.OwnerOf(o.Player) != uint32(s.id) {
			continue
		}
		cmd := Command{Command: s.stamp(now)}
		cmd.Op, cmd.Player = game.CommandLeave, o.Player
		s.m.orphanLeaves.Add(1)
		s.log.Warn("the game has a player on this mirror that no session holds: leaving it", "player", o.Player)
		s.issue(cmd, now)
	}
}

// checkOwnership ends sessions whose player the last state shows on
// another mirror (it reconnected there) or gone, and sessions whose token
// expired without a reauth.
func (s *Server) checkOwnership() {
	last := s.sync.Last()
	now := s.clock.Now()
	for _, sess := range s.sessionList() {
		if sess.state != sessionPlaying {
			continue
		}
		if !now.Before(sess.expiry) {
			s.m.refuse(refusedBadToken)
			s.closeSession(sess, refusedBadToken, "the session's token expired", true)
			continue
		}
		if sess.joinTik > last.Tick() {
			continue
		}
		owner := last.OwnerOf(sess.player)
		if owner == uint32(s.id) {
			continue
		}
		if owner == 0 {
			s.closeSession(sess, "left", "the player is no longer in the world", false)
			continue
		}
		sess.link.Send(errorFrame("moved", "the player is now on another mirror", true, owner))
		s.closeSession(sess, "", "", false)
	}
}
