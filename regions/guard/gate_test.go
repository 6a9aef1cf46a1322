package guard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/leases"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions"
)

// fakeLeases is the lease service's rules (package leases) in memory, with
// a switch that makes every call fail as a cut link does.
type fakeLeases struct {
	down     atomic.Bool
	mu       sync.Mutex
	recs     map[string]leases.Record
	released []uint64
}

var errCut = errors.New("dial: connection timed out")

func (f *fakeLeases) apply(region string, op func(leases.Record) (leases.Record, error)) (leases.Grant, error) {
	if f.down.Load() {
		return leases.Grant{}, errCut
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rec := f.recs[region]
	rec.Region = region
	rec, err := op(rec)
	if err != nil {
		return leases.Grant{}, err
	}
	f.recs[region] = rec
	return leases.Grant{Region: region, LeaseID: rec.LeaseID, Holder: rec.Holder, TTL: 300 * time.Millisecond}, nil
}

func (f *fakeLeases) AcquireLease(_ context.Context, region string) (leases.Grant, error) {
	return f.apply(region, func(r leases.Record) (leases.Record, error) {
		return leases.Acquire(r, "me", time.Now(), 300*time.Millisecond)
	})
}

func (f *fakeLeases) RenewLease(_ context.Context, region string, id uint64) (leases.Grant, error) {
	return f.apply(region, func(r leases.Record) (leases.Record, error) {
		return leases.Renew(r, "me", id, time.Now(), 300*time.Millisecond)
	})
}

func (f *fakeLeases) ReleaseLease(_ context.Context, region string, id uint64) error {
	_, err := f.apply(region, func(r leases.Record) (leases.Record, error) {
		r, _, err := leases.Release(r, "me", id, time.Now())
		f.released = append(f.released, id)
		return r, err
	})
	return err
}

func (f *fakeLeases) releasedIDs() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint64(nil), f.released...)
}

// TestLeaseGate: the gate allows commits only while it holds the region's
// lease, steps aside while the lease service cannot be reached and it
// holds no lease, comes back when the service answers, and releases the
// lease when the role ends.
func TestLeaseGate(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		svc := &fakeLeases{recs: map[string]leases.Record{}}
		g, err := NewLeaseGate(GateConfig{World: world, Client: svc,
			Holder: leases.HolderConfig{RetryEvery: 20 * time.Millisecond}, ProbeEvery: 20 * time.Millisecond, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		c := regions.Coord{X: 2, Y: 3}
		if _, ok := g.Allowed(c); ok {
			t.Fatal("allowed without a lease")
		}
		if !g.Eligible(c) {
			t.Fatal("not eligible before any failure")
		}
		g.OnRoleChange(c, regions.RoleCoordinator)
		vnettest.EventuallyWithin(t, 5*time.Second, "the lease", func() bool { _, ok := g.Allowed(c); return ok })
		if id, _ := g.Allowed(c); id != 1 {
			t.Fatalf("lease ID %d, want 1", id)
		}
		if _, ok := g.Allowed(regions.Coord{}); ok {
			t.Fatal("allowed in a region this peer does not coordinate")
		}

		svc.down.Store(true)
		vnettest.EventuallyWithin(t, 5*time.Second, "commits to stop once the lease cannot be renewed", func() bool { _, ok := g.Allowed(c); return !ok })
		vnettest.EventuallyWithin(t, 5*time.Second, "stepping aside", func() bool { return !g.Eligible(c) && !g.Eligible(regions.Coord{}) })

		svc.down.Store(false)
		vnettest.EventuallyWithin(t, 5*time.Second, "eligible again", func() bool { return g.Eligible(regions.Coord{}) })
		vnettest.EventuallyWithin(t, 5*time.Second, "a new lease", func() bool { id, ok := g.Allowed(c); return ok && id > 1 })
		id, _ := g.Allowed(c)

		g.OnRoleChange(c, regions.RoleReplica)
		if _, ok := g.Allowed(c); ok {
			t.Fatal("allowed after the role ended")
		}
		vnettest.EventuallyWithin(t, 5*time.Second, "the lease to be released", func() bool {
			for _, r := range svc.releasedIDs() {
				if r == id {
					return true
				}
			}
			return false
		})
	})
}

func TestLeaseNameIsValid(t *testing.T) {
	if err := leases.ValidRegion(LeaseName(world, regions.Coord{X: 32767, Y: 32767})); err != nil {
		t.Fatal(err)
	}
	if _, err := NewLeaseGate(GateConfig{World: "bad/world", Client: &fakeLeases{}}); err == nil {
		t.Fatal("a world name that cannot name a lease was accepted")
	}
}
