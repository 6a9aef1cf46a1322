package position

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// AuthorLimiter bounds how many messages each author may have accepted on
// each topic: a token bucket per (author, topic), refilled at Rate and
// holding Burst. Gossipsub drops duplicates before validation, so every
// message a validator sees is a new one its author signed; a player that
// publishes valid messages faster than the game ever needs (to flood the
// topic, or to make every member validate and forward its traffic) is
// held to the rate, and what it sends beyond is dropped unforwarded.
//
// The table holds at most MaxKeys buckets. When it is full, a new key
// first takes the place of buckets idle long enough to be full again
// (forgetting them loses nothing), and if none is, of the least recently
// used one. Callers check admission before the limiter, so only
// token-holding players take places. It has no clock and is not safe for
// concurrent use: callers pass the time and hold a lock.
type AuthorLimiter struct {
	every   time.Duration
	burst   int
	maxKeys int
	buckets map[authorKey]*authorBucket
	refused uint64
}

type authorKey struct {
	author peer.ID
	topic  string
}

type authorBucket struct {
	lim  *rate.Limiter
	last time.Time
}

// Each author may publish twice per Interval on each region topic (its own
// update, and a batch if it coordinates the region), in bursts of up to
// authorBurst messages (updates held up in the network arrive together);
// the limiter keeps maxAuthors buckets.
const (
	authorBurst = 8
	maxAuthors  = 4096
)

func newAuthorLimiter(cfg Config) *AuthorLimiter {
	return NewAuthorLimiter(cfg.Interval/2, authorBurst, maxAuthors)
}

// NewAuthorLimiter allows each (author, topic) one message per every, with
// bursts of up to burst, for at most maxKeys pairs at once.
func NewAuthorLimiter(every time.Duration, burst, maxKeys int) *AuthorLimiter {
	return &AuthorLimiter{
		every: max(every, time.Microsecond), burst: max(burst, 1), maxKeys: max(maxKeys, 1),
		buckets: map[authorKey]*authorBucket{},
	}
}

// Allow takes one token of author's bucket on topic at now and reports
// whether there was one.
func (l *AuthorLimiter) Allow(author peer.ID, topic string, now time.Time) bool {
	k := authorKey{author, topic}
	b := l.buckets[k]
	if b == nil {
		if len(l.buckets) >= l.maxKeys {
			l.evict(now)
		}
		b = &authorBucket{lim: rate.NewLimiter(rate.Every(l.every), l.burst)}
		l.buckets[k] = b
	}
	b.last = now
	if b.lim.AllowN(now, 1) {
		return true
	}
	l.refused++
	return false
}

// evict makes room for one bucket: every bucket idle long enough to have
// refilled goes; if none has, the least recently used one does.
func (l *AuthorLimiter) evict(now time.Time) {
	full := time.Duration(l.burst) * l.every
	var oldest authorKey
	var oldestAt time.Time
	first := true
	for k, b := range l.buckets {
		if now.Sub(b.last) >= full {
			delete(l.buckets, k)
			continue
		}
		if first || b.last.Before(oldestAt) {
			oldest, oldestAt, first = k, b.last, false
		}
	}
	if len(l.buckets) >= l.maxKeys && !first {
		delete(l.buckets, oldest)
	}
}

// Len is the number of buckets held.
func (l *AuthorLimiter) Len() int { return len(l.buckets) }

// Refused counts the messages refused since the limiter was made.
func (l *AuthorLimiter) Refused() uint64 { return l.refused }
