package play

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play/playpb"
	"github.com/overworld-p2p/overworld/game/webui"
	"github.com/overworld-p2p/overworld/node/pbframe"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/guard"
	"github.com/overworld-p2p/overworld/regions/topic"
)

// Each region has a chat topic, regions.TopicPrefix(world, region) +
// ChatTopicSuffix. It carries chat lines said in the region and the player
// cards (name and bars) that go with the anonymous position updates. A peer
// joins the topics of its region and the neighbours, as it loads their
// objects. Its validator checks size, decoding, that the message's author
// is the named sender, that the region is the topic's and, with an account,
// that the author holds a valid login token for its peer ID
// (guard.Admission; the validator waits for the token of a new author) and
// that the name it gives is the account's the token names; a card's skill
// rises by one at most, and not faster than minSkillRise. Anything else
// is rejected, which penalises the forwarding peer in gossipsub. Each
// author may have one message per chatEvery accepted per topic (bursts of
// chatBurst); more are dropped unforwarded. Without an account the names
// are what players claim: nothing binds them.
//
// With an account, every name shown and every whisper target is the name
// on a player's token, never the name a message claims: a peer cannot
// speak or be whispered to as another player.
//
// Whispers go over a direct stream to the recipient: one Whisper, one
// WhisperAck. The recipient checks the sender's token before reading and
// shows the token's name.

// cardEntry is the newest card of another player.
type cardEntry struct {
	cardState
	seq     uint64
	arrived time.Time
	// skillRose is when a card last showed the skill rising.
	skillRose time.Time
}

// Limits on the chat topics: per author and topic, chatBurst messages at
// once and one per chatEvery after (cards go out at most every 250 ms,
// chat lines as fast as a person types); a card may show the skill rising
// by one at most once per minSkillRise (a defeat takes several blows a
// cooldown apart).
const (
	chatEvery    = 100 * time.Millisecond
	chatBurst    = 16
	minSkillRise = time.Second
)

// cardState is what a card says.
type cardState struct {
	Name                         string
	Region                       game.RegionCoord
	Health, Hunger, Score, Skill int32
	Alive                        bool
}

// ChatTopic is the name of region rc's chat topic in world.
func ChatTopic(world string, rc game.RegionCoord) string {
	return regions.TopicPrefix(world, coordOf(rc)) + ChatTopicSuffix
}

func (p *Peer) joinTopic(rc game.RegionCoord) error {
	if p.ctx.Err() != nil {
		return p.ctx.Err()
	}
	m, err := topic.Join(topic.Config{PubSub: p.n.PubSub(), Name: ChatTopic(p.cfg.World, rc), Validate: p.validator(rc)})
	if err != nil {
		return fmt.Errorf("chat topic: %w", err)
	}
	if err := m.Subscribe(p.ctx, 128, func(msg *pubsub.Message) { p.takeSocial(rc, msg) }); err != nil {
		p.leaveTopic(m)
		return fmt.Errorf("chat topic: %w", err)
	}
	p.mu.Lock()
	if p.topics[rc] != nil || p.ctx.Err() != nil {
		p.mu.Unlock()
		p.leaveTopic(m)
		return nil
	}
	p.topics[rc] = m
	p.mu.Unlock()
	return nil
}

// leaveTopic leaves a chat topic; it waits for the topic's read loop, so
// the caller holds no lock the loop takes.
func (p *Peer) leaveTopic(m *topic.Membership) {
	if err := m.Leave(); err != nil {
		p.log.Debug("leave chat topic", "topic", m.Name(), "err", err)
	}
}

