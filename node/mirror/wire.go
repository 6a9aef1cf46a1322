package mirror

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/tss"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// ProtocolVersion is the client protocol's version (Challenge, Hello).
const ProtocolVersion = 1

// Wire bounds. Every decoder checks the size before it parses and every
// field after.
const (
	// MaxClientFrame bounds a frame from a client; a longer one closes the
	// session (WebSocket status 1009).
	MaxClientFrame = 4096
	// MaxServerFrame bounds a frame from a mirror.
	MaxServerFrame = 1 << 20
	// MaxPreviousInputs is how many earlier inputs an InputFrame may repeat.
	MaxPreviousInputs = 3
	// MaxPublicKey and MaxSignature bound a Hello's key and signature
	// (an RSA key is the largest libp2p allows).
	MaxPublicKey = 1024
	MaxSignature = 1024
	// Limits on an Update, far above what one client's area holds.
	maxUpdatePlayers = 4096
	maxUpdateObjects = 16384
	maxUpdateEvents  = 4096
	// maxTransferPending bounds the commands of a state transfer.
	maxTransferPending = tss.MaxPendingLimit
)

// helloContext is the domain separator of a Hello signature.
const helloContext = "overworld/mirror-hello/1"

// HelloMessage is what a client signs with its peer key to prove it holds
// the key its token names: the context string, the challenge nonce and the
// mirror's ID, so a signature is good for one session with one mirror.
func HelloMessage(nonce []byte, mirror uint32) []byte {
	b := make([]byte, 0, len(helloContext)+1+len(nonce)+4)
	b = append(b, helloContext...)
	b = append(b, 0)
	b = append(b, nonce...)
	return append(b, byte(mirror>>24), byte(mirror>>16), byte(mirror>>8), byte(mirror))
}

// DecodeClientFrame parses and validates a frame from a client.
func DecodeClientFrame(b []byte) (*mirrorpb.ClientFrame, error) {
	if len(b) > MaxClientFrame {
		return nil, fmt.Errorf("client frame of %d bytes, limit %d", len(b), MaxClientFrame)
	}
	var f mirrorpb.ClientFrame
	if err := proto.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("decode client frame: %w", err)
	}
	switch body := f.Body.(type) {
	case *mirrorpb.ClientFrame_Hello:
		h := body.Hello
		switch {
		case h == nil:
			return nil, errors.New("empty hello")
		case h.Version != ProtocolVersion:
			return nil, fmt.Errorf("hello: protocol version %d, want %d", h.Version, ProtocolVersion)
		case h.Token == "" || len(h.Token) > token.MaxLen:
			return nil, fmt.Errorf("hello: token of %d bytes, need 1..%d", len(h.Token), token.MaxLen)
		case len(h.PublicKey) == 0 || len(h.PublicKey) > MaxPublicKey:
			return nil, fmt.Errorf("hello: public key of %d bytes, need 1..%d", len(h.PublicKey), MaxPublicKey)
		case len(h.Signature) == 0 || len(h.Signature) > MaxSignature:
			return nil, fmt.Errorf("hello: signature of %d bytes, need 1..%d", len(h.Signature), MaxSignature)
		}
	case *mirrorpb.ClientFrame_Input:
		in := body.Input
		if in == nil || in.Input == nil {
			return nil, errors.New("input frame without an input")
		}
		if len(in.Previous) > MaxPreviousInputs {
			return nil, fmt.Errorf("input frame repeats %d inputs, limit %d", len(in.Previous), MaxPreviousInputs)
		}
		for _, x := range append([]*mirrorpb.Input{in.Input}, in.Previous...) {
			if err := validateInput(x); err != nil {
				return nil, err
			}
		}
	case *mirrorpb.ClientFrame_Reauth:
		if body.Reauth == nil || body.Reauth.Token == "" || len(body.Reauth.Token) > token.MaxLen {
			return nil, errors.New("reauth without a token of at most token.MaxLen bytes")
		}
	default:
		return nil, errors.New("client frame without a body")
	}
	return &f, nil
}

