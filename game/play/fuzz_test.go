package play

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/game/play/playpb"
)

const fuzzPeer = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"

func fuzzSeeds(f *testing.F, msgs ...proto.Message) {
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
}

func FuzzDecodeAttack(f *testing.F) {
	fuzzSeeds(f, &playpb.Attack{Counter: 3, Attacker: &playpb.Fighter{Skill: 10, Health: 90},
		DefenderSeen: &playpb.Fighter{Skill: 12, Health: 100}})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAttack(b)
		if err != nil {
			return
		}
		if a.Attacker.Skill < 1 || a.Attacker.Health > 100 || a.DefenderSeen.Skill < 1 || len(b) > MaxFightMessageBytes {
			t.Fatalf("accepted out-of-range attack %+v", a)
		}
	})
}

func FuzzDecodeOutcome(f *testing.F) {
	fuzzSeeds(f, &playpb.Outcome{Accepted: true, Defender: &playpb.Fighter{Skill: 10, Health: 100},
		AttackerSeen: &playpb.Fighter{Skill: 12, Health: 40},
		Result:       &playpb.Result{Roll: 70, AttackerDamage: 2}, Nonce: make([]byte, NonceBytes)},
		&playpb.Outcome{Refusal: "out of range"})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := DecodeOutcome(b)
		if err != nil {
			return
		}
		if o.Accepted && (o.Defender == nil || o.AttackerSeen == nil || o.Result == nil || len(o.Nonce) != NonceBytes) {
			t.Fatalf("accepted outcome without its fields: %+v", o)
		}
	})
}

func FuzzDecodeCommitment(f *testing.F) {
	fuzzSeeds(f, &playpb.Commitment{NonceHash: nonceCommitment(make([]byte, NonceBytes))})
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := DecodeCommitment(b); err == nil && len(c.NonceHash) != 32 {
			t.Fatalf("accepted a commitment of %d bytes", len(c.NonceHash))
		}
	})
}

func FuzzDecodeReveal(f *testing.F) {
	fuzzSeeds(f, &playpb.Reveal{Nonce: make([]byte, NonceBytes)}, &playpb.Reveal{Nonce: []byte("short")})
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodeReveal(b); err == nil && len(r.Nonce) != NonceBytes {
			t.Fatalf("accepted a nonce of %d bytes", len(r.Nonce))
		}
	})
}

func FuzzDecodeSettle(f *testing.F) {
	fuzzSeeds(f, &playpb.Settle{Result: &playpb.Result{Hit: true, DefenderDamage: 9, AttackerDamage: 2, Roll: 12}},
		&playpb.Settle{Result: &playpb.Result{Roll: 100}})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSettle(b)
		if err != nil {
			return
		}
		if r := s.Result; r.Roll < 0 || r.Roll > 99 || r.DefenderDamage < 0 || r.AttackerDamage > 100 {
			t.Fatalf("accepted out-of-range result %+v", r)
		}
	})
}

func FuzzDecodeSocial(f *testing.F) {
	id, err := peer.Decode(fuzzPeer)
	if err != nil {
		f.Fatal(err)
	}
	fuzzSeeds(f,
		&playpb.Social{Body: &playpb.Social_Chat{Chat: &playpb.ChatLine{Sender: []byte(id), Name: "Ada", RegionX: 1, Text: "hi"}}},
		&playpb.Social{Body: &playpb.Social_Card{Card: &playpb.Card{Player: []byte(id), Name: "Ada", Health: 50, Skill: 10, Alive: true, Seq: 1}}},
	)
	cfg := testGame()
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSocial(b, cfg)
		if err != nil {
			return
		}
		switch body := s.Body.(type) {
		case *playpb.Social_Chat:
			if body.Chat.Text == "" || body.Chat.RegionX >= int32(cfg.RegionsX) {
				t.Fatalf("accepted bad chat line %+v", body.Chat)
			}
		case *playpb.Social_Card:
			if body.Card.Skill < 1 || body.Card.Seq == 0 {
				t.Fatalf("accepted bad card %+v", body.Card)
			}
		default:
			t.Fatalf("accepted empty message")
		}
	})
}

func FuzzDecodeWhisper(f *testing.F) {
	fuzzSeeds(f, &playpb.Whisper{FromName: "Ada", Text: "psst"})
	f.Fuzz(func(t *testing.T, b []byte) {
		if w, err := DecodeWhisper(b); err == nil && (w.Text == "" || w.FromName == "") {
			t.Fatalf("accepted empty whisper %+v", w)
		}
	})
}
