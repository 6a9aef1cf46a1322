// Package leasetest checks the lease guarantee from logs, for tests of
// anything that holds coordinator leases: the server's log of lease
// intervals as granted and the holders' logs of commits, both in one clock
// domain (one process's time.Now, or a synctest bubble).
//
// The guarantee checked: the intervals of one region's leases never
// overlap (one may end at the instant the next starts), every commit lies
// inside the interval of the lease ID it was stamped with, granted to the
// peer that made it, and in the order commits were recorded a region's lease
// IDs never go back. Together these mean no two coordinators ever committed
// for one region at the same time.
package leasetest

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/leases"
)

// Commit is one commit a coordinator made.
type Commit struct {
	Region  string
	Holder  string
	LeaseID uint64
	At      time.Time
}

// Interval is a lease as the server granted it: from its first grant to
// its last expiry (or release).
type Interval struct {
	Region  string
	LeaseID uint64
	Holder  string
	Start   time.Time
	End     time.Time
}

type leaseKey struct {
	region string
	id     uint64
}

// Recorder collects both logs. It is safe for concurrent use.
type Recorder struct {
	mu        sync.Mutex
	intervals map[leaseKey]*Interval
	commits   []Commit
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{intervals: map[leaseKey]*Interval{}}
}

// Granted records the server's record after an acquire, renew or release.
// Call it in the order the server applied them (e.g. from the server's
// lease hook, which runs inside the region's transaction).
func (r *Recorder) Granted(rec leases.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := leaseKey{rec.Region, rec.LeaseID}
	iv, ok := r.intervals[k]
	if !ok {
		iv = &Interval{Region: rec.Region, LeaseID: rec.LeaseID, Holder: rec.Holder, Start: rec.Granted}
		r.intervals[k] = iv
	}
	iv.End = rec.Expires
}

// Committed records a commit.
func (r *Recorder) Committed(c Commit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commits = append(r.commits, c)
}

// Commits returns the commits recorded so far.
func (r *Recorder) Commits() []Commit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Commit(nil), r.commits...)
}

// Intervals returns the lease intervals, ordered by region and start.
func (r *Recorder) Intervals() []Interval {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Interval, 0, len(r.intervals))
	for _, iv := range r.intervals {
		out = append(out, *iv)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Region != out[j].Region {
			return out[i].Region < out[j].Region
		}
		return out[i].LeaseID < out[j].LeaseID
	})
	return out
}

// Check returns an error naming every violation of the guarantee.
func (r *Recorder) Check() error {
	ivs := r.Intervals()
	var errs []error
	for i := 1; i < len(ivs); i++ {
		prev, cur := ivs[i-1], ivs[i]
		if prev.Region != cur.Region {
			continue
		}
		if !cur.Start.After(prev.Start) {
			errs = append(errs, fmt.Errorf("region %s: lease %d starts at %v, not after lease %d at %v", cur.Region, cur.LeaseID, cur.Start, prev.LeaseID, prev.Start))
		}
		if cur.Start.Before(prev.End) {
			errs = append(errs, fmt.Errorf("region %s: lease %d (%s) starts %v before lease %d (%s) ends", cur.Region, cur.LeaseID, cur.Holder, prev.End.Sub(cur.Start), prev.LeaseID, prev.Holder))
		}
	}
	byKey := map[leaseKey]Interval{}
	for _, iv := range ivs {
		byKey[leaseKey{iv.Region, iv.LeaseID}] = iv
	}
	for _, c := range r.Commits() {
		iv, ok := byKey[leaseKey{c.Region, c.LeaseID}]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("commit by %s in region %s under lease %d that was never granted", c.Holder, c.Region, c.LeaseID))
		case iv.Holder != c.Holder:
			errs = append(errs, fmt.Errorf("commit by %s under lease %d of %s", c.Holder, c.LeaseID, iv.Holder))
		case c.At.Before(iv.Start) || c.At.After(iv.End):
			errs = append(errs, fmt.Errorf("commit by %s at %v outside its lease %d [%v, %v]", c.Holder, c.At, c.LeaseID, iv.Start, iv.End))
		}
	}
	// Independent of clocks: in the order the commits were recorded, a
	// region's lease IDs never go back (an old coordinator never commits
	// after a newer one has).
	latest := map[string]Commit{}
	for _, c := range r.Commits() {
		if prev, ok := latest[c.Region]; ok && c.LeaseID < prev.LeaseID {
			errs = append(errs, fmt.Errorf("region %s: %s committed under lease %d after %s committed under lease %d", c.Region, c.Holder, c.LeaseID, prev.Holder, prev.LeaseID))
			continue
		}
		latest[c.Region] = c
	}
	if len(errs) > maxReported {
		errs = append(errs[:maxReported], fmt.Errorf("… and %d more violations", len(errs)-maxReported))
	}
	return errors.Join(errs...)
}

// maxReported bounds the violations Check lists.
const maxReported = 10