func validateInput(in *mirrorpb.Input) error {
	switch {
	case in == nil:
		return errors.New("empty input")
	case in.Seq == 0:
		return errors.New("input seq 0 (inputs count from 1)")
	case in.MoveX < -127 || in.MoveX > 127 || in.MoveY < -127 || in.MoveY > 127:
		return fmt.Errorf("input %d: move (%d,%d) outside -127..127", in.Seq, in.MoveX, in.MoveY)
	case len(in.Target) > game.MaxPlayerIDLen || !utf8.ValidString(in.Target):
		return fmt.Errorf("input %d: target of %d bytes: need UTF-8 of at most %d", in.Seq, len(in.Target), game.MaxPlayerIDLen)
	case len(in.Player) > game.MaxPlayerIDLen || !utf8.ValidString(in.Player):
		return fmt.Errorf("input %d: player of %d bytes: need UTF-8 of at most %d", in.Seq, len(in.Player), game.MaxPlayerIDLen)
	}
	return nil
}

// gameInput is the game input an Input asks for on behalf of player.
func gameInput(in *mirrorpb.Input, player game.PlayerID) game.Input {
	return game.Input{
		Player: player,
		MoveX:  int8(in.MoveX), MoveY: int8(in.MoveY),
		Eat: in.Eat, PickUp: in.PickUp, Fight: in.Fight,
		Target: game.PlayerID(in.Target),
	}
}

// DecodeServerFrame parses and validates a frame from a mirror (the
// client's side).
func DecodeServerFrame(b []byte) (*mirrorpb.ServerFrame, error) {
	if len(b) > MaxServerFrame {
		return nil, fmt.Errorf("server frame of %d bytes, limit %d", len(b), MaxServerFrame)
	}
	var f mirrorpb.ServerFrame
	if err := proto.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("decode server frame: %w", err)
	}
	str := func(what, s string, limit int) error {
		if len(s) > limit || !utf8.ValidString(s) {
			return fmt.Errorf("%s of %d bytes: need UTF-8 of at most %d", what, len(s), limit)
		}
		return nil
	}
	switch body := f.Body.(type) {
	case *mirrorpb.ServerFrame_Challenge:
		c := body.Challenge
		if c == nil || len(c.Nonce) < 16 || len(c.Nonce) > 64 || c.Mirror == 0 {
			return nil, errors.New("challenge needs a 16..64-byte nonce and a mirror ID")
		}
	case *mirrorpb.ServerFrame_Welcome:
		w := body.Welcome
		if w == nil {
			return nil, errors.New("empty welcome")
		}
		if err := errors.Join(str("player", w.Player, game.MaxPlayerIDLen), game.ValidateName(w.Name)); err != nil {
			return nil, fmt.Errorf("welcome: %w", err)
		}
		if _, err := game.UnmarshalConfig(w.WorldConfig); err != nil {
			return nil, fmt.Errorf("welcome: %w", err)
		}
		if w.TickPeriodNs <= 0 || w.TickPeriodNs > int64(time.Minute) {
			return nil, fmt.Errorf("welcome: tick period %dns", w.TickPeriodNs)
		}
		if w.ReckonTicks > maxReckonTicks {
			return nil, fmt.Errorf("welcome: reckoning of %d ticks, at most %d", w.ReckonTicks, maxReckonTicks)
		}
	case *mirrorpb.ServerFrame_Update:
		u := body.Update
		if u == nil || u.Self == nil {
			return nil, errors.New("update without the player")
		}
		if len(u.Players) > maxUpdatePlayers || len(u.Objects) > maxUpdateObjects || len(u.Events) > maxUpdateEvents ||
			len(u.Confirmed) > maxUpdateEvents || len(u.Retracted) > maxUpdateEvents || len(u.Gone) > maxUpdatePlayers {
			return nil, errors.New("update over its limits")
		}
		for _, p := range append([]*mirrorpb.PlayerState{u.Self}, u.Players...) {
			if p == nil {
				return nil, errors.New("update: empty player")
			}
			if err := errors.Join(str("player id", p.Id, game.MaxPlayerIDLen), str("player name", p.Name, game.MaxNameLen)); err != nil {
				return nil, fmt.Errorf("update: %w", err)
			}
		}
		for _, id := range u.Gone {
			if err := str("gone player", id, game.MaxPlayerIDLen); err != nil {
				return nil, fmt.Errorf("update: %w", err)
			}
		}
		for _, o := range u.Objects {
			if o == nil || o.Kind < 1 || o.Kind > 2 || o.Amount > game.MaxObjectAmount || o.Max > game.MaxObjectAmount ||
				o.RegionX >= game.MaxRegions || o.RegionY >= game.MaxRegions || o.Slot > 0xffff {
				return nil, errors.New("update: object out of range")
			}
		}
		for _, e := range u.Events {
			if e == nil || e.Kind == 0 || e.Kind > 255 {
				return nil, errors.New("update: event out of range")
			}
			if err := errors.Join(str("event player", e.Player, game.MaxPlayerIDLen), str("event other", e.Other, game.MaxPlayerIDLen)); err != nil {
				return nil, fmt.Errorf("update: %w", err)
			}
		}
		if st := u.Status; st != nil && (len(st.Members) > crimp.MaxMembers || len(st.DelaysNs) > tss.MaxStates || len(st.Protocol) > 16) {
			return nil, errors.New("update: status over its limits")
		}
	case *mirrorpb.ServerFrame_Error:
		e := body.Error
		if e == nil {
			return nil, errors.New("empty error")
		}
		if err := errors.Join(str("error code", e.Code, 64), str("error message", e.Message, 1024)); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("server frame without a body")
	}
	return &f, nil
}

