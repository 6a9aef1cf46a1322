package guard

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/node/vnet"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
)

// fakeClock is the clock tokens are checked against; tests move it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	// Tokens count whole seconds.
	return &fakeClock{now: time.Now().Truncate(time.Second)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// mockHosts returns count hosts on a virtual network, linked but not
// connected, closed when the test ends.
func mockHosts(t *testing.T, count int) []host.Host {
	return mockHostsB(t, count)
}

func mockHostsB(t testing.TB, count int) []host.Host {
	t.Helper()
	nw := vnet.New(0)
	var hs []host.Host
	t.Cleanup(func() {
		for _, h := range hs {
			_ = h.Close()
		}
		_ = nw.Close()
	})
	for i := range count {
		key, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		h, err := nw.AddHost(key, vnet.Addr(i+1), vnet.HostOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	for i, a := range hs {
		for _, b := range hs[i+1:] {
			if err := nw.Link(a.ID(), b.ID()); err != nil {
				t.Fatal(err)
			}
		}
	}
	return hs
}

// newTestAdmission starts an Admission on h that checks against pub on clk
// and does no background upkeep unless the test asks for it.
func newTestAdmission(t *testing.T, h host.Host, pub ed25519.PublicKey, clk *fakeClock, adjust func(*AdmissionConfig)) *Admission {
	t.Helper()
	cfg := AdmissionConfig{Key: pub, Now: clk.Now, MaintainEvery: time.Hour, Logger: testLogger(), FetchTimeout: 5 * time.Second}
	if adjust != nil {
		adjust(&cfg)
	}
	a, err := NewAdmission(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// answering makes h answer token asks with whatever tok holds.
func answering(t *testing.T, h host.Host, pub ed25519.PublicKey, clk *fakeClock, tok *atomic.Pointer[[]byte]) {
	t.Helper()
	newTestAdmission(t, h, pub, clk, func(c *AdmissionConfig) {
		c.Token = func() []byte {
			if p := tok.Load(); p != nil {
				return *p
			}
			return nil
		}
	})
}

func holding(tok []byte) *atomic.Pointer[[]byte] {
	var p atomic.Pointer[[]byte]
	p.Store(&tok)
	return &p
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestAdmissionVerdicts: a peer that answers with its own current token is
// admitted until the token's expiry; every other answer refuses it, with
// the reason kept.
func TestAdmissionVerdicts(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		clk := newFakeClock()
		now := clk.Now()
		pub, key, _ := ed25519.GenerateKey(rand.Reader)
		_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
		hs := mockHosts(t, 10)
		checker := newTestAdmission(t, hs[0], pub, clk, nil)
		good := func(h host.Host) []byte { return signed(t, key, h.ID(), now.Add(-time.Minute), now.Add(time.Hour)) }

		cases := []struct {
			name  string
			serve func(h host.Host)
			want  error // nil: admitted
		}{
			{"own token", func(h host.Host) { answering(t, h, pub, clk, holding(good(h))) }, nil},
			{"another peer's token", func(h host.Host) { answering(t, h, pub, clk, holding(good(hs[1]))) }, token.ErrWrongPeer},
			{"expired token", func(h host.Host) {
				answering(t, h, pub, clk, holding(signed(t, key, h.ID(), now.Add(-2*time.Hour), now.Add(-time.Hour))))
			}, token.ErrExpired},
			{"signed by another key", func(h host.Host) {
				answering(t, h, pub, clk, holding(signed(t, otherKey, h.ID(), now.Add(-time.Minute), now.Add(time.Hour))))
			}, token.ErrBadSignature},
			{"garbage token", func(h host.Host) { answering(t, h, pub, clk, holding([]byte("ow1.garbage.garbage"))) }, token.ErrMalformed},
			{"no token", func(h host.Host) { answering(t, h, pub, clk, holding(nil)) }, ErrNoToken},
			{"does not serve the protocol", func(h host.Host) {}, ErrNoToken},
			{"broken answer", func(h host.Host) {
				h.SetStreamHandler(TokenProtocol, func(s network.Stream) {
					_, _ = s.Write([]byte{0xff, 0xff, 0x03, 'x'}) // says 65535 bytes
					_ = s.Close()
				})
			}, ErrBadAnswer},
		}
		// One bubble for every case (subtests cannot run inside one): a case
		// that fails is reported by name and the next still runs.
		for i, tc := range cases {
			subject := hs[i+1]
			tc.serve(subject)
			if v := checker.Check(subject.ID()); v != Pending {
				t.Errorf("%s: first check: %v, want pending", tc.name, v)
				continue
			}
			v := checker.Wait(waitCtx(t), subject.ID())
			st := checker.Status(subject.ID())
			switch {
			case tc.want == nil && (v != Admitted || !st.Expiry.Equal(now.Add(time.Hour))):
				t.Errorf("%s: got %v (expiry %v, err %v), want admitted until %v", tc.name, v, st.Expiry, st.Err, now.Add(time.Hour))
				continue
			case tc.want != nil && (v != Refused || !errors.Is(st.Err, tc.want)):
				t.Errorf("%s: got %v (%v), want refused for %v", tc.name, v, st.Err, tc.want)
				continue
			}
			if got := checker.Check(subject.ID()); got != v {
				t.Errorf("%s: checked again: %v, want %v", tc.name, got, v)
			}
		}
		if s := checker.Stats(); s.Asks != uint64(len(cases)) || s.Admissions != 1 || s.Refusals != uint64(len(cases)-1) {
			t.Fatalf("stats %+v: want %d asks, 1 admission, %d refusals", s, len(cases), len(cases)-1)
		}
	})
}

// TestAdmissionRefetchesBeforeExpiry: an admitted peer is asked again
// shortly before its token expires; while its holder still shows the old
// token it stays admitted and is asked again later; once it shows a new
// one, the peer stays admitted past the old expiry, with no gap.
func TestAdmissionRefetchesBeforeExpiry(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		clk := newFakeClock()
		t0 := clk.Now()
		pub, key, _ := ed25519.GenerateKey(rand.Reader)
		hs := mockHosts(t, 2)
		checker := newTestAdmission(t, hs[0], pub, clk, func(c *AdmissionConfig) { c.RetryMin = time.Second })
		id := hs[1].ID()
		tok := holding(signed(t, key, id, t0, t0.Add(80*time.Second))) // refetched 10 s ahead
		answering(t, hs[1], pub, clk, tok)

		if v := checker.Wait(waitCtx(t), id); v != Admitted {
			t.Fatalf("first token: %v (%v)", v, checker.Status(id).Err)
		}
		clk.Advance(60 * time.Second)
		checker.Check(id)
		if s := checker.Stats(); s.Asks != 1 {
			t.Fatalf("%d asks 20 s before expiry, want 1", s.Asks)
		}
		clk.Advance(11 * time.Second) // 9 s before expiry
		if v := checker.Check(id); v != Admitted {
			t.Fatalf("in the refetch window: %v", v)
		}
		vnettest.EventuallyWithin(t, 10*time.Second, "the refetch of the unchanged token", func() bool {
			s := checker.Stats()
			return s.Asks == 2 && !checker.Status(id).Asking
		})
		if checker.Check(id); checker.Stats().Asks != 2 {
			t.Fatal("asked again at once after getting the same token")
		}
		tok.Store(ptr(signed(t, key, id, t0.Add(71*time.Second), t0.Add(151*time.Second))))
		clk.Advance(time.Second)
		if v := checker.Check(id); v != Admitted {
			t.Fatalf("during the second refetch: %v", v)
		}
		vnettest.EventuallyWithin(t, 10*time.Second, "the renewed token", func() bool { return checker.Status(id).Expiry.Equal(t0.Add(151 * time.Second)) })
		clk.Advance(20 * time.Second) // past the first token's expiry
		if v := checker.Check(id); v != Admitted {
			t.Fatalf("after the first token expired: %v", v)
		}
		if s := checker.Stats(); s.Asks != 3 || s.Admissions != 2 {
			t.Fatalf("stats %+v: want 3 asks, 2 admissions", s)
		}

		// A token that is not renewed in time lapses: the peer is pending
		// until it shows a new one, and refused when that one is expired too.
		clk.Advance(80 * time.Second) // past 151 s
		if v := checker.Check(id); v != Pending {
			t.Fatalf("after the renewed token expired: %v, want pending", v)
		}
		if v := checker.Wait(waitCtx(t), id); v != Refused || !errors.Is(checker.Status(id).Err, token.ErrExpired) {
			t.Fatalf("presenting the expired token: %v (%v), want refused as expired", v, checker.Status(id).Err)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// TestAdmissionRefreshesQuietPeers: the upkeep renews the token of a
// connected peer that sends nothing.
func TestAdmissionRefreshesQuietPeers(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		clk := newFakeClock()
		t0 := clk.Now()
		pub, key, _ := ed25519.GenerateKey(rand.Reader)
		hs := mockHosts(t, 2)
		checker := newTestAdmission(t, hs[0], pub, clk, func(c *AdmissionConfig) { c.MaintainEvery = 10 * time.Millisecond })
		id := hs[1].ID()
		tok := holding(signed(t, key, id, t0, t0.Add(80*time.Second)))
		answering(t, hs[1], pub, clk, tok)
		if v := checker.Wait(waitCtx(t), id); v != Admitted {
			t.Fatalf("first token: %v (%v)", v, checker.Status(id).Err)
		}
		tok.Store(ptr(signed(t, key, id, t0.Add(70*time.Second), t0.Add(150*time.Second))))
		clk.Advance(71 * time.Second)
		vnettest.EventuallyWithin(t, 10*time.Second, "the upkeep to renew the token", func() bool { return checker.Status(id).Expiry.Equal(t0.Add(150 * time.Second)) })
	})
}

// TestAdmissionBacksOff: an unreachable peer is asked once however many
// messages name it, then again only after a doubling backoff; a refused
// peer is asked again only after RecheckRefused.
func TestAdmissionBacksOff(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		clk := newFakeClock()
		pub, _, _ := ed25519.GenerateKey(rand.Reader)
		hs := mockHosts(t, 2)
		checker := newTestAdmission(t, hs[0], pub, clk, func(c *AdmissionConfig) {
			c.RetryMin, c.RetryMax, c.RecheckRefused = time.Second, 4*time.Second, 30*time.Second
		})
		ghost := newID(t) // no addresses anywhere
		flood := func(id peer.ID) {
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 100 {
						checker.Check(id)
					}
				})
			}
			wg.Wait()
			vnettest.EventuallyWithin(t, 10*time.Second, "the ask to end", func() bool { return !checker.Status(id).Asking })
		}
		asks := func() uint64 { return checker.Stats().Asks }
		flood(ghost)
		if asks() != 1 || checker.Status(ghost).Verdict != Pending || checker.Stats().Unanswered != 1 {
			t.Fatalf("after a flood naming an unreachable peer: %+v, %+v", checker.Stats(), checker.Status(ghost))
		}
		for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
			clk.Advance(wait - time.Millisecond)
			flood(ghost)
			if got := asks(); got != uint64(i+1) {
				t.Fatalf("retry %d: %d asks before the backoff of %s ran out", i+1, got, wait)
			}
			clk.Advance(time.Millisecond)
			flood(ghost)
			if got := asks(); got != uint64(i+2) {
				t.Fatalf("retry %d: %d asks after the backoff of %s, want %d", i+1, got, wait, i+2)
			}
		}

		// A refused peer: no new ask before RecheckRefused.
		mallory := hs[1]
		answering(t, mallory, pub, clk, holding([]byte("ow1.garbage.garbage")))
		before := asks()
		flood(mallory.ID())
		if asks() != before+1 || checker.Check(mallory.ID()) != Refused {
			t.Fatalf("after a flood from a refused peer: %d asks (want %d), verdict %v", asks(), before+1, checker.Check(mallory.ID()))
		}
		clk.Advance(29 * time.Second)
		flood(mallory.ID())
		if asks() != before+1 {
			t.Fatalf("refused peer asked again before RecheckRefused: %+v", checker.Status(mallory.ID()))
		}
		clk.Advance(time.Second)
		flood(mallory.ID())
		if asks() != before+2 || checker.Check(mallory.ID()) != Refused {
			t.Fatalf("recheck: %d asks, want %d", asks(), before+2)
		}
	})
}

