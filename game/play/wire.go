package play

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play/playpb"
)

// Protocol IDs and topic suffix of the player runtime.
const (
	FightProtocol   = "/overworld/fight/3.0.0"
	WhisperProtocol = "/overworld/whisper/1.0.0"
	// ChatTopicSuffix follows regions.TopicPrefix in a region's chat topic.
	ChatTopicSuffix = "/chat"
)

// Size bounds of the wire messages. Every decoder refuses anything longer
// before parsing it.
const (
	MaxFightMessageBytes   = 128
	MaxSocialMessageBytes  = 1024
	MaxWhisperMessageBytes = 1024
	maxPeerIDBytes         = 64
)

func checkFighter(what string, f *playpb.Fighter) error {
	switch {
	case f == nil:
		return fmt.Errorf("%s missing", what)
	case f.Skill < 1 || f.Skill > game.MaxSkill:
		return fmt.Errorf("%s skill %d: want 1..%d", what, f.Skill, game.MaxSkill)
	case f.Health < 0 || f.Health > game.MaxHealth:
		return fmt.Errorf("%s health %d: want 0..%d", what, f.Health, game.MaxHealth)
	}
	return nil
}

func checkResult(r *playpb.Result) error {
	switch {
	case r == nil:
		return errors.New("result missing")
	case r.Roll < 0 || r.Roll > 99:
		return fmt.Errorf("roll %d: want 0..99", r.Roll)
	case r.DefenderDamage < 0 || r.DefenderDamage > game.MaxHealth || r.AttackerDamage < 0 || r.AttackerDamage > game.MaxHealth:
		return fmt.Errorf("damage %d/%d: want 0..%d", r.DefenderDamage, r.AttackerDamage, game.MaxHealth)
	}
	return nil
}

// DecodeAttack decodes and validates an Attack.
func DecodeAttack(b []byte) (*playpb.Attack, error) {
	if len(b) > MaxFightMessageBytes {
		return nil, fmt.Errorf("decode attack: %d bytes, limit %d", len(b), MaxFightMessageBytes)
	}
	var m playpb.Attack
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode attack: %w", err)
	}
	if err := errors.Join(checkFighter("attacker", m.Attacker), checkFighter("defender", m.DefenderSeen)); err != nil {
		return nil, fmt.Errorf("decode attack: %w", err)
	}
	return &m, nil
}

// DecodeCommitment decodes and validates the defender's Commitment.
func DecodeCommitment(b []byte) (*playpb.Commitment, error) {
	if len(b) > MaxFightMessageBytes {
		return nil, fmt.Errorf("decode commitment: %d bytes, limit %d", len(b), MaxFightMessageBytes)
	}
	var m playpb.Commitment
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode commitment: %w", err)
	}
	if len(m.NonceHash) != sha256.Size {
		return nil, fmt.Errorf("decode commitment: hash of %d bytes, want %d", len(m.NonceHash), sha256.Size)
	}
	return &m, nil
}

// DecodeReveal decodes and validates the attacker's Reveal.
func DecodeReveal(b []byte) (*playpb.Reveal, error) {
	if len(b) > MaxFightMessageBytes {
		return nil, fmt.Errorf("decode reveal: %d bytes, limit %d", len(b), MaxFightMessageBytes)
	}
	var m playpb.Reveal
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode reveal: %w", err)
	}
	if len(m.Nonce) != NonceBytes {
		return nil, fmt.Errorf("decode reveal: nonce of %d bytes, want %d", len(m.Nonce), NonceBytes)
	}
	return &m, nil
}

// DecodeSettle decodes and validates the attacker's Settle.
func DecodeSettle(b []byte) (*playpb.Settle, error) {
	if len(b) > MaxFightMessageBytes {
		return nil, fmt.Errorf("decode settle: %d bytes, limit %d", len(b), MaxFightMessageBytes)
	}
	var m playpb.Settle
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode settle: %w", err)
	}
	if err := checkResult(m.Result); err != nil {
		return nil, fmt.Errorf("decode settle: %w", err)
	}
	return &m, nil
}

