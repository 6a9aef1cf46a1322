package leases_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/leases"
	"github.com/overworld-p2p/overworld/bootstrap/leases/leasetest"
)

// memService applies the lease rules to records in memory, as the account
// server's store does in a transaction.
type memService struct {
	mu   sync.Mutex
	ttl  time.Duration
	recs map[string]leases.Record
	log  *leasetest.Recorder
}

func (s *memService) apply(region string, f func(leases.Record, time.Time) (leases.Record, error)) (leases.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[region]
	if !ok {
		r = leases.Record{Region: region}
	}
	r, err := f(r, time.Now())
	if err != nil {
		return r, err
	}
	s.recs[region] = r
	s.log.Granted(r)
	return r, nil
}

// Partition modes of a memClient.
const (
	linkUp       = iota
	dropRequest  // the server never sees the request
	dropResponse // the server applies it, the holder never hears back
)

// memClient is one holder's link to the service, which the test can cut.
type memClient struct {
	svc    *memService
	holder string
	mode   atomic.Int32
}

// around runs apply as the link allows: a cut link hangs until the
// request times out, like a black-holed TCP connection.
func (c *memClient) around(ctx context.Context, apply func() (leases.Record, error)) (leases.Record, error) {
	mode := c.mode.Load()
	if mode == dropRequest {
		<-ctx.Done()
		return leases.Record{}, ctx.Err()
	}
	r, err := apply()
	if mode == dropResponse {
		<-ctx.Done()
		return leases.Record{}, ctx.Err()
	}
	return r, err
}

func (c *memClient) grant(r leases.Record) leases.Grant {
	return leases.Grant{Region: r.Region, LeaseID: r.LeaseID, Holder: r.Holder, TTL: c.svc.ttl}
}

func (c *memClient) AcquireLease(ctx context.Context, region string) (leases.Grant, error) {
	r, err := c.around(ctx, func() (leases.Record, error) {
		return c.svc.apply(region, func(r leases.Record, now time.Time) (leases.Record, error) {
			return leases.Acquire(r, c.holder, now, c.svc.ttl)
		})
	})
	return c.grant(r), err
}

func (c *memClient) RenewLease(ctx context.Context, region string, id uint64) (leases.Grant, error) {
	r, err := c.around(ctx, func() (leases.Record, error) {
		return c.svc.apply(region, func(r leases.Record, now time.Time) (leases.Record, error) {
			return leases.Renew(r, c.holder, id, now, c.svc.ttl)
		})
	})
	return c.grant(r), err
}

func (c *memClient) ReleaseLease(ctx context.Context, region string, id uint64) error {
	_, err := c.around(ctx, func() (leases.Record, error) {
		return c.svc.apply(region, func(r leases.Record, now time.Time) (leases.Record, error) {
			r, _, err := leases.Release(r, c.holder, id, now)
			return r, err
		})
	})
	return err
}

// committer commits every tick while its holder says the lease is valid.
func committer(ctx context.Context, wg *sync.WaitGroup, h *leases.Holder, name string, rec *leasetest.Recorder) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now := time.Now()
			if id, ok := h.Valid(now); ok {
				rec.Committed(leasetest.Commit{Region: "7,3", Holder: name, LeaseID: id, At: now})
			}
		}
	}()
}

func commitsBy(rec *leasetest.Recorder, holder string, after time.Time) int {
	n := 0
	for _, c := range rec.Commits() {
		if c.Holder == holder && !c.At.Before(after) {
			n++
		}
	}
	return n
}

