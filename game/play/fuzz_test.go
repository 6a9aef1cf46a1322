package play

import (
	"bufio"
	"bytes"
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
		DefenderSeen: &playpb.Fighter{Skill: 12, Health: 100}, Result: &playpb.Result{Hit: true, DefenderDamage: 8, Roll: 20}})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAttack(b)
		if err != nil {
			return
		}
		if a.Attacker.Skill < 1 || a.Attacker.Health > 100 || a.Result.Roll > 99 || len(b) > MaxFightMessageBytes {
			t.Fatalf("accepted out-of-range attack %+v", a)
		}
	})
}

func FuzzDecodeOutcome(f *testing.F) {
	fuzzSeeds(f, &playpb.Outcome{Accepted: true, Defender: &playpb.Fighter{Skill: 10, Health: 100},
		AttackerSeen: &playpb.Fighter{Skill: 12, Health: 40},
		Result:       &playpb.Result{Roll: 70, AttackerDamage: 2}}, &playpb.Outcome{Refusal: "out of range"})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := DecodeOutcome(b)
		if err != nil {
			return
		}
		if o.Accepted && (o.Defender == nil || o.AttackerSeen == nil || o.Result == nil) {
			t.Fatalf("accepted outcome without its fields: %+v", o)
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

// FuzzReadFrame checks the stream framing: a frame is never longer than its
// limit, whatever the length prefix claims.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{3, 1, 2, 3}, 8)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 8)
	f.Add([]byte{}, 0)
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		limit = max(min(limit, 4096), 0)
		out, err := readFrame(bufio.NewReader(bytes.NewReader(b)), limit)
		if err == nil && len(out) > limit {
			t.Fatalf("frame of %d bytes with limit %d", len(out), limit)
		}
	})
}
