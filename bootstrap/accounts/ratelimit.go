package accounts

import (
	"sort"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateLimit is a token bucket: Burst attempts at once, refilled at one per
// Every.
type RateLimit struct {
	Every time.Duration
	Burst int
}

// limiters keeps one token bucket per key (a source
// address), forgetting keys idle long enough to be full again, and holding
// at most maxKeys (beyond that, the oldest idle ones go first; a flood of
// fresh keys cannot grow memory without bound).
type limiters struct {
	limit   RateLimit
	maxKeys int

	mu   sync.Mutex
	keys map[string]*limiterEntry
}

type limiterEntry struct {
	lim  *rate.Limiter
	last time.Time
}

func newLimiters(l RateLimit, maxKeys int) *limiters {
	return &limiters{limit: l, maxKeys: maxKeys, keys: map[string]*limiterEntry{}}
}

func (l *limiters) entry(key string, now time.Time) *limiterEntry {
	e, ok := l.keys[key]
	if !ok {
		if len(l.keys) >= l.maxKeys {
			l.sweep(now)
		}
		e = &limiterEntry{lim: rate.NewLimiter(rate.Every(l.limit.Every), l.limit.Burst)}
		l.keys[key] = e
	}
	e.last = now
	return e
}

// sweep drops entries idle long enough to have refilled; if that frees
// nothing, it drops the least recently used half.
func (l *limiters) sweep(now time.Time) {
	full := time.Duration(l.limit.Burst) * l.limit.Every
	for k, e := range l.keys {
		if now.Sub(e.last) >= full {
			delete(l.keys, k)
		}
	}
	if len(l.keys) < l.maxKeys {
		return
	}
	var cutoff time.Time
	times := make([]time.Time, 0, len(l.keys))
	for _, e := range l.keys {
		times = append(times, e.last)
	}
	// Median of last-use times, found by sorting a copy.
	sortTimes(times)
	cutoff = times[len(times)/2]
	for k, e := range l.keys {
		if !e.last.After(cutoff) {
			delete(l.keys, k)
		}
	}
}

func sortTimes(ts []time.Time) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
}

// Allow takes one token for key at now, reporting whether there was one.
func (l *limiters) Allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entry(key, now).lim.AllowN(now, 1)
}
