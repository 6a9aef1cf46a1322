package play

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play/playpb"
	"github.com/overworld-p2p/overworld/node/pbframe"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/guard"
	"github.com/overworld-p2p/overworld/regions/position"
	"github.com/overworld-p2p/overworld/regions/topic"
)

// Each region has a chat topic, regions.TopicPrefix(world, region) +
// ChatTopicSuffix. It carries chat lines said in the region and the player
// cards (name and bars) that go with the anonymous position updates. A peer
// joins the topics of its region and the neighbours. Its validator checks
// size, decoding, that the message's author is the named sender, that the
// region is the topic's and, with an account, that the author holds a
// valid login token for its peer ID (guard.Admission; the validator waits
// for the token of a new author) and that the name it gives is the
// account's the token names; a card's skill rises by one at most, and not
// faster than minSkillRise. Anything else is rejected, which penalises the
// forwarding peer in gossipsub. Each author may have one message per
// chatEvery accepted per topic (bursts of chatBurst); more are dropped
// unforwarded. Without an account the names are what players claim:
// nothing binds them.
//
// With an account, every name shown and every whisper target is the name
// on a player's token, never the name a message claims: a peer cannot
// speak or be whispered to as another player.
//
// Whispers go over a direct stream to the recipient: one Whisper, one
// WhisperAck. The recipient checks the sender's token before reading and
// shows the token's name.

// cardEntry is the newest card of another player. Entries are replaced,
// never changed, once in the table.
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

// maxChatAuthors bounds the chat rate limiter's table and the cards held.
const maxChatAuthors = 4096

// cardState is what a card says.
type cardState struct {
	Name                         string
	Region                       game.RegionCoord
	Health, Hunger, Score, Skill int32
	Alive                        bool
}

// social is the player among others: its loops join the chat topics of
// the regions around the player and publish the player's card; it holds
// the other players' cards, shows chat lines and whispers, and sends them.
type social struct {
	world       string
	game        game.Config
	name        string // this player's
	cardEvery   time.Duration
	regionEvery time.Duration
	h           host.Host
	ps          *pubsub.PubSub
	admit       *guard.Admission // nil: an open world
	loop        *gameLoop
	msgs        *messageLog
	metrics     *metrics
	log         *slog.Logger
	life        lifetime

	// chatLimit bounds each author's rate on each chat topic; limitMu
	// guards it (the validators run concurrently).
	limitMu   sync.Mutex
	chatLimit *position.AuthorLimiter

	mu        sync.Mutex
	topics    map[game.RegionCoord]*topic.Membership
	cards     map[peer.ID]*cardEntry
	cardSeq   uint64
	lastCard  cardState
	lastCardT time.Time
}

func newSocial(cfg Config, h host.Host, ps *pubsub.PubSub, admit *guard.Admission, loop *gameLoop, msgs *messageLog, m *metrics, log *slog.Logger) *social {
	return &social{
		world: cfg.World, game: cfg.Game, name: cfg.Name, cardEvery: cfg.CardInterval, regionEvery: cfg.RegionEvery,
		h: h, ps: ps, admit: admit, loop: loop, msgs: msgs, metrics: m, log: log, life: newLifetime(),
		chatLimit: position.NewAuthorLimiter(chatEvery, chatBurst, maxChatAuthors),
		topics:    map[game.RegionCoord]*topic.Membership{}, cards: map[peer.ID]*cardEntry{},
	}
}

func (s *social) start() {
	s.h.SetStreamHandler(protocol.ID(WhisperProtocol), s.handleWhisper)
	s.life.spawn(s.topicLoop)
	s.life.spawn(s.cardLoop)
}

// stop ends the loops and the whispers in flight, then leaves the topics.
func (s *social) stop() {
	s.h.RemoveStreamHandler(protocol.ID(WhisperProtocol))
	s.life.end()
	s.mu.Lock()
	topics := s.topics
	s.topics = map[game.RegionCoord]*topic.Membership{}
	s.mu.Unlock()
	for _, m := range topics {
		s.leaveTopic(m)
	}
}

// ChatTopic is the name of region rc's chat topic in world.
func ChatTopic(world string, rc game.RegionCoord) string {
	return regions.TopicPrefix(world, coordOf(rc)) + ChatTopicSuffix
}

