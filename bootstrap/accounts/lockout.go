package accounts

import (
	"fmt"
	"sync"
	"time"
)

// LockoutPolicy is how the server slows password guessing without letting
// a guesser lock the owner out.
//
// Two backoffs count failed password checks. One per (account, source
// address): after SourceFree failures every further one doubles the wait
// before that source may try that account again, from FirstWait up to
// MaxSourceWait. It stops a guesser at one address, and nobody elsewhere
// can make it longer. The other per account: after AccountFree failures,
// from any source, the wait doubles up to MaxAccountWait; it stops a
// guesser spread over many addresses. The account-wide wait holds back
// only addresses the account has never logged in from (it has no session
// from there on record): the owner at home keeps logging in while the
// account is under attack, and only an owner on a new address waits, at
// most MaxAccountWait. A key with no failure for ResetAfter starts over,
// and a correct password clears its (account, source) backoff.
//
// This is the shape of Keycloak's brute-force detection (doubling waits up
// to a maximum, reset after a quiet period) with the per-address part of
// Nakama's login limits, plus the known-address exemption that keeps the
// lock from being turned against the owner.
type LockoutPolicy struct {
	SourceFree, AccountFree       int
	FirstWait                     time.Duration
	MaxSourceWait, MaxAccountWait time.Duration
	ResetAfter                    time.Duration
}

// DefaultLockoutPolicy: five free guesses per address and twenty per
// account, waits from 1 s doubling to 5 min per address and 15 min per
// account, forgotten after an hour of quiet.
var DefaultLockoutPolicy = LockoutPolicy{
	SourceFree: 5, AccountFree: 20,
	FirstWait:     time.Second,
	MaxSourceWait: 5 * time.Minute, MaxAccountWait: 15 * time.Minute,
	ResetAfter: time.Hour,
}

// Validate checks the policy's values.
func (p LockoutPolicy) Validate() error {
	if p.SourceFree < 1 || p.AccountFree < 1 || p.FirstWait <= 0 || p.MaxSourceWait < p.FirstWait ||
		p.MaxAccountWait < p.FirstWait || p.ResetAfter < max(p.MaxSourceWait, p.MaxAccountWait) {
		return fmt.Errorf("lockout policy %+v: want free counts >= 1, 0 < first wait <= each max wait <= reset after", p)
	}
	return nil
}

// backoffs counts failures per key and says how long the key must wait.
// The table holds at most maxKeys; past it, keys whose wait is over and
// that have been quiet for resetAfter go first, then the least recently
// failed ones.
type backoffs struct {
	free        int
	first, most time.Duration
	resetAfter  time.Duration
	maxKeys     int

	mu   sync.Mutex
	keys map[string]*backoffEntry
}

type backoffEntry struct {
	failures int
	until    time.Time // no attempt before
	last     time.Time // last failure
}

func newBackoffs(free int, first, most, resetAfter time.Duration, maxKeys int) *backoffs {
	return &backoffs{free: free, first: first, most: most, resetAfter: resetAfter, maxKeys: maxKeys, keys: map[string]*backoffEntry{}}
}

// Wait is how long key must still wait at now (0: it may try).
func (b *backoffs) Wait(key string, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.keys[key]
	if e == nil || !now.Before(e.until) {
		return 0
	}
	return e.until.Sub(now)
}

// Fail records a failure of key at now.
func (b *backoffs) Fail(key string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.keys[key]
	if e == nil {
		if len(b.keys) >= b.maxKeys {
			b.evict(now)
		}
		e = &backoffEntry{}
		b.keys[key] = e
	}
	if now.Sub(e.last) >= b.resetAfter {
		e.failures = 0
	}
	e.failures++
	e.last = now
	if over := e.failures - b.free; over > 0 {
		wait := b.first
		for i := 1; i < over && wait < b.most; i++ {
			wait *= 2
		}
		e.until = now.Add(min(wait, b.most))
	}
}

// Clear forgets key (a correct password).
func (b *backoffs) Clear(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.keys, key)
}

func (b *backoffs) evict(now time.Time) {
	var oldest string
	var oldestAt time.Time
	for k, e := range b.keys {
		if !now.Before(e.until) && now.Sub(e.last) >= b.resetAfter {
			delete(b.keys, k)
			continue
		}
		if oldest == "" || e.last.Before(oldestAt) {
			oldest, oldestAt = k, e.last
		}
	}
	if len(b.keys) >= b.maxKeys {
		delete(b.keys, oldest)
	}
}

// Len is the number of keys held.
func (b *backoffs) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.keys)
}
