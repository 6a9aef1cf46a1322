package guard

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions"
)

func newID(t testing.TB) peer.ID {
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

func signed(t testing.TB, key ed25519.PrivateKey, holder peer.ID, issued, expiry time.Time) []byte {
	t.Helper()
	tok, err := token.Sign(key, token.Claims{Session: "s1", Account: "a1", Player: "alice", Peer: holder, IssuedAt: issued, Expiry: expiry})
	if err != nil {
		t.Fatal(err)
	}
	return []byte(tok)
}

// TestTokenAuthorizer checks the verdicts offline: only a current token
// signed by the account server for the presenting peer passes.
func TestTokenAuthorizer(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	alice, mallory := newID(t), newID(t)
	now := time.Now()
	good := signed(t, key, alice, now.Add(-time.Minute), now.Add(time.Hour))
	a := TokenAuthorizer{Key: pub}
	if err := a.Authorize(alice, good); err != nil {
		t.Fatalf("valid token refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		from peer.ID
		tok  []byte
		want error
	}{
		{"no token", alice, nil, ErrNoToken},
		{"another peer's token", mallory, good, token.ErrWrongPeer},
		{"expired", alice, signed(t, key, alice, now.Add(-2*time.Hour), now.Add(-time.Hour)), token.ErrExpired},
		{"signed by another key", alice, signed(t, otherKey, alice, now.Add(-time.Minute), now.Add(time.Hour)), token.ErrBadSignature},
		{"garbage", alice, []byte("ow1.garbage.garbage"), token.ErrMalformed},
		{"oversized", alice, []byte(strings.Repeat("x", token.MaxLen+1)), token.ErrMalformed},
	} {
		err := a.Authorize(tc.from, tc.tok)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestCoordinatorRefusesBadTokens: a coordinator using TokenAuthorizer
// refuses a peer that presents no token, another peer's token, an expired
// or a garbage token, and writes nothing for it; the same peer with its
// own token is served.
func TestCoordinatorRefusesBadTokens(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		as := newAccountServer(t, time.Second)
		cl := newCluster(t, as)
		for _, name := range []string{"alice", "bob", "mallory"} {
			cl.add(t, name, false)
		}
		x := cl.members[2]
		// A region that mallory does not coordinate, so its requests go out.
		var region regions.Coord
		for i := 0; ; i++ {
			region = regions.Coord{X: i % 4, Y: i / 4}
			if co, _ := regions.Placement(regions.Key(world, region), cl.ids()); co != x.id() {
				break
			}
		}
		cl.settle(t, region)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := x.svc.Client().Initialize(ctx, region, "own", []byte("1")); err != nil {
			t.Fatalf("with its own token: %v", err)
		}
		now := time.Now()
		for _, tc := range []struct {
			name string
			tok  []byte
			want string
		}{
			{"no token", []byte{}, "no login token"},
			{"another peer's token", cl.members[0].guard.Tokens.Token(), "another peer"},
			{"expired token", signed(t, as.key, x.id(), now.Add(-2*time.Hour), now.Add(-time.Hour)), "expired"},
			{"garbage token", []byte("ow1.garbage.garbage"), "malformed"},
		} {
			x.token.Store(&tc.tok)
			_, err := x.svc.Client().Initialize(ctx, region, "stolen", []byte("2"))
			if !errors.Is(err, regions.ErrRejected) || !strings.Contains(err.Error(), "denied") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: got %v, want a denial naming %q", tc.name, err, tc.want)
			}
		}
		x.token.Store(nil)
		st, err := cl.members[0].svc.Client().Get(ctx, region)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Objects) != 1 || st.Objects[0].ID != "own" {
			t.Fatalf("region holds %+v, want only the object written with a valid token", st.Objects)
		}
	})
}