// validator checks a chat-topic message of region rc.
func (p *Peer) validator(rc game.RegionCoord) pubsub.ValidatorEx {
	return func(ctx context.Context, _ peer.ID, m *pubsub.Message) pubsub.ValidationResult {
		s, err := DecodeSocial(m.GetData(), p.cfg.Game)
		if err != nil {
			p.metrics.chatRejected.WithLabelValues("malformed").Inc()
			return pubsub.ValidationReject
		}
		var who []byte
		var x, y int32
		switch b := s.Body.(type) {
		case *playpb.Social_Chat:
			who, x, y = b.Chat.Sender, b.Chat.RegionX, b.Chat.RegionY
		case *playpb.Social_Card:
			who, x, y = b.Card.Player, b.Card.RegionX, b.Card.RegionY
		}
		if peer.ID(who) != m.GetFrom() {
			p.metrics.chatRejected.WithLabelValues("forged").Inc()
			return pubsub.ValidationReject
		}
		if int(x) != rc.X || int(y) != rc.Y {
			p.metrics.chatRejected.WithLabelValues("wrong_region").Inc()
			return pubsub.ValidationReject
		}
		from := m.GetFrom()
		if p.admit != nil {
			// Not inline: a first line may wait for its author's token.
			switch p.admit.Wait(ctx, from) {
			case guard.Refused:
				p.metrics.chatRejected.WithLabelValues("bad_token").Inc()
				return pubsub.ValidationReject
			case guard.Pending:
				p.metrics.chatRejected.WithLabelValues("token_pending").Inc()
				return pubsub.ValidationIgnore
			}
			claimed := s.GetChat().GetName()
			if s.GetCard() != nil {
				claimed = s.GetCard().GetName()
			}
			name, ok := p.verifiedName(from)
			if !ok {
				// The token expired since Wait: as if still pending.
				p.metrics.chatRejected.WithLabelValues("token_pending").Inc()
				return pubsub.ValidationIgnore
			}
			if !strings.EqualFold(name, claimed) {
				p.metrics.chatRejected.WithLabelValues("name_mismatch").Inc()
				p.log.Debug("chat message under another name", "from", from, "claims", claimed, "token", name)
				return pubsub.ValidationReject
			}
		}
		p.limitMu.Lock()
		allowed := p.chatLimit.Allow(from, m.GetTopic(), time.Now())
		p.limitMu.Unlock()
		if !allowed {
			p.metrics.chatRejected.WithLabelValues("rate_limited").Inc()
			return pubsub.ValidationIgnore
		}
		if c := s.GetCard(); c != nil {
			if reason := p.checkCard(from, c, time.Now()); reason != "" {
				p.metrics.chatRejected.WithLabelValues(reason).Inc()
				return pubsub.ValidationReject
			}
		}
		m.ValidatorData = s
		return pubsub.ValidationAccept
	}
}

// checkCard is "" if card c of player from may follow the newest one held,
// else the reason it may not: the skill rises by one at most, and not
// again within minSkillRise. Older cards pass (takeSocial keeps the newest).
func (p *Peer) checkCard(from peer.ID, c *playpb.Card, now time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.cards[from]
	if cur == nil || c.Seq <= cur.seq || c.Skill <= cur.Skill {
		return ""
	}
	if c.Skill > cur.Skill+1 || now.Sub(cur.skillRose) < minSkillRise {
		return "card_skill_jump"
	}
	return ""
}

// verifiedName is the player name on id's login token, when the
// admission holds a current one (this peer's own: its account's).
func (p *Peer) verifiedName(id peer.ID) (string, bool) {
	if id == p.h.ID() {
		return p.cfg.Name, true
	}
	if p.admit == nil {
		return "", false
	}
	c, ok := p.admit.Claims(id)
	return c.Player, ok
}

// takeSocial takes a validated chat-topic message of region rc.
func (p *Peer) takeSocial(rc game.RegionCoord, m *pubsub.Message) {
	s, ok := m.ValidatorData.(*playpb.Social)
	from := m.GetFrom()
	if !ok || from == p.h.ID() {
		return
	}
	now := time.Now()
	p.mu.Lock()
	switch b := s.Body.(type) {
	case *playpb.Social_Chat:
		// Region-wide: shown to the players standing in the region.
		if p.av.Region() == rc {
			p.addMessage(webui.Message{Kind: "chat", From: p.shownName(from, b.Chat.Name), Text: b.Chat.Text})
		}
	case *playpb.Social_Card:
		c := b.Card
		if cur := p.cards[from]; cur == nil || c.Seq > cur.seq {
			if cur == nil && len(p.cards) >= maxChatAuthors {
				p.forgetOldestCardLocked()
			}
			e := &cardEntry{seq: c.Seq, arrived: now, cardState: cardState{
				Name: p.shownName(from, c.Name), Region: game.RegionCoord{X: int(c.RegionX), Y: int(c.RegionY)},
				Health: c.Health, Hunger: c.Hunger, Score: c.Score, Skill: c.Skill, Alive: c.Alive,
			}}
			if cur != nil {
				e.skillRose = cur.skillRose
				if c.Skill > cur.Skill {
					e.skillRose = now
				}
			}
			p.cards[from] = e
		}
	}
	p.mu.Unlock()
}