// topicLoop keeps the peer in the chat topics of the player's region and
// its neighbours.
func (s *social) topicLoop() {
	t := time.NewTicker(s.regionEvery)
	defer t.Stop()
	for {
		s.followRegions()
		select {
		case <-s.life.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// followRegions joins the chat topics of the regions around the player
// and leaves the others.
func (s *social) followRegions() {
	want := map[game.RegionCoord]bool{}
	for _, rc := range s.loop.terrain().Neighbours(s.loop.region()) {
		want[rc] = true
	}
	var join []game.RegionCoord
	var leave []*topic.Membership
	s.mu.Lock()
	for rc := range want {
		if s.topics[rc] == nil {
			join = append(join, rc)
		}
	}
	for rc, m := range s.topics {
		if !want[rc] {
			leave = append(leave, m)
			delete(s.topics, rc)
		}
	}
	s.mu.Unlock()
	for _, m := range leave {
		s.leaveTopic(m)
	}
	for _, rc := range join {
		if err := s.joinTopic(rc); err != nil {
			if s.life.ctx.Err() != nil {
				return // shutting down: nothing to join
			}
			s.log.Warn("join chat topic", "region", rc, "err", err)
		}
	}
}

func (s *social) joinTopic(rc game.RegionCoord) error {
	if err := s.life.ctx.Err(); err != nil {
		return err
	}
	m, err := topic.Join(topic.Config{PubSub: s.ps, Name: ChatTopic(s.world, rc), Validate: s.validator(rc)})
	if err != nil {
		return fmt.Errorf("chat topic: %w", err)
	}
	if err := m.Subscribe(s.life.ctx, 128, func(msg *pubsub.Message) { s.take(rc, msg) }); err != nil {
		s.leaveTopic(m)
		return fmt.Errorf("chat topic: %w", err)
	}
	s.mu.Lock()
	if s.topics[rc] != nil || s.life.ctx.Err() != nil {
		s.mu.Unlock()
		s.leaveTopic(m)
		return nil
	}
	s.topics[rc] = m
	s.mu.Unlock()
	return nil
}

// leaveTopic leaves a chat topic; it waits for the topic's read loop, so
// the caller holds no lock the loop takes.
func (s *social) leaveTopic(m *topic.Membership) {
	if err := m.Leave(); err != nil {
		s.log.Debug("leave chat topic", "topic", m.Name(), "err", err)
	}
}

// validator checks a chat-topic message of region rc.
func (s *social) validator(rc game.RegionCoord) pubsub.ValidatorEx {
	return func(ctx context.Context, _ peer.ID, m *pubsub.Message) pubsub.ValidationResult {
		msg, err := DecodeSocial(m.GetData(), s.game)
		if err != nil {
			s.metrics.chatRejected.WithLabelValues("malformed").Inc()
			return pubsub.ValidationReject
		}
		var who []byte
		var x, y int32
		switch b := msg.Body.(type) {
		case *playpb.Social_Chat:
			who, x, y = b.Chat.Sender, b.Chat.RegionX, b.Chat.RegionY
		case *playpb.Social_Card:
			who, x, y = b.Card.Player, b.Card.RegionX, b.Card.RegionY
		}
		if peer.ID(who) != m.GetFrom() {
			s.metrics.chatRejected.WithLabelValues("forged").Inc()
			return pubsub.ValidationReject
		}
		if int(x) != rc.X || int(y) != rc.Y {
			s.metrics.chatRejected.WithLabelValues("wrong_region").Inc()
			return pubsub.ValidationReject
		}
		from := m.GetFrom()
		if s.admit != nil {
			// Not inline: a first line may wait for its author's token.
			switch s.admit.Wait(ctx, from) {
			case guard.Refused:
				s.metrics.chatRejected.WithLabelValues("bad_token").Inc()
				return pubsub.ValidationReject
			case guard.Pending:
				s.metrics.chatRejected.WithLabelValues("token_pending").Inc()
				return pubsub.ValidationIgnore
			}
			claimed := msg.GetChat().GetName()
			if msg.GetCard() != nil {
				claimed = msg.GetCard().GetName()
			}
			name, ok := s.verifiedName(from)
			if !ok {
				// The token expired since Wait: as if still pending.
				s.metrics.chatRejected.WithLabelValues("token_pending").Inc()
				return pubsub.ValidationIgnore
			}
			if !strings.EqualFold(name, claimed) {
				s.metrics.chatRejected.WithLabelValues("name_mismatch").Inc()
				s.log.Debug("chat message under another name", "from", from, "claims", claimed, "token", name)
				return pubsub.ValidationReject
			}
		}
		s.limitMu.Lock()
		allowed := s.chatLimit.Allow(from, m.GetTopic(), time.Now())
		s.limitMu.Unlock()
		if !allowed {
			s.metrics.chatRejected.WithLabelValues("rate_limited").Inc()
			return pubsub.ValidationIgnore
		}
		if c := msg.GetCard(); c != nil {
			if reason := s.checkCard(from, c, time.Now()); reason != "" {
				s.metrics.chatRejected.WithLabelValues(reason).Inc()
				return pubsub.ValidationReject
			}
		}
		m.ValidatorData = msg
		return pubsub.ValidationAccept
	}
}

// checkCard is "" if card c of player from may follow the newest one held,
// else the reason it may not: the skill rises by one at most, and not
// again within minSkillRise. Older cards pass (take keeps the newest).
func (s *social) checkCard(from peer.ID, c *playpb.Card, now time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.cards[from]
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
func (s *social) verifiedName(id peer.ID) (string, bool) {
	if id == s.h.ID() {
		return s.name, true
	}
	if s.admit == nil {
		return "", false
	}
	c, ok := s.admit.Claims(id)
	return c.Player, ok
}

// take takes a validated chat-topic message of region rc.
func (s *social) take(rc game.RegionCoord, m *pubsub.Message) {
	msg, ok := m.ValidatorData.(*playpb.Social)
	from := m.GetFrom()
	if !ok || from == s.h.ID() {
		return
	}
	switch b := msg.Body.(type) {
	case *playpb.Social_Chat:
		// Region-wide: shown to the players standing in the region.
		if s.loop.region() == rc {
			s.msgs.add(Message{Kind: "chat", From: s.shownName(from, b.Chat.Name), Text: b.Chat.Text})
		}
	case *playpb.Social_Card:
		c := b.Card
		name := s.shownName(from, c.Name)
		now := time.Now()
		s.mu.Lock()
		defer s.mu.Unlock()
		cur := s.cards[from]
		if cur != nil && c.Seq <= cur.seq {
			return
		}
		if cur == nil && len(s.cards) >= maxChatAuthors {
			s.forgetOldestCardLocked()
		}
		e := &cardEntry{seq: c.Seq, arrived: now, cardState: cardState{
			Name: name, Region: game.RegionCoord{X: int(c.RegionX), Y: int(c.RegionY)},
			Health: c.Health, Hunger: c.Hunger, Score: c.Score, Skill: c.Skill, Alive: c.Alive,
		}}
		if cur != nil {
			e.skillRose = cur.skillRose
			if c.Skill > cur.Skill {
				e.skillRose = now
			}
		}
		s.cards[from] = e
	}
}

// forgetOldestCardLocked drops the card that arrived longest ago, to
// make room. Caller holds s.mu.
func (s *social) forgetOldestCardLocked() {
	var oldest peer.ID
	for id, c := range s.cards {
		if oldest == "" || c.arrived.Before(s.cards[oldest].arrived) {
			oldest = id
		}
	}
	delete(s.cards, oldest)
}

// shownName is the name to show for player id whose message claims
// claimed: with an account, the name on its token (the validator made
// sure the two agree); in an open world, the claim.
func (s *social) shownName(id peer.ID, claimed string) string {
	if name, ok := s.verifiedName(id); ok {
		return name
	}
	return claimed
}

// nameOf is a player's display name as its card gives it, else the end of
// its peer ID.
func (s *social) nameOf(id peer.ID) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nameOfLocked(id)
}

func (s *social) nameOfLocked(id peer.ID) string {
	if c := s.cards[id]; c != nil {
		return c.Name
	}
	return shortID(id)
}

// card returns the card held of player id.
func (s *social) card(id peer.ID) (cardState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cards[id]; c != nil {
		return c.cardState, true
	}
	return cardState{}, false
}

// cardsOf returns the cards held of the players ids.
func (s *social) cardsOf(ids []peer.ID) map[peer.ID]cardState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[peer.ID]cardState, len(ids))
	for _, id := range ids {
		if c := s.cards[id]; c != nil {
			out[id] = c.cardState
		}
	}
	return out
}

// publicSelf is the player's fight state as its last card published it
// (what every other player sees), or its real state before the first
// card.
func (s *social) publicSelf() game.Fighter {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.publicSelfLocked()
}

// publicSelfLocked is publicSelf; the caller holds s.mu.
func (s *social) publicSelfLocked() game.Fighter {
	if s.cardSeq == 0 || s.lastCardT.IsZero() {
		return s.loop.fighter()
	}
	return game.Fighter{Skill: s.lastCard.Skill, Health: s.lastCard.Health}
}

// publish sends a message on the chat topic of region rc, if joined.
func (s *social) publish(rc game.RegionCoord, msg *playpb.Social) error {
	data, err := proto.Marshal(msg)
	if err != nil {
		return err
	}
	if len(data) > MaxSocialMessageBytes {
		return fmt.Errorf("chat message of %d bytes, limit %d", len(data), MaxSocialMessageBytes)
	}
	s.mu.Lock()
	m := s.topics[rc]
	s.mu.Unlock()
	if m == nil {
		return fmt.Errorf("not yet in region %s's chat", rc)
	}
	return m.Publish(s.life.ctx, data)
}

// cardLoop publishes the player's card when it changes (at most every
// 250 ms) and every cardEvery regardless, and forgets stale cards.
func (s *social) cardLoop() {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.life.ctx.Done():
			return
		case now := <-t.C:
			self := s.loop.player()
			cs := cardState{
				Name: s.name, Region: s.loop.terrain().RegionOf(self.Pos), Health: max(self.Health, 0), Hunger: self.Hunger,
				Score: self.Score, Skill: self.Skill, Alive: self.Alive,
			}
			s.mu.Lock()
			due := cs != s.lastCard || now.Sub(s.lastCardT) >= s.cardEvery
			if due {
				s.cardSeq++
			}
			seq := s.cardSeq
			for id, c := range s.cards {
				if now.Sub(c.arrived) > 5*s.cardEvery+10*time.Second {
					delete(s.cards, id)
				}
			}
			s.mu.Unlock()
			if !due {
				continue
			}
			err := s.publish(cs.Region, &playpb.Social{Body: &playpb.Social_Card{Card: &playpb.Card{
				Player: []byte(s.h.ID()), Name: cs.Name, RegionX: int32(cs.Region.X), RegionY: int32(cs.Region.Y),
				Health: cs.Health, Hunger: cs.Hunger, Score: cs.Score, Skill: cs.Skill, Alive: cs.Alive, Seq: seq,
			}}})
			if err == nil {
				s.mu.Lock()
				s.lastCard, s.lastCardT = cs, now
				s.mu.Unlock()
			}
		}
	}
}