func encode(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		// Every message this package builds is valid protobuf.
		panic(fmt.Sprintf("mirror: encode %T: %v", m, err))
	}
	return b
}

// peerMessage is a decoded and validated CRIMP payload: a command (or
// release), a checkpoint, or one of the event protocol's: moves (their
// Mirror unset: the CRIMP sender's), decisions, consistent events. signed
// says the authority signed it.
type peerMessage struct {
	command    *Command
	checkpoint *tss.Checkpoint
	stateAddr  string // checkpoint: the holder's state-transfer address (rotate mode)
	moves      []Command
	decisions  []Command
	consistent *consistentPart
	signed     bool
}

// decodePeerMessage parses a CRIMP payload; a signed one must verify with
// the authority's public key pub and hold a release or a checkpoint.
func decodePeerMessage(b []byte, pub ed25519.PublicKey) (peerMessage, error) {
	if len(b) > crimp.MaxPayload {
		return peerMessage{}, fmt.Errorf("payload of %d bytes, limit %d", len(b), crimp.MaxPayload)
	}
	var m mirrorpb.PeerMessage
	if err := proto.Unmarshal(b, &m); err != nil {
		return peerMessage{}, fmt.Errorf("decode payload: %w", err)
	}
	s, ok := m.Body.(*mirrorpb.PeerMessage_Signed)
	if !ok {
		return peerMessageFromProto(&m)
	}
	body, err := openAuthority(pub, s.Signed)
	if err != nil {
		return peerMessage{}, err
	}
	var inner mirrorpb.PeerMessage
	if err := proto.Unmarshal(body, &inner); err != nil {
		return peerMessage{}, fmt.Errorf("decode signed payload: %w", err)
	}
	switch inner.Body.(type) {
	case *mirrorpb.PeerMessage_Release, *mirrorpb.PeerMessage_Checkpoint, *mirrorpb.PeerMessage_Decisions, *mirrorpb.PeerMessage_Consistent,
		*mirrorpb.PeerMessage_Command, *mirrorpb.PeerMessage_Moves: // the last two: a rotate-mode mirror's own
	default:
		return peerMessage{}, errors.New("signed payloads are releases, checkpoints, decisions, consistent events, commands and moves")
	}
	msg, err := peerMessageFromProto(&inner)
	msg.signed = err == nil
	return msg, err
}

