package topic

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/overworld-p2p/overworld/node/await"
)

// pair is two gossipsub peers linked on libp2p's in-memory network.
func pair(t *testing.T) (a, b *pubsub.PubSub) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	mn, err := mocknet.FullMeshConnected(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mn.Close() })
	ps := make([]*pubsub.PubSub, 2)
	for i, h := range mn.Hosts() {
		if ps[i], err = pubsub.NewGossipSub(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	return ps[0], ps[1]
}

// inbox is what a read loop delivered.
type inbox struct {
	mu  sync.Mutex
	got []string
}

func (in *inbox) add(s string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.got = append(in.got, s)
}

func (in *inbox) has(s string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, g := range in.got {
		if g == s {
			return true
		}
	}
	return false
}

// accept rejects "forged" and marks what it accepts.
func accept(_ context.Context, _ peer.ID, m *pubsub.Message) pubsub.ValidationResult {
	if string(m.Data) == "forged" {
		return pubsub.ValidationReject
	}
	m.ValidatorData = "checked " + string(m.Data)
	return pubsub.ValidationAccept
}

const testTopic = "overworld/test/region/0,0/chat"

// TestDeliversWhatTheValidatorAccepts: the validator's verdict decides
// what the read loop hands over, with what the validator left in
// ValidatorData; unsubscribed, a membership still publishes and delivers
// nothing more; a second Subscribe starts no second loop.
func TestDeliversWhatTheValidatorAccepts(t *testing.T) {
	psA, psB := pair(t)
	a, err := Join(Config{PubSub: psA, Name: testTopic, Validate: accept, Inline: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Join(Config{PubSub: psB, Name: testTopic, Validate: accept, Score: &pubsub.TopicScoreParams{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Join(Config{PubSub: psB, Name: testTopic, Validate: accept}); err == nil {
		t.Fatal("joined one topic twice")
	}
	var in inbox
	deliver := func(m *pubsub.Message) { in.add(m.ValidatorData.(string)) }
	if err := b.Subscribe(context.Background(), 16, deliver); err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe(context.Background(), 16, func(*pubsub.Message) { t.Error("a second read loop delivered") }); err != nil || !b.Subscribed() {
		t.Fatalf("second subscribe: %v, subscribed %v", err, b.Subscribed())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	await.Until(t, time.Minute, "b to take a's message", func() bool {
		_ = a.Publish(ctx, []byte("forged"))
		_ = a.Publish(ctx, []byte("hello"))
		return in.has("checked hello")
	})
	if in.has("checked forged") {
		t.Fatal("delivered a rejected message")
	}

	b.Unsubscribe()
	b.Wait()
	if b.Subscribed() {
		t.Fatal("still subscribed")
	}
	in.mu.Lock()
	n := len(in.got)
	in.mu.Unlock()
	if err := b.Publish(ctx, []byte("from b")); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, []byte("after")); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(a.Leave(), b.Leave()); err != nil {
		t.Fatal(err)
	}
	if len(in.got) != n {
		t.Fatalf("delivered %v after unsubscribing", in.got[n:])
	}
}

// TestLeaveWaitsForTheReadLoop: Leave returns only once a deliver in
// progress has returned; after it, the membership refuses to publish or
// subscribe, and the topic's validator is gone, so the topic can be
// joined again.
//
// It runs in a synctest bubble (the network is libp2p's in-memory one), so
// that "Leave has not returned" is checked once every goroutine is stuck,
// not after a guessed while.
func TestLeaveWaitsForTheReadLoop(t *testing.T) { synctest.Test(t, testLeaveWaitsForTheReadLoop) }

func testLeaveWaitsForTheReadLoop(t *testing.T) {
	psA, psB := pair(t)
	a, err := Join(Config{PubSub: psA, Name: testTopic, Validate: accept})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Leave()
	b, err := Join(Config{PubSub: psB, Name: testTopic, Validate: accept})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var finished atomic.Bool
	if err := b.Subscribe(context.Background(), 4, func(m *pubsub.Message) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-release
			finished.Store(true)
		}
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	await.Until(t, time.Minute, "a deliver to start", func() bool {
		select {
		case <-entered:
			return true
		default:
			_ = a.Publish(ctx, []byte("block"))
			return false
		}
	})
	left := make(chan error, 1)
	go func() { left <- b.Leave() }()
	synctest.Wait() // Leave has run as far as it can without the deliver
	select {
	case err := <-left:
		t.Fatalf("Leave returned (%v) while a deliver was in progress", err)
	default:
	}
	close(release)
	if err := <-left; err != nil {
		t.Fatalf("leave: %v", err)
	}
	if !finished.Load() {
		t.Fatal("Leave returned before the deliver in progress did")
	}
	if err := b.Publish(ctx, []byte("x")); !errors.Is(err, ErrLeft) {
		t.Fatalf("publish after leaving: %v", err)
	}
	if err := b.Subscribe(ctx, 1, func(*pubsub.Message) {}); !errors.Is(err, ErrLeft) {
		t.Fatalf("subscribe after leaving: %v", err)
	}
	again, err := Join(Config{PubSub: psB, Name: testTopic, Validate: accept})
	if err != nil {
		t.Fatalf("join after leaving: %v", err)
	}
	if err := errors.Join(again.Leave(), again.Leave()); err != nil {
		t.Fatalf("leave twice: %v", err)
	}
}

func TestJoinNeedsItsParts(t *testing.T) {
	psA, _ := pair(t)
	for _, cfg := range []Config{{Name: testTopic, Validate: accept}, {PubSub: psA, Validate: accept}, {PubSub: psA, Name: testTopic}} {
		if _, err := Join(cfg); err == nil {
			t.Errorf("joined with %+v", cfg)
		}
	}
}
