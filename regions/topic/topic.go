// Package topic is the plumbing every region topic shares: the event
// topics of the region object store (regions), the position and summary
// topics (regions/position) and the chat topics (game/play). A Membership
// registers the topic's validator, joins the topic, publishes on it, and,
// while subscribed, runs the one read loop that hands each accepted
// message to its owner; leaving stops the loop, waits for it, closes the
// topic and unregisters the validator.
//
// What a message must satisfy stays with each topic's owner, in the
// validator it passes (size, decoding, author, region, rate): this package
// only wires it. Data flow: gossipsub runs the validator on every message
// (the owner's checks; Accept, Reject or Ignore), then the read loop
// delivers the accepted ones, with whatever the validator left in
// ValidatorData, to the owner's deliver function, one at a time.
package topic

import (
	"context"
	"errors"
	"fmt"
	"sync"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Config describes one topic to join.
type Config struct {
	PubSub *pubsub.PubSub
	Name   string
	// Validate decides every message of the topic before gossipsub
	// forwards or delivers it.
	Validate pubsub.ValidatorEx
	// Inline runs Validate on the validation pipeline's own goroutine:
	// only for validators that never wait (no network, no slow locks).
	Inline bool
	// Score, if set, is the topic's gossipsub scoring (it applies when the
	// router scores peers; elsewhere it is left out quietly).
	Score *pubsub.TopicScoreParams
}

// Membership is this peer's membership of one topic: joined, with its
// validator registered, and subscribed or not. It is safe for concurrent
// use.
type Membership struct {
	ps   *pubsub.PubSub
	name string
	t    *pubsub.Topic

	mu       sync.Mutex
	sub      *pubsub.Subscription // nil while not subscribed
	stop     context.CancelFunc
	left     bool
	loops    sync.WaitGroup // the read loops started, running or ending
	leave    sync.Once
	leaveErr error
}

// ErrLeft is returned by a Membership that has left its topic.
var ErrLeft = errors.New("topic left")

// Join registers cfg's validator and joins the topic. If joining fails the
// validator is unregistered again.
func Join(cfg Config) (*Membership, error) {
	if cfg.PubSub == nil || cfg.Validate == nil || cfg.Name == "" {
		return nil, errors.New("join topic: pubsub, name and validator are all needed")
	}
	var opts []pubsub.ValidatorOpt
	if cfg.Inline {
		opts = append(opts, pubsub.WithValidatorInline(true))
	}
	if err := cfg.PubSub.RegisterTopicValidator(cfg.Name, cfg.Validate, opts...); err != nil {
		return nil, fmt.Errorf("validator of topic %s: %w", cfg.Name, err)
	}
	t, err := cfg.PubSub.Join(cfg.Name)
	if err != nil {
		_ = cfg.PubSub.UnregisterTopicValidator(cfg.Name)
		return nil, fmt.Errorf("join topic %s: %w", cfg.Name, err)
	}
	if cfg.Score != nil {
		// Fails when the router does not score peers (floodsub, or
		// gossipsub without peer scoring): the topic works all the same.
		_ = t.SetScoreParams(cfg.Score)
	}
	return &Membership{ps: cfg.PubSub, name: cfg.Name, t: t}, nil
}

// Name is the topic's name.
func (m *Membership) Name() string { return m.name }

// ListPeers lists the peers this peer knows in the topic.
func (m *Membership) ListPeers() []peer.ID { return m.t.ListPeers() }

// Publish publishes data on the topic (subscribed or not). The local
// validator sees it first, as every receiver's does.
func (m *Membership) Publish(ctx context.Context, data []byte) error {
	m.mu.Lock()
	left := m.left
	m.mu.Unlock()
	if left {
		return fmt.Errorf("publish on %s: %w", m.name, ErrLeft)
	}
	return m.t.Publish(ctx, data)
}

// Subscribe starts delivering the topic's accepted messages to deliver,
// one at a time, on a read loop the membership owns, until ctx ends or the
// membership unsubscribes or leaves. The subscription buffers up to
// buffer messages (gossipsub drops what a slow reader leaves beyond it).
// On a subscribed membership it changes nothing.
func (m *Membership) Subscribe(ctx context.Context, buffer int, deliver func(*pubsub.Message)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.left:
		return fmt.Errorf("subscribe to %s: %w", m.name, ErrLeft)
	case m.sub != nil:
		return nil
	}
	sub, err := m.t.Subscribe(pubsub.WithBufferSize(buffer))
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", m.name, err)
	}
	ctx, stop := context.WithCancel(ctx)
	m.sub, m.stop = sub, stop
	m.loops.Add(1)
	go func() {
		defer m.loops.Done()
		for {
			msg, err := sub.Next(ctx)
			if err != nil {
				return
			}
			deliver(msg)
		}
	}()
	return nil
}

// Subscribed reports whether a read loop is delivering the topic.
func (m *Membership) Subscribed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sub != nil
}

// Unsubscribe stops delivering, staying joined (publishing still works).
// It does not wait for the read loop, which may be inside deliver: callers
// may hold locks that deliver takes. Leave (or Wait) waits for it.
func (m *Membership) Unsubscribe() {
	m.mu.Lock()
	sub, stop := m.sub, m.stop
	m.sub, m.stop = nil, nil
	m.mu.Unlock()
	if sub != nil {
		stop()
		sub.Cancel()
	}
}

// Wait waits until every read loop the membership started has returned.
func (m *Membership) Wait() { m.loops.Wait() }

// Leave unsubscribes, waits for the read loop, closes the topic and
// unregisters its validator. It must not be called from deliver or with a
// lock that deliver takes. Later calls return the first one's result.
func (m *Membership) Leave() error {
	m.leave.Do(func() {
		m.mu.Lock()
		m.left = true
		m.mu.Unlock()
		m.Unsubscribe()
		m.loops.Wait()
		var errs []error
		if err := m.t.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close topic %s: %w", m.name, err))
		}
		if err := m.ps.UnregisterTopicValidator(m.name); err != nil {
			errs = append(errs, fmt.Errorf("unregister the validator of %s: %w", m.name, err))
		}
		m.leaveErr = errors.Join(errs...)
	})
	return m.leaveErr
}