func peerMessageFromProto(m *mirrorpb.PeerMessage) (peerMessage, error) {
	switch body := m.Body.(type) {
	case *mirrorpb.PeerMessage_Command:
		gc, err := game.UnmarshalCommand(body.Command)
		if err != nil {
			return peerMessage{}, err
		}
		if gc.Seq >= maxCommandSeq {
			return peerMessage{}, fmt.Errorf("command seq %d at or above %d", gc.Seq, uint64(maxCommandSeq))
		}
		return peerMessage{command: &Command{Command: gc}}, nil
	case *mirrorpb.PeerMessage_Moves:
		moves, err := movesFromProto(body.Moves)
		return peerMessage{moves: moves}, err
	case *mirrorpb.PeerMessage_Decisions:
		ds, err := decisionsFromProto(body.Decisions)
		return peerMessage{decisions: ds}, err
	case *mirrorpb.PeerMessage_Consistent:
		c, err := consistentFromProto(body.Consistent)
		return peerMessage{consistent: c}, err
	case *mirrorpb.PeerMessage_Release:
		r := body.Release
		if r == nil || r.Mirror == 0 || r.Dropped == 0 || r.Dropped == r.Mirror {
			return peerMessage{}, errors.New("release needs distinct non-zero mirror and dropped IDs")
		}
		return peerMessage{command: &Command{Command: game.Command{Stamp: r.Stamp, Mirror: r.Mirror, Seq: r.Seq}, Release: r.Dropped}}, nil
	case *mirrorpb.PeerMessage_Checkpoint:
		c := body.Checkpoint
		if c == nil || len(c.Hash) != 32 || c.Tick == 0 {
			return peerMessage{}, errors.New("checkpoint needs a tick and a 32-byte hash")
		}
		if len(c.StateAddr) > 255 {
			return peerMessage{}, fmt.Errorf("checkpoint with a %d-byte state address", len(c.StateAddr))
		}
		var cp tss.Checkpoint
		cp.Tick = c.Tick
		copy(cp.Hash[:], c.Hash)
		return peerMessage{checkpoint: &cp, stateAddr: c.StateAddr}, nil
	}
	return peerMessage{}, errors.New("payload without a body")
}

// commandMessage encodes a command as a CRIMP payload (a decision as a
// Decisions of one, which only a state transfer carries unsigned).
func commandMessage(c Command) (*mirrorpb.PeerMessage, error) {
	if c.Decision != 0 {
		return decisionsMessage([]Command{c})
	}
	if c.Release != 0 {
		return &mirrorpb.PeerMessage{Body: &mirrorpb.PeerMessage_Release{Release: &mirrorpb.Release{
			Stamp: c.Stamp, Mirror: c.Mirror, Seq: c.Seq, Dropped: c.Release,
		}}}, nil
	}
	b, err := c.Command.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return &mirrorpb.PeerMessage{Body: &mirrorpb.PeerMessage_Command{Command: b}}, nil
}

func checkpointMessage(cp tss.Checkpoint) *mirrorpb.PeerMessage {
	return &mirrorpb.PeerMessage{Body: &mirrorpb.PeerMessage_Checkpoint{Checkpoint: &mirrorpb.Checkpoint{
		Tick: cp.Tick, Hash: slices.Clone(cp.Hash[:]),
	}}}
}

// transfer is a decoded state transfer.
type transfer struct {
	protocol  Protocol
	authority uint32
	cfg       tss.Config
	state     *State
	pending   []Command
	now       int64
}