// TestAdmissionDedupesAsks: concurrent checks of an unknown peer share one
// ask, and Wait returns its outcome.
func TestAdmissionDedupesAsks(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		clk := newFakeClock()
		now := clk.Now()
		pub, key, _ := ed25519.GenerateKey(rand.Reader)
		hs := mockHosts(t, 2)
		checker := newTestAdmission(t, hs[0], pub, clk, nil)
		id := hs[1].ID()
		release := make(chan struct{})
		tok := signed(t, key, id, now, now.Add(time.Hour))
		hs[1].SetStreamHandler(TokenProtocol, func(s network.Stream) {
			<-release
			b, _ := AppendTokenAnswer(nil, tok)
			_, _ = s.Write(b)
			_ = s.Close()
		})
		var wg sync.WaitGroup
		verdicts := make([]Verdict, 16)
		for i := range verdicts {
			wg.Go(func() { verdicts[i] = checker.Wait(waitCtx(t), id) })
		}
		vnettest.EventuallyWithin(t, 10*time.Second, "the ask to start", func() bool { return checker.Status(id).Asking })
		for range 100 {
			if v := checker.Check(id); v != Pending {
				t.Fatalf("while asking: %v", v)
			}
		}
		close(release)
		wg.Wait()
		for i, v := range verdicts {
			if v != Admitted {
				t.Fatalf("waiter %d: %v", i, v)
			}
		}
		if s := checker.Stats(); s.Asks != 1 {
			t.Fatalf("%d asks, want 1", s.Asks)
		}
	})
}

