package token

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func newPeer(t testing.TB) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func newKey(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

var t0 = time.Unix(1_800_000_000, 0)

func sampleClaims(p peer.ID) Claims {
	return Claims{
		Session:  "s1",
		Account:  "a1",
		Player:   "alice",
		Peer:     p,
		IssuedAt: t0,
		Expiry:   t0.Add(15 * time.Minute),
	}
}

func TestVerify(t *testing.T) {
	pub, priv := newKey(t)
	otherPub, _ := newKey(t)
	alice, mallory := newPeer(t), newPeer(t)
	tok, err := Sign(priv, sampleClaims(alice))
	if err != nil {
		t.Fatal(err)
	}

	c, err := Verify(pub, tok, alice, t0.Add(time.Minute))
	if err != nil {
		t.Fatalf("valid token: %v", err)
	}
	if c != sampleClaims(alice) {
		t.Fatalf("claims round trip: got %+v want %+v", c, sampleClaims(alice))
	}

	tamperedPayload := func() string {
		other := sampleClaims(alice)
		other.Player = "root"
		forged, _ := Sign(priv, other)
		// Keep alice's signature, swap in the other payload.
		return forged[:strings.LastIndexByte(forged, '.')] + tok[strings.LastIndexByte(tok, '.'):]
	}()

	cases := []struct {
		name string
		pub  ed25519.PublicKey
		tok  string
		peer peer.ID
		now  time.Time
		want error
	}{
		{"wrong peer", pub, tok, mallory, t0.Add(time.Minute), ErrWrongPeer},
		{"expired", pub, tok, alice, t0.Add(15 * time.Minute), ErrExpired},
		{"issued in the future", pub, tok, alice, t0.Add(-2 * IssuedAtLeeway), ErrNotYetValid},
		{"other server's key", otherPub, tok, alice, t0, ErrBadSignature},
		{"payload swapped", pub, tamperedPayload, alice, t0, ErrBadSignature},
		{"garbage", pub, "hello", alice, t0, ErrMalformed},
		{"empty", pub, "", alice, t0, ErrMalformed},
		{"no signature", pub, "ow1.e30", alice, t0, ErrMalformed},
		{"bad base64", pub, "ow1.!!!." + strings.Repeat("A", 86), alice, t0, ErrMalformed},
		{"too long", pub, "ow1." + strings.Repeat("A", MaxLen), alice, t0, ErrMalformed},
		{"other version", pub, "ow2" + tok[3:], alice, t0, ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tc.pub, tc.tok, tc.peer, tc.now)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSignRejectsBadClaims(t *testing.T) {
	_, priv := newKey(t)
	p := newPeer(t)
	bad := []func(*Claims){
		func(c *Claims) { c.Session = "" },
		func(c *Claims) { c.Account = strings.Repeat("a", 65) },
		func(c *Claims) { c.Player = "" },
		func(c *Claims) { c.Peer = "" },
		func(c *Claims) { c.Expiry = c.IssuedAt },
	}
	for i, mutate := range bad {
		c := sampleClaims(p)
		mutate(&c)
		if _, err := Sign(priv, c); !errors.Is(err, ErrMalformed) {
			t.Errorf("case %d: got %v, want ErrMalformed", i, err)
		}
	}
}

// A signed payload with extra fields or a bad peer ID is still rejected:
// the decoder is strict even for correctly signed input.
func TestParseStrictPayload(t *testing.T) {
	pub, priv := newKey(t)
	for _, payload := range []string{
		`{"sid":"s","acc":"a","name":"n","peer":"12D3KooWxyz","iat":1,"exp":2}`,
		`{"sid":"s","acc":"a","name":"n","peer":"x","iat":1,"exp":2,"admin":true}`,
		`{"sid":"s"}{"sid":"t"}`,
		`[]`,
	} {
		tok := signRaw(priv, payload)
		if _, err := Parse(pub, tok); !errors.Is(err, ErrMalformed) {
			t.Errorf("payload %s: got %v, want ErrMalformed", payload, err)
		}
	}
}

func TestPublicKeyText(t *testing.T) {
	pub, _ := newKey(t)
	got, err := DecodePublicKey(" " + EncodePublicKey(pub) + "\n")
	if err != nil || !got.Equal(pub) {
		t.Fatalf("round trip: %v", err)
	}
	for _, bad := range []string{"", "!!!", "AAAA"} {
		if _, err := DecodePublicKey(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