// decodeTransfer parses and validates a state transfer for a mirror
// running game config cfg.
func decodeTransfer(b []byte, cfg game.Config) (transfer, error) {
	if len(b) > crimp.MaxStateSize {
		return transfer{}, fmt.Errorf("transfer of %d bytes, limit %d", len(b), crimp.MaxStateSize)
	}
	var m mirrorpb.Transfer
	if err := proto.Unmarshal(b, &m); err != nil {
		return transfer{}, fmt.Errorf("decode transfer: %w", err)
	}
	if m.Version != ProtocolVersion {
		return transfer{}, fmt.Errorf("transfer version %d, want %d", m.Version, ProtocolVersion)
	}
	if m.Authority == 0 {
		return transfer{}, errors.New("transfer without an authority")
	}
	if len(m.DelaysNs) == 0 || len(m.DelaysNs) > tss.MaxStates {
		return transfer{}, fmt.Errorf("transfer with %d delays", len(m.DelaysNs))
	}
	tc := tss.Config{
		Epoch:      m.EpochNs,
		TickPeriod: time.Duration(m.TickPeriodNs),
		WeakMargin: m.WeakMargin,
		MaxSkew:    time.Duration(m.MaxSkewNs),
	}
	for _, d := range m.DelaysNs {
		tc.Delays = append(tc.Delays, time.Duration(d))
	}
	if want := time.Second / time.Duration(cfg.TickRate); tc.TickPeriod != want {
		return transfer{}, fmt.Errorf("transfer tick period %v, the world's is %v", tc.TickPeriod, want)
	}
	if err := tc.WithDefaults().Validate(); err != nil {
		return transfer{}, fmt.Errorf("transfer: %w", err)
	}
	st, err := stateFromProto(m.State, cfg)
	if err != nil {
		return transfer{}, fmt.Errorf("transfer state: %w", err)
	}
	if st.authority != AnyAuthority && st.authority != m.Authority {
		return transfer{}, fmt.Errorf("transfer from authority %d of a state whose authority is %d", m.Authority, st.authority)
	}
	if len(m.Pending) > maxTransferPending {
		return transfer{}, fmt.Errorf("transfer with %d pending commands", len(m.Pending))
	}
	if m.Protocol > uint32(ProtocolEvent) {
		return transfer{}, fmt.Errorf("transfer of protocol %d", m.Protocol)
	}
	t := transfer{protocol: Protocol(m.Protocol), authority: m.Authority, cfg: tc, state: st, now: m.NowNs}
	for i, pm := range m.Pending {
		msg, err := peerMessageFromProto(pm)
		switch {
		case err == nil && msg.command != nil:
			t.pending = append(t.pending, *msg.command)
		case err == nil && len(msg.decisions) == 1 && t.protocol == ProtocolEvent:
			t.pending = append(t.pending, msg.decisions[0])
		default:
			return transfer{}, fmt.Errorf("transfer pending command %d: not a command (%v)", i, err)
		}
	}
	return t, nil
}

// encodeTransfer builds a state transfer.
func encodeTransfer(authority uint32, protocol Protocol, cfg tss.Config, st *State, pending []Command, now int64) ([]byte, error) {
	sp, err := st.toProto()
	if err != nil {
		return nil, err
	}
	m := &mirrorpb.Transfer{
		Version: ProtocolVersion, Authority: authority,
		EpochNs: cfg.Epoch, TickPeriodNs: int64(cfg.TickPeriod), WeakMargin: cfg.WeakMargin, MaxSkewNs: int64(cfg.MaxSkew),
		State: sp, NowNs: now, Protocol: uint32(protocol),
	}
	for _, d := range cfg.Delays {
		m.DelaysNs = append(m.DelaysNs, int64(d))
	}
	for _, c := range pending {
		pm, err := commandMessage(c)
		if err != nil {
			return nil, err
		}
		m.Pending = append(m.Pending, pm)
	}
	return proto.Marshal(m)
}