// TestAdmissionBookBounded: a flood of unknown authors never grows the
// book past MaxPeers nor pushes out a peer with a current token.
func TestAdmissionBookBounded(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		clk := newFakeClock()
		now := clk.Now()
		pub, key, _ := ed25519.GenerateKey(rand.Reader)
		hs := mockHosts(t, 2)
		checker := newTestAdmission(t, hs[0], pub, clk, func(c *AdmissionConfig) { c.MaxPeers, c.MaxFetches = 4, 2 })
		honest := hs[1].ID()
		answering(t, hs[1], pub, clk, holding(signed(t, key, honest, now, now.Add(time.Hour))))
		if v := checker.Wait(waitCtx(t), honest); v != Admitted {
			t.Fatalf("honest peer: %v", v)
		}
		for range 200 {
			checker.Check(newID(t))
			if s := checker.Stats(); s.Peers > 4 || s.Asks > s.Unanswered+1+2 {
				t.Fatalf("stats %+v: book over 4 entries or over 2 asks in flight", s)
			}
		}
		if v := checker.Check(honest); v != Admitted {
			t.Fatalf("honest peer after the flood: %v", v)
		}
		if s := checker.Stats(); s.Evictions == 0 {
			t.Fatalf("stats %+v: nothing evicted", s)
		}
	})
}