// forgetOldestCardLocked drops the card that arrived longest ago, to
// make room. Caller holds p.mu.
func (p *Peer) forgetOldestCardLocked() {
	var oldest peer.ID
	for id, c := range p.cards {
		if oldest == "" || c.arrived.Before(p.cards[oldest].arrived) {
			oldest = id
		}
	}
	delete(p.cards, oldest)
}

// shownName is the name to show for player id whose message claims
// claimed: with an account, the name on its token (the validator made
// sure the two agree); in an open world, the claim.
func (p *Peer) shownName(id peer.ID, claimed string) string {
	if name, ok := p.verifiedName(id); ok {
		return name
	}
	return claimed
}

// publish sends a message on the chat topic of region rc, if joined.
func (p *Peer) publish(rc game.RegionCoord, s *playpb.Social) error {
	data, err := proto.Marshal(s)
	if err != nil {
		return err
	}
	if len(data) > MaxSocialMessageBytes {
		return fmt.Errorf("chat message of %d bytes, limit %d", len(data), MaxSocialMessageBytes)
	}
	p.mu.Lock()
	t := p.topics[rc]
	p.mu.Unlock()
	if t == nil {
		return fmt.Errorf("not yet in region %s's chat", rc)
	}
	return t.Publish(p.ctx, data)
}

// cardLoop publishes the player's card when it changes (at most every
// 250 ms) and every CardInterval regardless, and forgets stale cards.
func (p *Peer) cardLoop() {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case now := <-t.C:
			p.mu.Lock()
			self := p.av.Player()
			cs := cardState{
				Name: p.cfg.Name, Region: p.av.Region(), Health: max(self.Health, 0), Hunger: self.Hunger,
				Score: self.Score, Skill: self.Skill, Alive: self.Alive,
			}
			due := cs != p.lastCard || now.Sub(p.lastCardT) >= p.cfg.CardInterval
			if due {
				p.cardSeq++
			}
			seq := p.cardSeq
			for id, c := range p.cards {
				if now.Sub(c.arrived) > 5*p.cfg.CardInterval+10*time.Second {
					delete(p.cards, id)
				}
			}
			p.pruneAttackersLocked(now)
			p.mu.Unlock()
			if !due {
				continue
			}
			err := p.publish(cs.Region, &playpb.Social{Body: &playpb.Social_Card{Card: &playpb.Card{
				Player: []byte(p.h.ID()), Name: cs.Name, RegionX: int32(cs.Region.X), RegionY: int32(cs.Region.Y),
				Health: cs.Health, Hunger: cs.Hunger, Score: cs.Score, Skill: cs.Skill, Alive: cs.Alive, Seq: seq,
			}}})
			if err == nil {
				p.mu.Lock()
				p.lastCard, p.lastCardT = cs, now
				p.mu.Unlock()
			}
		}
	}
}

// Chat implements webui.Session: a line to everyone in the player's
// region, or, with to set, a whisper to the player of that name or peer ID.
func (p *Peer) Chat(text, to string) error {
	if err := webui.ValidateChat(text, to); err != nil {
		return err
	}
	if to != "" {
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		defer cancel()
		return p.Whisper(ctx, to, text)
	}
	p.mu.Lock()
	rc := p.av.Region()
	p.mu.Unlock()
	err := p.publish(rc, &playpb.Social{Body: &playpb.Social_Chat{Chat: &playpb.ChatLine{
		Sender: []byte(p.h.ID()), Name: p.cfg.Name, RegionX: int32(rc.X), RegionY: int32(rc.Y), Text: text,
	}}})
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	p.mu.Lock()
	p.addMessage(webui.Message{Kind: "chat", From: p.cfg.Name, Text: text})
	p.mu.Unlock()
	return nil
}

