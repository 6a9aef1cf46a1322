package memnet

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"io"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func key(t *testing.T, i int) crypto.PrivKey {
	seed := sha256.Sum256([]byte("memnet test " + strconv.Itoa(i)))
	k, err := crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(seed[:]))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func peers(t *testing.T, n *Network, count int) []*Peer {
	var out []*Peer
	for i := range count {
		p, err := n.Add(key(t, i))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// echo serves every exchange with the request's bytes.
func echo(_ peer.ID, r *bufio.Reader, _ func() <-chan struct{}) []byte {
	b, _ := io.ReadAll(r)
	return b
}

// TestAutomaticDeliveryTakesTheLinkLatency: a call's round trip takes
// the two links' latencies, in virtual time.
func TestAutomaticDeliveryTakesTheLinkLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		defer n.Close()
		ps := peers(t, n, 2)
		n.SetLatency(10 * time.Millisecond)
		n.SetLinkLatency(ps[1].ID(), ps[0].ID(), 30*time.Millisecond)
		ps[1].Serve(echo)
		start := time.Now()
		got, err := ps[0].Call(context.Background(), ps[1].ID(), []byte("hello"))
		if err != nil || string(got) != "hello" {
			t.Fatalf("call: %q, %v", got, err)
		}
		if d := time.Since(start); d != 40*time.Millisecond {
			t.Fatalf("round trip took %s, want 40ms", d)
		}
	})
}

// TestManualDeliveryMovesOnlyWhenTold: nothing moves until Deliver; a
// dropped reply leaves the caller waiting until its context ends.
func TestManualDeliveryMovesOnlyWhenTold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		defer n.Close()
		n.SetManual(true)
		ps := peers(t, n, 2)
		ps[1].Serve(echo)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, err = ps[0].Call(ctx, ps[1].ID(), []byte("x"))
		}()
		synctest.Wait()
		q := n.Pending()
		if len(q) != 1 || q[0].Kind != KindCall {
			t.Fatalf("queued %v, want one call", q)
		}
		n.Deliver(q[0])
		synctest.Wait()
		q = n.Pending()
		if len(q) != 1 || q[0].Kind != KindReply {
			t.Fatalf("queued %v, want one reply", q)
		}
		n.Drop(q[0])
		<-done
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call after a dropped reply: %v, want the deadline", err)
		}
	})
}

// TestCrashAndPartitionCutExchanges: a crash fails the exchanges under
// way at once and tells the linked peers; a partition cuts across, heal
// links again.
func TestCrashAndPartitionCutExchanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		defer n.Close()
		n.SetManual(true)
		ps := peers(t, n, 3)
		var mu sync.Mutex
		var events []string
		ps[0].Notify(func(p peer.ID) {
			mu.Lock()
			events = append(events, "up "+p.String())
			mu.Unlock()
		}, func(p peer.ID) {
			mu.Lock()
			events = append(events, "down "+p.String())
			mu.Unlock()
		})
		ps[1].Serve(echo)
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, err = ps[0].Call(context.Background(), ps[1].ID(), []byte("x"))
		}()
		synctest.Wait()
		n.Crash(ps[1].ID())
		<-done
		if !errors.Is(err, ErrReset) {
			t.Fatalf("call to a crashed peer: %v, want a reset", err)
		}
		if _, err := ps[0].Call(context.Background(), ps[1].ID(), nil); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("call after the crash: %v, want unreachable", err)
		}
		n.Partition([]peer.ID{ps[0].ID()}, []peer.ID{ps[2].ID()})
		if ps[0].Connected(ps[2].ID()) || slices.Contains(ps[0].ConnectedPeers(), ps[2].ID()) {
			t.Fatal("connected across the partition")
		}
		n.Heal()
		if !ps[0].Connected(ps[2].ID()) || ps[0].Connected(ps[1].ID()) {
			t.Fatal("heal: want p2 linked again and the crashed p1 still down")
		}
		mu.Lock()
		defer mu.Unlock()
		want := []string{"down " + ps[1].ID().String(), "down " + ps[2].ID().String(), "up " + ps[2].ID().String()}
		if !slices.Equal(events, want) {
			t.Fatalf("notifications %v, want %v", events, want)
		}
	})
}

