package token

import (
	"crypto/ed25519"
	"encoding/base64"
	"testing"
	"time"
)

// signRaw signs an arbitrary payload the way Sign does, so tests and the
// fuzzer can reach the claims decoder with correctly signed input.
func signRaw(priv ed25519.PrivateKey, payload string) string {
	signed := prefix + base64.RawURLEncoding.EncodeToString([]byte(payload))
	return signed + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(signed)))
}

// FuzzVerify feeds arbitrary tokens to the verifier, both as given and as
// correctly signed payloads, and checks that it never panics and never
// accepts a token naming another peer.
func FuzzVerify(f *testing.F) {
	seed := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	pub := seed.Public().(ed25519.PublicKey)
	alice := newPeer(f)
	good, err := Sign(seed, sampleClaims(alice))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add("ow1.e30.AAAA")
	f.Add(`{"sid":"s","acc":"a","name":"n","peer":"` + alice.String() + `","iat":1,"exp":9999999999}`)
	f.Add("")
	f.Fuzz(func(t *testing.T, in string) {
		now := t0.Add(time.Minute)
		if c, err := Verify(pub, in, alice, now); err == nil && c.Peer != alice {
			t.Fatalf("accepted token for %s as %s", c.Peer, alice)
		}
		if len(in) > MaxLen {
			return
		}
		c, err := Verify(pub, signRaw(seed, in), alice, now)
		if err != nil {
			return
		}
		if c.Peer != alice || !now.Before(c.Expiry) || c.Session == "" || c.Account == "" || c.Player == "" {
			t.Fatalf("accepted bad claims %+v", c)
		}
	})
}
