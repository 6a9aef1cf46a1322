package play

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	dto "github.com/prometheus/client_model/go"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions/guard"
	"github.com/overworld-p2p/overworld/regions/position"
)

// stolenToken logs a victim in from another peer ID and returns its token
// and the account server's public key.
func stolenToken(t *testing.T, url string) ([]byte, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := accounts.NewClient(url, accounts.WithHTTPClient(accountsHTTP))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(ctx, "victim", "victim-password"); err != nil {
		t.Fatal(err)
	}
	_, pk, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	victim, err := peer.IDFromPublicKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := c.Login(ctx, "victim", "victim-password", victim)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := c.PublicKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(tokens.AccessToken), pub
}

func counterValue(t *testing.T, p *Peer, reason string) float64 {
	t.Helper()
	var m dto.Metric
	if err := p.metrics.chatRejected.WithLabelValues(reason).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestTopicsAdmitOnlyTokenHolders: two players logged in on the account
// server see each other's positions, cards and chat. A player without an
// account (it serves no token) and one that shows a token stolen from
// another peer ID are refused by both topic validators: none of their
// positions, cards or chat lines reach the logged-in players, and the
// refusals are counted.
func TestTopicsAdmitOnlyTokenHolders(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		url := startAccounts(t)
		stolen, pub := stolenToken(t, url)
		rc := game.RegionCoord{X: 1, Y: 0}
		const thiefIdx, nobodyIdx, aliceIdx, bobIdx = 0, 1, 2, 3
		var thiefAdmission atomic.Pointer[guard.Admission]
		tn := newTestNetWith(t, 4, rc, func(i int, p *Peer) {
			if i == thiefIdx {
				// The thief serves the stolen token from the start.
				a, err := guard.NewAdmission(p.h, guard.AdmissionConfig{Key: pub, Token: func() []byte { return stolen }, Logger: testLogger()})
				if err != nil {
					t.Fatal(err)
				}
				thiefAdmission.Store(a)
				t.Cleanup(a.Close)
			}
		}, func(i int, c *Config) {
			switch i {
			case aliceIdx, bobIdx:
				c.Name = ""
				c.Account = &Account{URL: url, User: []string{"alice", "bob"}[i-aliceIdx], Password: "password", Register: true}
			case thiefIdx:
				c.Name = "thief"
			case nobodyIdx:
				c.Name = "nobody"
			}
		})
		thief, nobody, alice, bob := tn.peers[thiefIdx], tn.peers[nobodyIdx], tn.peers[aliceIdx], tn.peers[bobIdx]
		honest := []*Peer{alice, bob}
		outsiders := []*Peer{thief, nobody}
		if alice.admit == nil || thief.admit != nil {
			t.Fatal("admission wired without an account or missing with one")
		}

		// leaks records any sight of an outsider by a logged-in player: in the
		// position view, as a card, or as a chat line.
		var leaks []string
		check := func() {
			for _, h := range honest {
				for _, s := range h.pos.View(time.Now()) {
					for _, o := range outsiders {
						if s.Player == o.h.ID() {
							leaks = append(leaks, h.Name()+" saw the position of "+o.Name())
						}
					}
				}
				h.social.mu.Lock()
				for _, o := range outsiders {
					if h.social.cards[o.h.ID()] != nil {
						leaks = append(leaks, h.Name()+" holds the card of "+o.Name())
					}
				}
				h.social.mu.Unlock()
				for _, m := range h.Messages() {
					if m.Kind == "chat" && (m.From == "thief" || m.From == "nobody") {
						leaks = append(leaks, h.Name()+" got a chat line from "+m.From)
					}
				}
			}
		}
		poll := func(what string, cond func() bool) {
			t.Helper()
			waitFor(t, 40*time.Second, what, func() bool {
				check()
				return cond()
			})
		}

		poll("alice and bob to see each other with cards", func() bool {
			_, ab := sees(alice, bob.ID())
			_, ba := sees(bob, alice.ID())
			return ab && ba
		})
		heard := func(p *Peer, from, text string) bool {
			for _, m := range p.Messages() {
				if m.Kind == "chat" && m.From == from && m.Text == text {
					return true
				}
			}
			return false
		}
		poll("bob's chat line to reach alice", func() bool {
			if !heard(alice, "bob", "hello alice") {
				_ = bob.Chat("hello alice", "")
				return false
			}
			return true
		})
		poll("the outsiders' positions and chat to be refused on both topics", func() bool {
			for _, o := range outsiders {
				_ = o.Chat("let me in", "")
			}
			for _, h := range honest {
				// Refusals of position updates are counted where they are
				// validated; the chat validator counts its own.
				if h.pos.Stats().Rejected[position.ReasonBadToken] == 0 || counterValue(t, h, "bad_token") == 0 {
					return false
				}
				for _, o := range outsiders {
					if h.admit.Status(o.h.ID()).Verdict != guard.Refused {
						return false
					}
				}
			}
			return true
		})
		check()
		if len(leaks) > 0 {
			t.Fatalf("outsiders were heard: %s", strings.Join(leaks, "; "))
		}
		for _, h := range honest {
			if err := h.admit.Status(thief.h.ID()).Err; !errors.Is(err, token.ErrWrongPeer) {
				t.Errorf("%s refused the thief for %v, want a token of another peer", h.Name(), err)
			}
			if err := h.admit.Status(nobody.h.ID()).Err; !errors.Is(err, guard.ErrNoToken) {
				t.Errorf("%s refused the player without an account for %v, want no token", h.Name(), err)
			}
			if v := h.admit.Status(honestOther(h, alice, bob).h.ID()).Verdict; v != guard.Admitted {
				t.Errorf("%s: the other logged-in player is %v", h.Name(), v)
			}
		}
		// Whispers are direct streams; the same rule holds there.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := bob.Whisper(ctx, alice.h.ID().String(), "psst alice"); err != nil {
			t.Fatalf("bob's whisper to alice: %v", err)
		}
		for _, o := range outsiders {
			if err := o.Whisper(ctx, alice.h.ID().String(), "psst from "+o.Name()); err == nil {
				t.Errorf("alice acknowledged a whisper from %s", o.Name())
			}
		}
		for _, m := range alice.Messages() {
			if m.Kind == "whisper" && strings.HasPrefix(m.Text, "psst from") {
				t.Errorf("alice shows an outsider's whisper: %+v", m)
			}
		}
		if got := counterValue(t, alice, "whisper_bad_token"); got != float64(len(outsiders)) {
			t.Errorf("alice counted %v refused whispers, want %d", got, len(outsiders))
		}
		// The outsiders have no admission: they hear everyone (an open world
		// is their own business), which shows the honest players did publish.
		poll("the thief to see alice", func() bool { _, ok := sees(thief, alice.ID()); return ok })
	})
}

func honestOther(h, a, b *Peer) *Peer {
	if h == a {
		return b
	}
	return a
}
