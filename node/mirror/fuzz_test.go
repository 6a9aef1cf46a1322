package mirror

import (
	"bytes"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/tss"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// FuzzDecodeClientFrame: any bytes either fail cleanly or decode to a
// frame within every bound the server relies on.
func FuzzDecodeClientFrame(f *testing.F) {
	core := NewClientCore(testKey(f), "ow1.token.sig")
	f.Add(core.Input(game.Input{MoveX: 127, Eat: true}, false))
	f.Add(core.Input(game.Input{Player: "p", Fight: true, Target: "q"}, true))
	f.Add(core.Reauth("ow1.x.y"))
	f.Add(encode(&mirrorpb.ClientFrame{Body: &mirrorpb.ClientFrame_Hello{Hello: &mirrorpb.Hello{Version: 1, Token: "t", PublicKey: []byte{1}, Signature: []byte{2}}}}))
	f.Add([]byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeClientFrame(b)
		if err != nil {
			return
		}
		if in, ok := fr.Body.(*mirrorpb.ClientFrame_Input); ok {
			for _, x := range append(in.Input.Previous, in.Input.Input) {
				if x.MoveX < -127 || x.MoveX > 127 || len(x.Target) > game.MaxPlayerIDLen {
					t.Fatalf("an input out of bounds decoded: %v", x)
				}
				gi := gameInput(x, "me")
				if _, err := gi.MarshalBinary(); err != nil {
					t.Fatalf("a decoded input makes no game input: %v", err)
				}
			}
		}
	})
}

// FuzzClientCore: whatever a mirror sends, the client core fails cleanly
// and never panics.
func FuzzClientCore(f *testing.F) {
	cfg, _ := testGame().MarshalBinary()
	f.Add(encode(&mirrorpb.ServerFrame{Body: &mirrorpb.ServerFrame_Challenge{Challenge: &mirrorpb.Challenge{Version: 1, Nonce: make([]byte, 32), Mirror: 2}}}),
		encode(&mirrorpb.ServerFrame{Body: &mirrorpb.ServerFrame_Welcome{Welcome: &mirrorpb.Welcome{Player: "p", Name: "P", Mirror: 2, WorldConfig: cfg, TickPeriodNs: int64(time.Second / 30)}}}),
		encode(&mirrorpb.ServerFrame{Body: &mirrorpb.ServerFrame_Update{Update: &mirrorpb.Update{Self: &mirrorpb.PlayerState{Id: "p", X: 300, Alive: true},
			Objects: []*mirrorpb.ObjectState{{Kind: 1, Amount: 3, Max: 5}}, Events: []*mirrorpb.EventNote{{Id: 1, Kind: 3, Tentative: true}}, Retracted: []uint64{1},
			Status: &mirrorpb.MirrorStatus{Mirror: 2, Members: []uint32{1}}}}}))
	key := testKey(f)
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		core := NewClientCore(key, "tok")
		for _, fr := range [][]byte{a, b, c} {
			if _, err := core.Handle(fr, time.Unix(0, 0)); err != nil {
				return
			}
		}
		core.View()
		core.Observation()
		core.Input(game.Input{MoveX: 1}, false)
	})
}

// fuzzAuthority is the authority's key in the fuzz targets.
var fuzzAuthority = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))

