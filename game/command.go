package game

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"strings"
)

// CommandOp says what a command asks of the world.
type CommandOp uint8

const (
	// CommandInput is one player's Input for a tick.
	CommandInput CommandOp = iota + 1
	// CommandJoin brings a player into the world under Name: a new
	// character at its home spawn point, or, with Saved, a returning one
	// as it was saved.
	CommandJoin
	// CommandLeave takes a player out of the world.
	CommandLeave
	// CommandRespawn is a dead player asking to come back in its home
	// region instead of where it fell. It does not shorten the wait: the
	// player still respawns at its RespawnAt tick. A living player's
	// request is ignored.
	CommandRespawn
	commandOps
)

var commandOpNames = [...]string{"", "input", "join", "leave", "respawn"}

func (op CommandOp) String() string {
	if op > 0 && op < commandOps {
		return commandOpNames[op]
	}
	return fmt.Sprintf("op(%d)", uint8(op))
}

// Command is everything that changes a world from outside: under TSS the
// world is driven by commands alone, so replaying the same commands from
// the same state gives the same states.
//
// A returning player's saved character travels inside its join (Saved):
// the ingress mirror, which checks the player's token, loads the character
// from the account server once and puts it in the command, so every
// mirror restores the same character at the same tick without asking the
// account server itself (whose answer could change between mirrors). The
// world clamps what it restores (RestoreCharacter), so a forged save can
// give no more than a fresh character's bars at their best. A join of a
// player already in the world changes nothing: the world's copy is newer
// than any save.
type Command struct {
	// Stamp is the ingress mirror's wall clock, Unix nanoseconds.
	Stamp int64
	// Mirror is the ingress mirror's ID (its CRIMP member ID).
	Mirror uint32
	// Seq is the ingress mirror's sequence number for the command.
	Seq    uint64
	Op     CommandOp
	Player PlayerID
	// Name is the display name of a joining player (CommandJoin only).
	Name string
	// Input is the player's input (CommandInput only; Input.Player must be
	// Player).
	Input Input
	// Saved is the character a returning player restores (CommandJoin
	// only; nil for a new character).
	Saved *Character
}

// At is the ingress stamp (tss.Command).
func (c Command) At() int64 { return c.Stamp }

// Key is the ingress mirror and sequence number (tss.Command).
func (c Command) Key() (mirror uint32, seq uint64) { return c.Mirror, c.Seq }

func (c Command) String() string {
	return fmt.Sprintf("%s %s @%d m%d#%d", c.Op, c.Player, c.Stamp, c.Mirror, c.Seq)
}

// CompareCommands is the canonical order of commands: by stamp, then
// ingress mirror, then sequence number, ascending. Two commands with the
// same (mirror, seq) are one command sent twice and the synchronizer keeps
// one; should two different ones carry the same key anyway (a faulty or
// hostile ingress), the rest of their fields break the tie, so the order
// stays total and every mirror applies them alike.
func CompareCommands(a, b Command) int {
	if c := cmp.Compare(a.Stamp, b.Stamp); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Mirror, b.Mirror); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Seq, b.Seq); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Op, b.Op); c != 0 {
		return c
	}
	if c := strings.Compare(string(a.Player), string(b.Player)); c != 0 {
		return c
	}
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	if c := compareInputs(a.Input, b.Input); c != 0 {
		return c
	}
	return compareSaved(a.Saved, b.Saved)
}

func compareInputs(a, b Input) int {
	bit := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	for _, c := range []int{
		strings.Compare(string(a.Player), string(b.Player)),
		cmp.Compare(a.MoveX, b.MoveX),
		cmp.Compare(a.MoveY, b.MoveY),
		bit(a.Eat) - bit(b.Eat),
		bit(a.PickUp) - bit(b.PickUp),
		bit(a.Fight) - bit(b.Fight),
		strings.Compare(string(a.Target), string(b.Target)),
	} {
		if c != 0 {
			return c
		}
	}
	return 0
}

func compareSaved(a, b *Character) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	for _, c := range []int{
		cmp.Compare(a.Pos.X, b.Pos.X), cmp.Compare(a.Pos.Y, b.Pos.Y),
		cmp.Compare(a.Health, b.Health), cmp.Compare(a.Hunger, b.Hunger),
		cmp.Compare(a.Score, b.Score), cmp.Compare(a.Skill, b.Skill),
	} {
		if c != 0 {
			return c
		}
	}
	return 0
}

// Wire form of a command (big-endian):
//
//	format u8 (=1) | op u8 | stamp i64 | mirror u32 | seq u64 | player u16 len + bytes
//	input:   u16 len + the Input's own encoding (Input.MarshalBinary)
//	join:    u8 len + name | u8 saved (0 or 1) | if saved: x, y, health, hunger, score, skill as i32
//	leave, respawn: nothing
//
// The decoder accepts exactly what the encoder writes, so a decoded
// command encodes back to the same bytes.
const (
	commandFormat     = 1
	commandHeaderSize = 1 + 1 + 8 + 4 + 8
	characterWireSize = 6 * 4
	// MaxCommandWireSize bounds an encoded Command.
	MaxCommandWireSize = commandHeaderSize + 2 + MaxPlayerIDLen + max(2+MaxInputWireSize, 1+MaxNameLen+1+characterWireSize)
)

