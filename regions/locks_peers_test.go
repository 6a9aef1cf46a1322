package regions

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
)

// lockedIncrement adds one to object id under its lock, as a two-step
// write: the lock's answer carries the value, the release writes the new
// one. It retries when the region is busy or the lock ran out first.
func lockedIncrement(ctx context.Context, cl *Client, c Coord, id string, ttl time.Duration) error {
	for ctx.Err() == nil {
		obj, err := cl.Lock(ctx, c, id, ttl)
		if errors.Is(err, ErrBusy) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			return err
		}
		n := 0
		if len(obj.Value) > 0 {
			if n, err = strconv.Atoi(string(obj.Value)); err != nil {
				return err
			}
		}
		_, err = cl.ReleaseWith(ctx, c, id, []byte(strconv.Itoa(n+1)))
		var conflict *ConflictError
		if errors.As(err, &conflict) {
			continue // the lock ran out before the release: not written
		}
		return err
	}
	return ctx.Err()
}

// TestLocksOverPeers: four peers on the in-memory network each make five
// locked increments of one counter at once: the counter ends at exactly
// 20. Then a player takes a lock and crashes; another's lock waits at the
// coordinator and gets the object once the crashed holder's lock runs
// out.
func TestLocksOverPeers(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cl := newCluster(t, 4, time.Millisecond, testConfig(1, 1))
		cl.settle(t, 30*time.Second)
		c := Coord{0, 0}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		const players, each = 4, 5
		var wg sync.WaitGroup
		errs := make(chan error, players*each)
		for _, m := range cl.live() {
			wg.Go(func() {
				for range each {
					if err := lockedIncrement(ctx, m.cl, c, "counter", 2*time.Second); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		st, err := cl.live()[0].cl.Get(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, o := range st.Objects {
			if o.ID == "counter" {
				got = string(o.Value)
			}
		}
		if got != strconv.Itoa(players*each) {
			t.Fatalf("counter is %q after %d locked increments", got, players*each)
		}

		// A holder that is neither coordinator nor replica crashes holding a
		// lock; the next one waits for its TTL.
		co, re := cl.truth(c)
		var holder, waiter *member
		for _, m := range cl.live() {
			switch {
			case m.id() == co || m.id() == re:
			case holder == nil:
				holder = m
			default:
				waiter = m
			}
		}
		const ttl = time.Second
		if _, err := holder.cl.Lock(ctx, c, "door", ttl); err != nil {
			t.Fatal(err)
		}
		holder.stop()
		start := time.Now()
		obj, err := waiter.cl.Lock(ctx, c, "door", ttl)
		if err != nil {
			t.Fatalf("lock after the holder crashed: %v", err)
		}
		if string(obj.LockHolder) != string(waiter.id()) {
			t.Fatalf("lock answered with holder %q", obj.LockHolder)
		}
		t.Logf("the waiter got the crashed holder's lock after %v (TTL %v)", time.Since(start).Round(time.Millisecond), ttl)
	})
}

// TestAdversarialLockQueueFlood: a hostile peer holds a lock and floods the
// coordinator with lock requests on it. At most the per-player bound of
// them wait, the rest are answered BUSY, and an honest player's lock
// still waits its turn and gets the object when the hostile lock runs
// out.
func TestAdversarialLockQueueFlood(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cl := newCluster(t, 4, time.Millisecond, testConfig(1, 1))
		cl.settle(t, 30*time.Second)
		c := Coord{0, 0}
		co, _ := cl.truth(c)
		var hostile, honest *member
		for _, m := range cl.live() {
			switch {
			case m.id() == co:
			case hostile == nil:
				hostile = m
			case honest == nil:
				honest = m
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := hostile.cl.Lock(ctx, c, "gate", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		coord := cl.byID(co)
		waiting := func() (total, byHostile int) {
			sl := coord.svc.slot(c)
			inspect(coord.svc, func() { total, byHostile = sl.m.locks.total, sl.m.locks.byPlayer[hostile.id()] })
			return total, byHostile
		}
		// The flood: locks on the hostile peer's own locked object come back
		// at once (it holds it); locks on objects another holds would wait.
		// So it first makes the honest player hold some, then floods those.
		for i := range 3 {
			if _, err := honest.cl.Lock(ctx, c, "honest"+strconv.Itoa(i), 2*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		var busy sync.WaitGroup
		var mu sync.Mutex
		nBusy, most := 0, 0
		for i := range 40 {
			busy.Go(func() {
				_, err := hostile.cl.Lock(ctx, c, "honest"+strconv.Itoa(i%3), time.Second)
				total, mine := waiting()
				mu.Lock()
				defer mu.Unlock()
				most = max(most, mine, total)
				if errors.Is(err, ErrBusy) {
					nBusy++
				}
			})
		}
		// The honest player's lock on the hostile one's object waits and gets
		// it after the hostile lock's TTL.
		obj, err := honest.cl.Lock(ctx, c, "gate", time.Second)
		if err != nil || string(obj.LockHolder) != string(honest.id()) {
			t.Fatalf("honest lock: %v, %v", obj, err)
		}
		busy.Wait()
		if nBusy == 0 {
			t.Error("no flood request was answered BUSY")
		}
		if most > maxWaitersPerPlayer+1 {
			t.Errorf("up to %d requests waited, bound %d per player (+1 honest)", most, maxWaitersPerPlayer)
		}
		t.Logf("%d of 40 flood requests BUSY; at most %d waited", nBusy, most)
	})
}

// TestLockAcrossFailover: a player's lock survives its coordinator's crash
// (locks ride in the replicated objects): another player's lock, sent
// after the crash, is granted by the new coordinator only once the first
// lock has run out, and the first player's late write with the release is
// refused.
func TestLockAcrossFailover(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cl := newCluster(t, 5, time.Millisecond, testConfig(1, 1))
		cl.settle(t, 30*time.Second)
		c := Coord{0, 0}
		co, re := cl.truth(c)
		var first, second *member
		for _, m := range cl.live() {
			switch {
			case m.id() == co || m.id() == re:
			case first == nil:
				first = m
			case second == nil:
				second = m
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := first.cl.Initialize(ctx, c, "chest", []byte("gold")); err != nil {
			t.Fatal(err)
		}
		lock, err := first.cl.Lock(ctx, c, "chest", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if string(lock.Value) != "gold" {
			t.Fatalf("the lock's answer carries %q", lock.Value)
		}
		expires := lock.LockExpires
		cl.byID(co).stop()
		got, err := second.cl.Lock(ctx, c, "chest", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if now := time.Now(); string(got.LockHolder) != string(second.id()) || now.Before(expires) {
			t.Fatalf("second lock: holder %q at %v, the first lock ran out at %v", got.LockHolder, now, expires)
		}
		_, err = first.cl.ReleaseWith(ctx, c, "chest", []byte("stolen"))
		var conflict *ConflictError
		var locked *LockedError
		if !errors.As(err, &conflict) && !errors.As(err, &locked) {
			t.Fatalf("a release-write after the lock ran out: %v", err)
		}
		t.Logf("new coordinator granted the lock %v after the first ran out", time.Since(expires).Round(time.Millisecond))
	})
}

// TestAbandonedLockWaitOverPeers: a player's lock waits for an object
// another holds; the player gives up (its request's context ends, which
// resets its stream). A second player's lock waits behind it. When the
// holder releases, the lock goes to the second player at once, not to the
// one who left (who would hold it, unknowing, for its whole TTL).
func TestAbandonedLockWaitOverPeers(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cl := newCluster(t, 4, time.Millisecond, testConfig(1, 1))
		cl.settle(t, 30*time.Second)
		c := Coord{0, 0}
		co, _ := cl.truth(c)
		var players []*member
		for _, m := range cl.live() {
			if m.id() != co {
				players = append(players, m)
			}
		}
		holder, leaver, patient := players[0], players[1], players[2]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := holder.cl.Lock(ctx, c, "gate", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		coord := cl.byID(co)
		waiting := func() int {
			sl := coord.svc.slot(c)
			var n int
			inspect(coord.svc, func() { n = sl.m.locks.waiting("gate", time.Now().UnixMilli()) })
			return n
		}
		leaveCtx, leave := context.WithCancel(ctx)
		left := make(chan error, 1)
		go func() {
			_, err := leaver.cl.Lock(leaveCtx, c, "gate", 30*time.Second)
			left <- err
		}()
		waitUntil(t, 10*time.Second, "the leaving player's lock to wait", func() bool { return waiting() == 1 })
		type result struct {
			obj Object
			err error
		}
		got := make(chan result, 1)
		go func() {
			obj, err := patient.cl.Lock(ctx, c, "gate", 30*time.Second)
			got <- result{obj, err}
		}()
		waitUntil(t, 10*time.Second, "the patient player's lock to wait", func() bool { return waiting() == 2 })
		leave()
		if err := <-left; err == nil {
			t.Fatal("the abandoned lock was granted")
		}
		waitUntil(t, 10*time.Second, "the abandoned wait to be dropped", func() bool { return waiting() == 1 })
		if err := holder.cl.Release(ctx, c, "gate"); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.err != nil || string(r.obj.LockHolder) != string(patient.id()) {
			t.Fatalf("the patient player's lock: %+v, %v", r.obj, r.err)
		}
	})
}