// chat says a line to everyone in the player's region, or, with to set,
// whispers it to the player of that name or peer ID.
func (s *social) chat(text, to string) error {
	if err := checkChat(text, to); err != nil {
		return err
	}
	if to != "" {
		ctx, cancel := context.WithTimeout(s.life.ctx, 5*time.Second)
		defer cancel()
		return s.whisper(ctx, to, text)
	}
	rc := s.loop.region()
	err := s.publish(rc, &playpb.Social{Body: &playpb.Social_Chat{Chat: &playpb.ChatLine{
		Sender: []byte(s.h.ID()), Name: s.name, RegionX: int32(rc.X), RegionY: int32(rc.Y), Text: text,
	}}})
	if err != nil {
		return fmt.Errorf("chat: %w", err)
	}
	s.msgs.add(Message{Kind: "chat", From: s.name, Text: text})
	return nil
}

// checkChat checks a line and its recipient: the game's rule for the
// line, a recipient of at most a player ID's length.
func checkChat(text, to string) error {
	if err := game.ValidateChat(text); err != nil {
		return err
	}
	if len(to) > game.MaxPlayerIDLen || !utf8.ValidString(to) {
		return fmt.Errorf("recipient of %d bytes: want UTF-8 of at most %d", len(to), game.MaxPlayerIDLen)
	}
	return nil
}