// DecodeOutcome decodes and validates an Outcome.
func DecodeOutcome(b []byte) (*playpb.Outcome, error) {
	if len(b) > MaxFightMessageBytes {
		return nil, fmt.Errorf("decode outcome: %d bytes, limit %d", len(b), MaxFightMessageBytes)
	}
	var m playpb.Outcome
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode outcome: %w", err)
	}
	if len(m.Refusal) > 200 || !utf8.ValidString(m.Refusal) {
		return nil, fmt.Errorf("decode outcome: refusal of %d bytes: want UTF-8 of at most 200", len(m.Refusal))
	}
	if !m.Accepted {
		return &m, nil
	}
	if err := errors.Join(checkFighter("defender", m.Defender), checkFighter("attacker as seen", m.AttackerSeen), checkResult(m.Result)); err != nil {
		return nil, fmt.Errorf("decode outcome: %w", err)
	}
	if len(m.Nonce) != NonceBytes {
		return nil, fmt.Errorf("decode outcome: nonce of %d bytes, want %d", len(m.Nonce), NonceBytes)
	}
	return &m, nil
}

func resultOf(r game.FightResult) *playpb.Result {
	return &playpb.Result{Hit: r.Hit, DefenderDamage: r.DefenderDamage, AttackerDamage: r.AttackerDamage, Roll: r.Roll}
}

func resultFrom(r *playpb.Result) game.FightResult {
	return game.FightResult{Hit: r.Hit, DefenderDamage: r.DefenderDamage, AttackerDamage: r.AttackerDamage, Roll: r.Roll}
}

func fighterOf(f game.Fighter) *playpb.Fighter {
	return &playpb.Fighter{Skill: f.Skill, Health: f.Health}
}

func fighterFrom(f *playpb.Fighter) game.Fighter {
	return game.Fighter{Skill: f.GetSkill(), Health: f.GetHealth()}
}

func checkRegion(x, y int32, cfg game.Config) error {
	if x < 0 || y < 0 || int(x) >= cfg.RegionsX || int(y) >= cfg.RegionsY {
		return fmt.Errorf("region %d,%d outside the %dx%d world", x, y, cfg.RegionsX, cfg.RegionsY)
	}
	return nil
}

// DecodeSocial decodes and validates a chat-topic message for a world of
// cfg's shape: bounded size, a known body, a valid peer ID, name and text,
// bars in range. The caller checks the author and the topic's region.
func DecodeSocial(b []byte, cfg game.Config) (*playpb.Social, error) {
	if len(b) > MaxSocialMessageBytes {
		return nil, fmt.Errorf("decode chat message: %d bytes, limit %d", len(b), MaxSocialMessageBytes)
	}
	var m playpb.Social
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode chat message: %w", err)
	}
	var err error
	switch body := m.Body.(type) {
	case *playpb.Social_Chat:
		c := body.Chat
		err = errors.Join(checkPeerID(c.Sender), game.ValidateName(c.Name), game.ValidateChat(c.Text), checkRegion(c.RegionX, c.RegionY, cfg))
	case *playpb.Social_Card:
		c := body.Card
		err = errors.Join(checkPeerID(c.Player), game.ValidateName(c.Name), checkRegion(c.RegionX, c.RegionY, cfg))
		if c.Health < 0 || c.Health > game.MaxHealth || c.Hunger < 0 || c.Hunger > game.MaxHunger ||
			c.Score < 0 || c.Skill < 1 || c.Skill > game.MaxSkill || c.Seq == 0 {
			err = errors.Join(err, fmt.Errorf("card bars health %d hunger %d score %d skill %d seq %d out of range", c.Health, c.Hunger, c.Score, c.Skill, c.Seq))
		}
	default:
		err = errors.New("empty body")
	}
	if err != nil {
		return nil, fmt.Errorf("decode chat message: %w", err)
	}
	return &m, nil
}

func checkPeerID(b []byte) error {
	if len(b) == 0 || len(b) > maxPeerIDBytes {
		return fmt.Errorf("peer ID of %d bytes: want 1..%d", len(b), maxPeerIDBytes)
	}
	if _, err := peer.IDFromBytes(b); err != nil {
		return fmt.Errorf("peer ID: %w", err)
	}
	return nil
}

// DecodeWhisper decodes and validates a Whisper.
func DecodeWhisper(b []byte) (*playpb.Whisper, error) {
	if len(b) > MaxWhisperMessageBytes {
		return nil, fmt.Errorf("decode whisper: %d bytes, limit %d", len(b), MaxWhisperMessageBytes)
	}
	var m playpb.Whisper
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode whisper: %w", err)
	}
	if err := errors.Join(game.ValidateName(m.FromName), game.ValidateChat(m.Text)); err != nil {
		return nil, fmt.Errorf("decode whisper: %w", err)
	}
	return &m, nil
}