// TestAdmissionPrefetchesOnConnect: a new connection is asked at once, so
// the first message of an honest peer finds it admitted.
func TestAdmissionPrefetchesOnConnect(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		clk := newFakeClock()
		now := clk.Now()
		pub, key, _ := ed25519.GenerateKey(rand.Reader)
		hs := mockHosts(t, 2)
		checker := newTestAdmission(t, hs[0], pub, clk, nil)
		id := hs[1].ID()
		answering(t, hs[1], pub, clk, holding(signed(t, key, id, now, now.Add(time.Hour))))
		ctx := waitCtx(t)
		if err := hs[1].Connect(ctx, peer.AddrInfo{ID: hs[0].ID(), Addrs: hs[0].Addrs()}); err != nil {
			t.Fatal(err)
		}
		vnettest.EventuallyWithin(t, 10*time.Second, "the prefetched token", func() bool { return checker.Status(id).Verdict == Admitted })
		if s := checker.Stats(); s.Asks != 1 {
			t.Fatalf("%d asks, want 1", s.Asks)
		}
	})
}

// TestAdmissionClose: after Close the Admission stops serving its token
// and asks nobody, while Check still answers from the book.
func TestAdmissionClose(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		clk := newFakeClock()
		now := clk.Now()
		pub, key, _ := ed25519.GenerateKey(rand.Reader)
		hs := mockHosts(t, 3)
		checker := newTestAdmission(t, hs[0], pub, clk, nil)
		id := hs[1].ID()
		answering(t, hs[1], pub, clk, holding(signed(t, key, id, now, now.Add(time.Hour))))
		if v := checker.Wait(waitCtx(t), id); v != Admitted {
			t.Fatalf("before close: %v", v)
		}
		checker.Close()
		if v := checker.Check(id); v != Admitted {
			t.Fatalf("after close: %v", v)
		}
		asks := checker.Stats().Asks
		if v := checker.Check(hs[2].ID()); v != Pending || checker.Stats().Asks != asks {
			t.Fatalf("unknown peer after close: %v, %d asks (was %d)", v, checker.Stats().Asks, asks)
		}
	})
}

// TestAdmissionLateServer: a peer asked before it serves TokenProtocol is
// refused, asked again soon (RetryMin), Pending while that recheck runs,
// and admitted once it serves a valid token.
func TestAdmissionLateServer(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		clk := newFakeClock()
		now := clk.Now()
		pub, key, _ := ed25519.GenerateKey(rand.Reader)
		hs := mockHosts(t, 2)
		checker := newTestAdmission(t, hs[0], pub, clk, func(c *AdmissionConfig) { c.RetryMin = time.Second })
		id := hs[1].ID()
		if v := checker.Wait(waitCtx(t), id); v != Refused || !errors.Is(checker.Status(id).Err, ErrNoToken) {
			t.Fatalf("before serving: %v (%v), want refused for no token", v, checker.Status(id).Err)
		}
		release := make(chan struct{})
		tok := signed(t, key, id, now, now.Add(time.Hour))
		hs[1].SetStreamHandler(TokenProtocol, func(s network.Stream) {
			<-release
			b, _ := AppendTokenAnswer(nil, tok)
			_, _ = s.Write(b)
			_ = s.Close()
		})
		if v := checker.Check(id); v != Refused {
			t.Fatalf("before the recheck is due: %v", v)
		}
		clk.Advance(time.Second)
		if v := checker.Check(id); v != Pending {
			t.Fatalf("while rechecking: %v, want pending", v)
		}
		close(release)
		vnettest.EventuallyWithin(t, 10*time.Second, "the recheck to admit the peer", func() bool { return checker.Check(id) == Admitted })
	})
}