// resolve finds a player by peer ID, (case-insensitively) by its name,
// or by the short peer ID the page shows for a player in view whose card
// has not arrived yet. With an account the name is the one on the
// player's token (its card's name was checked against it, and players in
// view are looked up on their tokens), so a whisper to a name reaches that
// account's peer and nobody who merely claims the name. Ties (one account
// on two peers) go to the smallest peer ID so the same name always
// reaches the same player.
func (s *social) resolve(to string) (peer.ID, string, bool) {
	if id, err := peer.Decode(to); err == nil && id != s.h.ID() {
		return id, s.nameOf(id), true
	}
	inView := s.loop.otherIDs()
	s.mu.Lock()
	defer s.mu.Unlock()
	var found peer.ID
	for id, c := range s.cards {
		if strings.EqualFold(c.Name, to) && (found == "" || id < found) {
			found = id
		}
	}
	if found == "" && s.admit != nil {
		for _, id := range inView {
			if name, ok := s.verifiedName(id); ok && strings.EqualFold(name, to) && (found == "" || id < found) {
				found = id
			}
		}
	}
	if found == "" {
		for _, id := range inView {
			if shortID(id) == to && (found == "" || id < found) {
				found = id
			}
		}
	}
	if found == "" {
		return "", "", false
	}
	return found, s.nameOfLocked(found), true
}

