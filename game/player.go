package game

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// PlayerID identifies a player; in P2P mode it is the peer ID string.
type PlayerID string

// Player is one avatar's full state. All fields are integers so that the
// state hashes identically everywhere.
type Player struct {
	ID   PlayerID
	Name string
	// Pos is the centre of the player's collision box; Vel the displacement
	// of the last step (units per tick).
	Pos, Vel Vec
	Health   int32 // 0..MaxHealth; at 0 the player dies
	Hunger   int32 // 0..MaxHunger; at MaxHunger the player starves
	Score    int32
	Skill    int32 // 1..MaxSkill; raises fight damage
	Alive    bool
	// RespawnAt is the tick a dead player comes back.
	RespawnAt uint64
	// RespawnHome is set while a dead player has asked (CommandRespawn) to
	// come back in its home region rather than where it fell.
	RespawnHome bool
	// Deaths counts deaths; it picks the next spawn point.
	Deaths uint32
	// FightCounter counts the fights this player started; with both player
	// IDs it seeds the fight's random draw.
	FightCounter uint64
	// EatReadyAt and FightReadyAt are the first ticks the next eat or
	// attack may happen (cooldowns).
	EatReadyAt, FightReadyAt uint64
}

// Input is what one player asks for in one tick.
type Input struct {
	Player PlayerID
	// MoveX and MoveY give the wanted direction and throttle: ±127 is full
	// speed along an axis. The world clamps the resulting speed to
	// Config.MaxSpeed, so no input can move faster.
	MoveX, MoveY int8
	// Eat eats one unit of the nearest food in reach.
	Eat bool
	// PickUp takes the nearest health pack in reach.
	PickUp bool
	// Fight attacks Target, or the nearest living player in range if Target
	// is empty.
	Fight  bool
	Target PlayerID
}

// MaxInputWireSize bounds an encoded Input.
const MaxInputWireSize = 4 + 2*(2+MaxPlayerIDLen)

const inputFormat = 1

const (
	inputEat = 1 << iota
	inputPickUp
	inputFight
)

// MarshalBinary encodes the input: format, flags, move x, move y, then the
// player and target IDs each as a uint16 length and bytes. Mirrors use this
// form for command traces.
func (in Input) MarshalBinary() ([]byte, error) {
	if err := validatePlayerID(in.Player, false); err != nil {
		return nil, fmt.Errorf("encode input: player: %w", err)
	}
	if err := validatePlayerID(in.Target, true); err != nil {
		return nil, fmt.Errorf("encode input: target: %w", err)
	}
	var flags byte
	if in.Eat {
		flags |= inputEat
	}
	if in.PickUp {
		flags |= inputPickUp
	}
	if in.Fight {
		flags |= inputFight
	}
	b := make([]byte, 0, 8+len(in.Player)+len(in.Target))
	b = append(b, inputFormat, flags, byte(in.MoveX), byte(in.MoveY))
	b = binary.BigEndian.AppendUint16(b, uint16(len(in.Player)))
	b = append(b, in.Player...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(in.Target)))
	b = append(b, in.Target...)
	return b, nil
}

// UnmarshalInput decodes and validates an encoded Input.
func UnmarshalInput(b []byte) (Input, error) {
	if len(b) > MaxInputWireSize {
		return Input{}, fmt.Errorf("decode input: %d bytes, limit %d", len(b), MaxInputWireSize)
	}
	if len(b) < 8 {
		return Input{}, fmt.Errorf("decode input: %d bytes, too short", len(b))
	}
	if b[0] != inputFormat {
		return Input{}, fmt.Errorf("decode input: format %d, want %d", b[0], inputFormat)
	}
	flags := b[1]
	if flags&^(inputEat|inputPickUp|inputFight) != 0 {
		return Input{}, fmt.Errorf("decode input: unknown flags %#x", flags)
	}
	in := Input{
		MoveX:  int8(b[2]),
		MoveY:  int8(b[3]),
		Eat:    flags&inputEat != 0,
		PickUp: flags&inputPickUp != 0,
		Fight:  flags&inputFight != 0,
	}
	rest := b[4:]
	readID := func(what string) (PlayerID, error) {
		if len(rest) < 2 {
			return "", fmt.Errorf("decode input: %s length missing", what)
		}
		n := int(binary.BigEndian.Uint16(rest))
		rest = rest[2:]
		if n > len(rest) {
			return "", fmt.Errorf("decode input: %s of %d bytes, %d left", what, n, len(rest))
		}
		id := PlayerID(rest[:n])
		rest = rest[n:]
		return id, nil
	}
	var err error
	if in.Player, err = readID("player"); err != nil {
		return Input{}, err
	}
	if in.Target, err = readID("target"); err != nil {
		return Input{}, err
	}
	if len(rest) != 0 {
		return Input{}, fmt.Errorf("decode input: %d trailing bytes", len(rest))
	}
	if err := validatePlayerID(in.Player, false); err != nil {
		return Input{}, fmt.Errorf("decode input: player: %w", err)
	}
	if err := validatePlayerID(in.Target, true); err != nil {
		return Input{}, fmt.Errorf("decode input: target: %w", err)
	}
	return in, nil
}

func validatePlayerID(id PlayerID, emptyOK bool) error {
	switch {
	case id == "" && emptyOK:
		return nil
	case id == "":
		return errors.New("empty player ID")
	case len(id) > MaxPlayerIDLen:
		return fmt.Errorf("player ID of %d bytes, limit %d", len(id), MaxPlayerIDLen)
	case !utf8.ValidString(string(id)):
		return errors.New("player ID is not UTF-8")
	}
	return nil
}

// MaxChatRunes bounds a chat line or whisper, wherever it is typed or
// carried.
const MaxChatRunes = 200

// ValidateChat checks a chat line: non-blank UTF-8 of at most MaxChatRunes
// runes without control characters. The page checks what the player types
// with it and every peer what the network brings.
func ValidateChat(text string) error {
	if strings.TrimSpace(text) == "" {
		return errors.New("empty chat line")
	}
	if !utf8.ValidString(text) {
		return errors.New("chat is not UTF-8")
	}
	if n := utf8.RuneCountInString(text); n > MaxChatRunes {
		return fmt.Errorf("chat line of %d characters, limit %d", n, MaxChatRunes)
	}
	for _, r := range text {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("chat line contains control character %U", r)
		}
	}
	return nil
}

// ValidateName checks a display name: 1..MaxNameLen bytes of printable UTF-8.
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("name of %d bytes: need 1..%d", len(name), MaxNameLen)
	}
	if !utf8.ValidString(name) {
		return errors.New("name is not UTF-8")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("name contains control character %U", r)
		}
	}
	return nil
}