// TestTopicValidatorDecides: a published message reaches the subscribers
// whose validator accepts it, with the validator's value.
func TestTopicValidatorDecides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		defer n.Close()
		ps := peers(t, n, 3)
		accept := func(author peer.ID, data []byte) (pubsub.ValidationResult, any) {
			if string(data) == "bad" {
				return pubsub.ValidationReject, nil
			}
			return pubsub.ValidationAccept, "v:" + string(data)
		}
		var mu sync.Mutex
		var got []string
		chans := make([]interface {
			Publish(context.Context, []byte) error
		}, 3)
		for i, p := range ps {
			ch, err := p.JoinTopic("t", accept)
			if err != nil {
				t.Fatal(err)
			}
			chans[i] = ch
			if i > 0 {
				if err := ch.Subscribe(t.Context(), 8, func(author peer.ID, v any) {
					mu.Lock()
					got = append(got, v.(string))
					mu.Unlock()
				}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if l := ps[0].TopicPeers("t"); len(l) != 2 {
			t.Fatalf("topic peers %v, want the two subscribers", l)
		}
		if err := chans[0].Publish(context.Background(), []byte("bad")); err == nil {
			t.Fatal("a message the local validator rejects was published")
		}
		if err := chans[0].Publish(context.Background(), []byte("ok")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(got, []string{"v:ok", "v:ok"}) {
			t.Fatalf("delivered %v, want v:ok twice", got)
		}
	})
}

// TestCrashLingeringStaysListedUntilForgotten: a peer crashed lingering
// stays in the lists of the peers linked to it (routing, connected, topic)
// with no notification, yet calls to it fail at once and nothing
// published reaches it; Forget drops it and tells them it went down. A
// peer that was not linked to it never lists it.
func TestCrashLingeringStaysListedUntilForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		defer n.Close()
		n.SetManual(true)
		ps := peers(t, n, 2)
		var mu sync.Mutex
		var events []string
		ps[0].Notify(func(p peer.ID) {}, func(p peer.ID) {
			mu.Lock()
			events = append(events, "down "+p.String())
			mu.Unlock()
		})
		accept := func(peer.ID, []byte) (pubsub.ValidationResult, any) { return pubsub.ValidationAccept, nil }
		var pub interface {
			Publish(context.Context, []byte) error
		}
		for i, p := range ps {
			ch, err := p.JoinTopic("t", accept)
			if err != nil {
				t.Fatal(err)
			}
			if err := ch.Subscribe(t.Context(), 8, func(peer.ID, any) {}); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				pub = ch
			}
		}
		gone := ps[1].ID()
		n.CrashLingering(gone)
		late, err := n.Add(key(t, 2))
		if err != nil {
			t.Fatal(err)
		}

		listed := func(p *Peer) []string {
			var out []string
			if slices.Contains(p.RoutingPeers(), gone) {
				out = append(out, "routing")
			}
			if slices.Contains(p.ConnectedPeers(), gone) {
				out = append(out, "connected")
			}
			if slices.Contains(p.TopicPeers("t"), gone) {
				out = append(out, "topic")
			}
			if p.Connected(gone) {
				out = append(out, "Connected")
			}
			return out
		}
		if got := listed(ps[0]); !slices.Equal(got, []string{"routing", "connected", "topic", "Connected"}) {
			t.Fatalf("lingering peer listed in %v, want every list", got)
		}
		if got := listed(late); len(got) != 0 {
			t.Fatalf("a peer added after the crash lists it in %v", got)
		}
		if _, err := ps[0].Call(context.Background(), gone, nil); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("call to a lingering peer: %v, want unreachable", err)
		}
		if err := pub.Publish(context.Background(), []byte("x")); err != nil {
			t.Fatal(err)
		}
		if q := n.Pending(); len(q) != 0 {
			t.Fatalf("queued %d messages to a crashed peer", len(q))
		}
		mu.Lock()
		if len(events) != 0 {
			t.Fatalf("notified %v before Forget", events)
		}
		mu.Unlock()

		n.Forget(gone)
		synctest.Wait()
		if got := listed(ps[0]); len(got) != 0 {
			t.Fatalf("forgotten peer still listed in %v", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"down " + gone.String()}; !slices.Equal(events, want) {
			t.Fatalf("notifications %v, want %v", events, want)
		}
	})
}