// TestPartitionHandOver cuts the first coordinator off from the lease
// service in each way a link can fail and checks that it stops committing,
// that the second coordinator takes over, and that at no moment both
// commit (from the service's and both holders' logs, in one clock domain).
func TestPartitionHandOver(t *testing.T) {
	for _, mode := range []struct {
		name string
		mode int32
	}{{"requests lost", dropRequest}, {"responses lost", dropResponse}} {
		t.Run(mode.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := leasetest.NewRecorder()
				svc := &memService{ttl: 3 * time.Second, recs: map[string]leases.Record{}, log: rec}
				quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
				linkA := &memClient{svc: svc, holder: "A"}
				linkB := &memClient{svc: svc, holder: "B"}
				var changesA []leases.Status
				a, err := leases.NewHolder(leases.HolderConfig{Region: "7,3", Client: linkA, Logger: quiet,
					OnChange: func(s leases.Status) { changesA = append(changesA, s) }})
				if err != nil {
					t.Fatal(err)
				}
				b, err := leases.NewHolder(leases.HolderConfig{Region: "7,3", Client: linkB, Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				commitCtx, stopCommits := context.WithCancel(ctx)
				var wg, commits sync.WaitGroup
				wg.Go(func() { a.Run(ctx) })
				synctest.Wait()
				if !a.Status().Held {
					t.Fatal("A did not get the free lease")
				}
				wg.Go(func() { b.Run(ctx) })
				committer(commitCtx, &commits, a, "A", rec)
				committer(commitCtx, &commits, b, "B", rec)

				time.Sleep(10 * time.Second)
				if b.Status().Held || commitsBy(rec, "B", time.Time{}) != 0 {
					t.Fatal("B holds the lease while A renews it")
				}
				if commitsBy(rec, "A", time.Time{}) == 0 {
					t.Fatal("A never committed")
				}

				linkA.mode.Store(mode.mode)
				cut := time.Now()
				time.Sleep(10 * time.Second)
				if a.Status().Held {
					t.Fatal("A still believes it holds the lease 10s into the partition (ttl 3s)")
				}
				if id, ok := b.Valid(time.Now()); !ok || id != 2 {
					t.Fatalf("B did not take over with lease 2: id=%d ok=%v", id, ok)
				}
				if commitsBy(rec, "B", cut) == 0 {
					t.Fatal("B never committed after taking over")
				}

				// Healed, A finds the region taken and stays out.
				linkA.mode.Store(linkUp)
				healed := time.Now()
				time.Sleep(5 * time.Second)
				if n := commitsBy(rec, "A", healed); n != 0 {
					t.Fatalf("A committed %d times after the partition healed", n)
				}
				// A coordinator stops its commit path before it lets go
				// of the lease (Run releases it on return).
				stopCommits()
				commits.Wait()
				cancel()
				wg.Wait()
				if err := rec.Check(); err != nil {
					t.Fatal(err)
				}
				if len(changesA) != 2 || !changesA[0].Held || changesA[1].Held {
					t.Fatalf("A's changes: %+v", changesA)
				}
				// B released on stop: the region is free at once.
				if r := svc.recs["7,3"]; r.ActiveAt(time.Now()) {
					t.Fatalf("lease still active after both holders stopped: %+v", r)
				}
			})
		})
	}
}

// A holder gives up when the server says the lease is gone (here: it was
// released by an operator action modelled as a direct record change) and
// acquires a new ID.
func TestHolderReacquiresAfterLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := leasetest.NewRecorder()
		svc := &memService{ttl: 3 * time.Second, recs: map[string]leases.Record{}, log: rec}
		h, err := leases.NewHolder(leases.HolderConfig{Region: "7,3", Client: &memClient{svc: svc, holder: "A"},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { h.Run(ctx); close(done) }()
		synctest.Wait()
		if id, ok := h.Valid(time.Now()); !ok || id != 1 {
			t.Fatalf("first lease: %d %v", id, ok)
		}
		svc.mu.Lock()
		r := svc.recs["7,3"]
		r.Holder = ""
		r.Expires = time.Now()
		svc.recs["7,3"] = r
		svc.mu.Unlock()
		time.Sleep(2 * time.Second)
		if id, ok := h.Valid(time.Now()); !ok || id != 2 {
			t.Fatalf("after loss: %d %v", id, ok)
		}
		cancel()
		<-done
	})
}

func TestNewHolderRejectsBadConfig(t *testing.T) {
	if _, err := leases.NewHolder(leases.HolderConfig{Region: "a/b", Client: &memClient{}}); err == nil {
		t.Error("bad region accepted")
	}
	if _, err := leases.NewHolder(leases.HolderConfig{Region: "a"}); err == nil {
		t.Error("missing client accepted")
	}
}
