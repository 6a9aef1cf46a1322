// Package ratelimit keeps one token bucket per key (a source address, an
// account) in a table of bounded size: the master server limits requests
// per source with it and the probe responder limits probes per source.
//
// The table holds at most MaxKeys buckets. A key seen for the first time
// when the table is full evicts the key used least recently; that key comes
// back later with a full bucket, so a flood of fresh keys costs memory that
// never grows past the bound instead of starving the keys in use.
package ratelimit

import (
	"container/list"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Rate is a token bucket: Burst events at once, refilled at one per Every.
type Rate struct {
	Every time.Duration
	Burst int
}

// Validate reports a rate that would refuse everything or never refill.
func (r Rate) Validate() error {
	if r.Every <= 0 || r.Burst < 1 {
		return fmt.Errorf("rate every %v burst %d: want a positive period and a burst of at least 1", r.Every, r.Burst)
	}
	return nil
}

func (r Rate) String() string { return fmt.Sprintf("%d then 1/%v", r.Burst, r.Every) }

// PerKey is a bounded table of token buckets, safe for concurrent use.
type PerKey struct {
	rate    Rate
	maxKeys int

	mu   sync.Mutex
	keys map[string]*list.Element // of *bucket
	lru  *list.List               // front: used most recently
}

type bucket struct {
	key string
	lim *rate.Limiter
}

// New returns a table of buckets at r holding at most maxKeys keys.
func New(r Rate, maxKeys int) (*PerKey, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if maxKeys < 1 {
		return nil, fmt.Errorf("rate limit table of %d keys: want at least 1", maxKeys)
	}
	return &PerKey{rate: r, maxKeys: maxKeys, keys: map[string]*list.Element{}, lru: list.New()}, nil
}

// Allow takes one token from key's bucket at now and reports whether there
// was one.
func (p *PerKey) Allow(key string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.keys[key]; ok {
		p.lru.MoveToFront(e)
		return e.Value.(*bucket).lim.AllowN(now, 1)
	}
	if p.lru.Len() >= p.maxKeys {
		oldest := p.lru.Back()
		p.lru.Remove(oldest)
		delete(p.keys, oldest.Value.(*bucket).key)
	}
	b := &bucket{key: key, lim: rate.NewLimiter(rate.Every(p.rate.Every), p.rate.Burst)}
	p.keys[key] = p.lru.PushFront(b)
	return b.lim.AllowN(now, 1)
}

// Len is the number of keys held.
func (p *PerKey) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lru.Len()
}