// resolve finds a player by peer ID, (case-insensitively) by its name,
// or by the short peer ID the page shows for a player in view whose card
// has not arrived yet. With an account the name is the one on the
// player's token (its card's name was checked against it, and players in
// view are looked up on their tokens), so a whisper to a name reaches that
// account's peer and nobody who merely claims the name. Ties (one account
// on two peers) go to the smallest peer ID so the same name always
// reaches the same player. Caller holds p.mu.
func (p *Peer) resolve(to string) (peer.ID, string, bool) {
	if id, err := peer.Decode(to); err == nil && id != p.h.ID() {
		return id, p.nameOf(id), true
	}
	var found peer.ID
	for id, c := range p.cards {
		if strings.EqualFold(c.Name, to) && (found == "" || id < found) {
			found = id
		}
	}
	if found == "" && p.admit != nil {
		for _, o := range p.others {
			if name, ok := p.verifiedName(o.id); ok && strings.EqualFold(name, to) && (found == "" || o.id < found) {
				found = o.id
			}
		}
	}
	if found == "" {
		for _, o := range p.others {
			if shortID(o.id) == to && (found == "" || o.id < found) {
				found = o.id
			}
		}
	}
	if found == "" {
		return "", "", false
	}
	return found, p.nameOf(found), true
}

// Whisper sends a private line to the player named to (a name or a peer
// ID) over a direct stream and waits for its acknowledgement.
func (p *Peer) Whisper(ctx context.Context, to, text string) error {
	if err := webui.ValidateChat(text, to); err != nil {
		return err
	}
	p.mu.Lock()
	id, name, ok := p.resolve(to)
	p.mu.Unlock()
	if !ok {
		return fmt.Errorf("whisper: no player %q known nearby", to)
	}
	if err := p.sendWhisper(ctx, id, text); err != nil {
		return fmt.Errorf("whisper to %s: %w", name, err)
	}
	p.mu.Lock()
	p.addMessage(webui.Message{Kind: "whisper", From: p.cfg.Name, To: name, Text: text})
	p.mu.Unlock()
	return nil
}

func (p *Peer) sendWhisper(ctx context.Context, id peer.ID, text string) error {
	s, err := p.h.NewStream(network.WithAllowLimitedConn(ctx, "whisper"), id, protocol.ID(WhisperProtocol)) // one short line: fits a relay
	if err != nil {
		return err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	if _, err := pbframe.WriteMessage(s, &playpb.Whisper{FromName: p.cfg.Name, Text: text}, MaxWhisperMessageBytes); err != nil {
		s.Reset()
		return err
	}
	_ = s.CloseWrite()
	if _, err := pbframe.Read(bufio.NewReader(s), 16); err != nil {
		s.Reset()
		return fmt.Errorf("no acknowledgement: %w", err)
	}
	return nil
}

func (p *Peer) handleWhisper(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(5 * time.Second))
	from := s.Conn().RemotePeer()
	// Logged-in players hear only players that are: the same rule as on
	// the chat topic, checked before anything is read.
	if reason := p.admitStream(from); reason != "" {
		p.metrics.chatRejected.WithLabelValues("whisper_" + reason).Inc()
		s.Reset()
		return
	}
	b, err := pbframe.Read(bufio.NewReader(s), MaxWhisperMessageBytes)
	if err == nil {
		var w *playpb.Whisper
		if w, err = DecodeWhisper(b); err == nil {
			if name, ok := p.verifiedName(from); p.admit != nil && (!ok || !strings.EqualFold(name, w.FromName)) {
				p.metrics.chatRejected.WithLabelValues("whisper_name_mismatch").Inc()
				p.log.Debug("whisper under another name", "from", from, "claims", w.FromName, "token", name)
				s.Reset()
				return
			}
			p.mu.Lock()
			p.addMessage(webui.Message{Kind: "whisper", From: p.shownName(from, w.FromName), To: p.cfg.Name, Text: w.Text})
			p.mu.Unlock()
			_, err = pbframe.WriteMessage(s, &playpb.WhisperAck{}, 16)
		}
	}
	if err != nil {
		p.metrics.chatRejected.WithLabelValues("whisper").Inc()
		p.log.Debug("bad whisper", "from", from, "err", err)
		s.Reset()
	}
}