// MarshalBinary encodes the command in its bounded wire form. Fields the
// op does not use must be zero, so the encoding is canonical.
func (c Command) MarshalBinary() ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("encode command: %w", err)
	}
	b := make([]byte, 0, commandHeaderSize+2+len(c.Player)+64)
	b = append(b, commandFormat, byte(c.Op))
	b = binary.BigEndian.AppendUint64(b, uint64(c.Stamp))
	b = binary.BigEndian.AppendUint32(b, c.Mirror)
	b = binary.BigEndian.AppendUint64(b, c.Seq)
	b = binary.BigEndian.AppendUint16(b, uint16(len(c.Player)))
	b = append(b, c.Player...)
	switch c.Op {
	case CommandInput:
		in, err := c.Input.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("encode command: %w", err)
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(in)))
		b = append(b, in...)
	case CommandJoin:
		b = append(b, byte(len(c.Name)))
		b = append(b, c.Name...)
		if c.Saved == nil {
			b = append(b, 0)
			break
		}
		b = append(b, 1)
		for _, v := range []int32{c.Saved.Pos.X, c.Saved.Pos.Y, c.Saved.Health, c.Saved.Hunger, c.Saved.Score, c.Saved.Skill} {
			b = binary.BigEndian.AppendUint32(b, uint32(v))
		}
	}
	return b, nil
}

// validate checks what the wire form requires of a command.
func (c Command) validate() error {
	if c.Op == 0 || c.Op >= commandOps {
		return fmt.Errorf("unknown op %d", uint8(c.Op))
	}
	if err := validatePlayerID(c.Player, false); err != nil {
		return fmt.Errorf("%s: player: %w", c.Op, err)
	}
	if c.Op != CommandInput && c.Input != (Input{}) {
		return fmt.Errorf("%s of %s carries an input", c.Op, c.Player)
	}
	if c.Op != CommandJoin && (c.Name != "" || c.Saved != nil) {
		return fmt.Errorf("%s of %s carries a name or a saved character", c.Op, c.Player)
	}
	switch c.Op {
	case CommandInput:
		if c.Input.Player != c.Player {
			return fmt.Errorf("input of command for %s names player %s", c.Player, c.Input.Player)
		}
	case CommandJoin:
		if err := ValidateName(c.Name); err != nil {
			return fmt.Errorf("join of %s: %w", c.Player, err)
		}
	}
	return nil
}

// UnmarshalCommand decodes and validates an encoded Command.
func UnmarshalCommand(b []byte) (Command, error) {
	if len(b) > MaxCommandWireSize {
		return Command{}, fmt.Errorf("decode command: %d bytes, limit %d", len(b), MaxCommandWireSize)
	}
	if len(b) < commandHeaderSize+2 {
		return Command{}, fmt.Errorf("decode command: %d bytes, too short", len(b))
	}
	if b[0] != commandFormat {
		return Command{}, fmt.Errorf("decode command: format %d, want %d", b[0], commandFormat)
	}
	c := Command{
		Op:     CommandOp(b[1]),
		Stamp:  int64(binary.BigEndian.Uint64(b[2:])),
		Mirror: binary.BigEndian.Uint32(b[10:]),
		Seq:    binary.BigEndian.Uint64(b[14:]),
	}
	rest := b[commandHeaderSize:]
	take := func(n int, what string) ([]byte, error) {
		if n > len(rest) {
			return nil, fmt.Errorf("decode command: %s of %d bytes, %d left", what, n, len(rest))
		}
		out := rest[:n]
		rest = rest[n:]
		return out, nil
	}
	n := int(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	player, err := take(n, "player")
	if err != nil {
		return Command{}, err
	}
	c.Player = PlayerID(player)
	switch c.Op {
	case CommandInput:
		l, err := take(2, "input length")
		if err != nil {
			return Command{}, err
		}
		in, err := take(int(binary.BigEndian.Uint16(l)), "input")
		if err != nil {
			return Command{}, err
		}
		if c.Input, err = UnmarshalInput(in); err != nil {
			return Command{}, fmt.Errorf("decode command: %w", err)
		}
	case CommandJoin:
		l, err := take(1, "name length")
		if err != nil {
			return Command{}, err
		}
		name, err := take(int(l[0]), "name")
		if err != nil {
			return Command{}, err
		}
		c.Name = string(name)
		flag, err := take(1, "saved flag")
		if err != nil {
			return Command{}, err
		}
		switch flag[0] {
		case 0:
		case 1:
			raw, err := take(characterWireSize, "saved character")
			if err != nil {
				return Command{}, err
			}
			v := func(i int) int32 { return int32(binary.BigEndian.Uint32(raw[4*i:])) }
			c.Saved = &Character{Pos: Vec{v(0), v(1)}, Health: v(2), Hunger: v(3), Score: v(4), Skill: v(5)}
		default:
			return Command{}, fmt.Errorf("decode command: saved flag %d, want 0 or 1", flag[0])
		}
	}
	if len(rest) != 0 {
		return Command{}, fmt.Errorf("decode command: %d trailing bytes", len(rest))
	}
	if err := c.validate(); err != nil {
		return Command{}, fmt.Errorf("decode command: %w", err)
	}
	return c, nil
}