// FuzzDecodePeerMessage: a CRIMP payload either fails cleanly or decodes
// to exactly one valid command, checkpoint, set of moves, decisions or
// consistent events; what decodes as signed is a release, a checkpoint,
// decisions or consistent events; every decoded part is within its bounds.
func FuzzDecodePeerMessage(f *testing.F) {
	release := Command{Command: game.Command{Stamp: 5, Mirror: 1, Seq: 3}, Release: 2}
	for _, c := range []Command{
		cmdOf(2, 1, game.CommandJoin, "ann"),
		cmdOf(2, 2, game.CommandInput, "ann"),
		release,
	} {
		pm, err := commandMessage(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(encode(pm))
	}
	cp := checkpointMessage(tss.Checkpoint{Tick: 30, Hash: [32]byte{1}})
	f.Add(encode(cp))
	f.Add(signedPeerMessage(fuzzAuthority, cp))
	withAddr := checkpointMessage(tss.Checkpoint{Tick: 60, Hash: [32]byte{2}})
	withAddr.GetCheckpoint().StateAddr = "10.0.0.1:8651" // rotate mode: the holder's state address
	f.Add(signedPeerMessage(fuzzAuthority, withAddr))
	rm, _ := commandMessage(release)
	f.Add(signedPeerMessage(fuzzAuthority, rm))
	move := cmdOf(2, 4, game.CommandInput, "ann")
	f.Add(encode(movesMessage("ann", []Command{move, cmdOf(2, 3, game.CommandInput, "ann")})))
	act := Command{Command: game.Command{Stamp: 7, Mirror: 2, Seq: 5, Op: game.CommandInput, Player: "ann",
		Input: game.Input{Player: "ann", Fight: true, Target: "bob"}}, Decision: 9}
	dm, _ := decisionsMessage([]Command{act})
	f.Add(signedPeerMessage(fuzzAuthority, dm))
	f.Add(encode(dm))
	for _, cm := range consistentMessages(12, []game.Event{{Tick: 12, Kind: game.EventHit, Player: "ann", Other: "bob", Amount: 3},
		{Tick: 12, Kind: game.EventObjectRestored, Object: game.ObjectID{Region: game.RegionCoord{X: 1, Y: 2}, Slot: 4}, Amount: 5}}) {
		f.Add(signedPeerMessage(fuzzAuthority, cm))
	}
	pub := fuzzAuthority.Public().(ed25519.PublicKey)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodePeerMessage(b, pub)
		if err != nil {
			return
		}
		parts := 0
		for _, ok := range []bool{m.command != nil, m.checkpoint != nil, m.moves != nil, m.decisions != nil, m.consistent != nil} {
			if ok {
				parts++
			}
		}
		if parts != 1 {
			t.Fatalf("%d parts decoded, want exactly one", parts)
		}
		if m.signed && m.moves != nil {
			t.Fatal("signed moves decoded")
		}
		if len(m.moves) > maxMoves || len(m.decisions) > maxDecisions {
			t.Fatalf("%d moves, %d decisions decoded", len(m.moves), len(m.decisions))
		}
		for _, c := range append(m.moves, m.decisions...) {
			c.Mirror = max(c.Mirror, 1)
			if _, err := c.Command.MarshalBinary(); err != nil || c.Seq >= maxCommandSeq || c.Decision != 0 && c.Decision < c.Stamp {
				t.Fatalf("decoded %v does not hold: %v", c, err)
			}
		}
		if cp := m.consistent; cp != nil && (cp.part >= cp.parts || len(cp.events) > eventsPerPart) {
			t.Fatalf("consistent part %d of %d with %d events", cp.part, cp.parts, len(cp.events))
		}
		if len(m.stateAddr) > 255 {
			t.Fatalf("a %d-byte state address decoded", len(m.stateAddr))
		}
		if m.signed && m.command != nil && m.command.Release == 0 {
			t.Fatal("a signed plain command decoded")
		}
		if m.command != nil && m.command.Release == 0 {
			if _, err := m.command.Command.MarshalBinary(); err != nil {
				t.Fatalf("decoded command does not encode: %v", err)
			}
		}
	})
}

// FuzzDecodeTransfer: a state transfer either fails cleanly or gives a
// state and synchronizer configuration that work.
func FuzzDecodeTransfer(f *testing.F) {
	st := NewState(mustWorld(f), 1)
	st.Advance([]Command{cmdOf(1, 1, game.CommandJoin, "ann")})
	cfg := tss.Config{Epoch: 1000, TickPeriod: time.Second / 30, Delays: DefaultDelays(), MaxSkew: time.Millisecond}
	b, err := encodeTransfer(1, ProtocolCommand, cfg, st, []Command{cmdOf(1, 2, game.CommandInput, "ann")}, 2000)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	signed, err := signedTransfer(fuzzAuthority, b)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(signed)
	decision := Command{Command: game.Command{Stamp: 1500, Mirror: 1, Seq: 3, Op: game.CommandInput, Player: "ann",
		Input: game.Input{Player: "ann", Eat: true}}, Decision: 1600}
	ev, err := encodeTransfer(1, ProtocolEvent, cfg, st, []Command{cmdOf(1, 2, game.CommandInput, "ann"), decision}, 2000)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ev)
	f.Add([]byte{})
	pub := fuzzAuthority.Public().(ed25519.PublicKey)
	f.Fuzz(func(t *testing.T, b []byte) {
		if body, err := openTransfer(pub, b); err == nil {
			b = body // as the mirror takes it: signed
		}
		tr, err := decodeTransfer(b, testGame())
		if err != nil {
			return
		}
		sy, err := tss.New(tr.cfg, tr.state, func() *State { return &State{} }, tss.Options[Command]{})
		if err != nil {
			t.Fatalf("a decoded transfer makes no synchronizer: %v", err)
		}
		for _, c := range tr.pending {
			sy.Deliver(c, tr.now)
		}
		sy.Tick(tr.now + int64(time.Second))
	})
}

// FuzzUnmarshalState: a dumped state either fails cleanly or decodes to
// one that re-encodes to the same hash.
func FuzzUnmarshalState(f *testing.F) {
	st := NewState(mustWorld(f), 1)
	st.Advance([]Command{cmdOf(2, 1, game.CommandJoin, "ann")})
	b, _ := st.MarshalBinary()
	f.Add(b)
	st.Advance([]Command{cmdOf(2, 2, game.CommandLeave, "ann")}) // a departure
	b, _ = st.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := UnmarshalState(b, testGame())
		if err != nil {
			return
		}
		again, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var m mirrorpb.MirrorState
		if proto.Unmarshal(again, &m) != nil {
			t.Fatal("re-encoding does not decode")
		}
		s.Advance([]Command{cmdOf(2, 9, game.CommandInput, "ann")})
	})
}

func mustWorld(t testing.TB) *game.World {
	w, err := game.NewWorld(testGame())
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func testKey(t testing.TB) crypto.PrivKey {
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
