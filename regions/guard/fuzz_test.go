package guard

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
)

// FuzzAuthorize: no input makes the authorizer panic, no input passes for
// a peer it was not issued to, and what passes carries the signed claims
// of the presenting peer (only a re-encoding of the good token can).
func FuzzAuthorize(f *testing.F) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	holder, other := newID(f), newID(f)
	now := time.Now()
	good := signed(f, key, holder, now.Add(-time.Minute), now.Add(time.Hour))
	a := TokenAuthorizer{Key: pub, Now: func() time.Time { return now }}
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte("ow1.e30.AAAA"))
	f.Add(append(bytes.Clone(good), '='))
	f.Fuzz(func(t *testing.T, tok []byte) {
		if a.Authorize(other, tok) == nil {
			t.Fatalf("token %q accepted from a peer it was not issued to", tok)
		}
		if a.Authorize(holder, tok) == nil {
			c, err := token.Verify(pub, string(tok), holder, now)
			if err != nil || c.Peer != holder || c.Player != "alice" {
				t.Fatalf("token %q accepted: claims %+v, %v", tok, c, err)
			}
		}
	})
}
