package probe

import (
	"testing"
	"time"
)

func FuzzDecodePing(f *testing.F) {
	f.Add(EncodePing(7))
	f.Add([]byte("owp\x01\x01"))
	f.Add(append([]byte("owp\x01\x01"), make([]byte, 200)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePing(b)
		if err == nil && (len(b) < MinPingSize || len(b) > MaxPacketSize || p == nil) {
			t.Fatalf("accepted a ping of %d bytes", len(b))
		}
	})
}

func FuzzDecodePong(f *testing.F) {
	pong, _ := EncodePong(&Pong{Nonce: 1, GameId: "g", MirrorId: 2, LoadPermille: 3})
	f.Add(pong)
	f.Add([]byte("owp\x01\x02"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePong(b)
		if err != nil {
			return
		}
		if len(p.GameId) > MaxGameIDLen {
			t.Fatalf("accepted a game id of %d bytes", len(p.GameId))
		}
		if _, err := EncodePong(p); err != nil {
			t.Fatalf("decoded pong does not encode again: %v", err)
		}
	})
}

// FuzzAnswer drives the responder's protocol with arbitrary datagrams:
// it never panics and never answers with more bytes than it got.
func FuzzAnswer(f *testing.F) {
	f.Add(EncodePing(1), "10.0.0.1")
	f.Add([]byte{}, "")
	r, err := NewResponder(ResponderConfig{GameID: "fuzzed-game-with-a-long-name-0123456789-0123456789", MirrorID: ^uint32(0),
		Load: func() uint32 { return 5000 }, Logger: quiet()})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1000, 0)
	f.Fuzz(func(t *testing.T, b []byte, source string) {
		now = now.Add(time.Second) // keep the limits out of the way
		pong, refused := r.answer(b, source, now)
		if refused != "" {
			return
		}
		if len(pong) > len(b) {
			t.Fatalf("pong of %d bytes for %d", len(pong), len(b))
		}
		p, err := DecodePong(pong)
		if err != nil || p.LoadPermille > 1000 {
			t.Fatalf("bad pong %v %v", p, err)
		}
	})
}