// whisper sends a private line to the player named to (a name or a peer
// ID) over a direct stream and waits for its acknowledgement.
func (s *social) whisper(ctx context.Context, to, text string) error {
	if err := checkChat(text, to); err != nil {
		return err
	}
	id, name, ok := s.resolve(to)
	if !ok {
		return fmt.Errorf("whisper: no player %q known nearby", to)
	}
	if err := s.sendWhisper(ctx, id, text); err != nil {
		return fmt.Errorf("whisper to %s: %w", name, err)
	}
	s.msgs.add(Message{Kind: "whisper", From: s.name, To: name, Text: text})
	return nil
}

func (s *social) sendWhisper(ctx context.Context, id peer.ID, text string) error {
	st, err := s.h.NewStream(network.WithAllowLimitedConn(ctx, "whisper"), id, protocol.ID(WhisperProtocol)) // one short line: fits a relay
	if err != nil {
		return err
	}
	defer st.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	if _, err := pbframe.WriteMessage(st, &playpb.Whisper{FromName: s.name, Text: text}, MaxWhisperMessageBytes); err != nil {
		st.Reset()
		return err
	}
	_ = st.CloseWrite()
	if _, err := pbframe.Read(bufio.NewReader(st), 16); err != nil {
		st.Reset()
		return fmt.Errorf("no acknowledgement: %w", err)
	}
	return nil
}

func (s *social) handleWhisper(st network.Stream) {
	if !s.life.enter() {
		st.Reset()
		return
	}
	defer s.life.leave()
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(5 * time.Second))
	from := st.Conn().RemotePeer()
	// Logged-in players hear only players that are: the same rule as on
	// the chat topic, checked before anything is read.
	if reason := admitStream(s.life.ctx, s.admit, from); reason != "" {
		s.metrics.chatRejected.WithLabelValues("whisper_" + reason).Inc()
		st.Reset()
		return
	}
	b, err := pbframe.Read(bufio.NewReader(st), MaxWhisperMessageBytes)
	if err == nil {
		var w *playpb.Whisper
		if w, err = DecodeWhisper(b); err == nil {
			if name, ok := s.verifiedName(from); s.admit != nil && (!ok || !strings.EqualFold(name, w.FromName)) {
				s.metrics.chatRejected.WithLabelValues("whisper_name_mismatch").Inc()
				s.log.Debug("whisper under another name", "from", from, "claims", w.FromName, "token", name)
				st.Reset()
				return
			}
			s.msgs.add(Message{Kind: "whisper", From: s.shownName(from, w.FromName), To: s.name, Text: w.Text})
			_, err = pbframe.WriteMessage(st, &playpb.WhisperAck{}, 16)
		}
	}
	if err != nil {
		s.metrics.chatRejected.WithLabelValues("whisper").Inc()
		s.log.Debug("bad whisper", "from", from, "err", err)
		st.Reset()
	}
}

// admitStream is "" if the peer at the other end of a direct stream may be
// heard (with an account: it holds a valid login token for its peer ID),
// else the reason it may not. It waits a little for a token being fetched.
func admitStream(ctx context.Context, admit *guard.Admission, from peer.ID) string {
	if admit == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	switch admit.Wait(ctx, from) {
	case guard.Admitted:
		return ""
	case guard.Refused:
		return "bad_token"
	default:
		return "token_pending"
	}
}
