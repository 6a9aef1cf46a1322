package regions

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
)

// lockCluster is four settled peers of a one-region world; the hostile
// and the honest player are neither coordinator nor replica.
func lockCluster(t *testing.T, cfg Config) (hostile, honest *member) {
	t.Helper()
	cl := newCluster(t, 4, time.Millisecond, cfg)
	cl.settle(t, 30*time.Second)
	co, re := cl.truth(Coord{0, 0})
	for _, m := range cl.live() {
		switch {
		case m.id() == co || m.id() == re:
		case hostile == nil:
			hostile = m
		default:
			honest = m
		}
	}
	return hostile, honest
}

// TestAdversarialLockRenewedForever: a player holds a lock and renews it
// over and over, to keep another player who waits for the object out for
// good. Once it has held the lock for MaxLockHold its renewals are
// answered BUSY, the lock runs out and the waiting player gets it.
func TestAdversarialLockRenewedForever(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cfg := testConfig(1, 1)
		cfg.MaxLockHold = time.Second
		hostile, honest := lockCluster(t, cfg)
		c := Coord{0, 0}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := hostile.cl.Lock(ctx, c, "gate", 500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		done := make(chan struct{})
		var renewed, refused atomic.Int64
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				_, err := hostile.cl.Lock(ctx, c, "gate", 500*time.Millisecond)
				switch {
				case err == nil:
					renewed.Add(1)
				case errors.Is(err, ErrBusy):
					refused.Add(1)
				}
			}
		}()
		start := time.Now()
		obj, err := honest.cl.Lock(ctx, c, "gate", time.Second)
		close(stop)
		<-done
		if err != nil || obj.LockHolder != honest.id() {
			t.Fatalf("the waiting player's lock: %+v, %v", obj, err)
		}
		if refused.Load() == 0 {
			t.Fatal("no renewal was refused")
		}
		t.Logf("the waiting player got the lock after %s; %d renewals taken, %d refused",
			time.Since(start).Round(time.Millisecond), renewed.Load(), refused.Load())
	})
}

// TestAdversarialLocksAcrossObjects: a player locks object after object
// of a region, to make every other player wait. Past maxLocksPerPlayer its
// locks are answered BUSY, and another player locks the next object at
// once; renewing a lock it holds is still allowed.
func TestAdversarialLocksAcrossObjects(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		hostile, honest := lockCluster(t, testConfig(1, 1))
		c := Coord{0, 0}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := range maxLocksPerPlayer {
			if _, err := hostile.cl.Lock(ctx, c, "chest"+strconv.Itoa(i), 30*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		next := "chest" + strconv.Itoa(maxLocksPerPlayer)
		if _, err := hostile.cl.Lock(ctx, c, next, 30*time.Second); !errors.Is(err, ErrBusy) {
			t.Fatalf("lock %d by one player: %v, want BUSY", maxLocksPerPlayer+1, err)
		}
		if _, err := hostile.cl.Lock(ctx, c, "chest0", 30*time.Second); err != nil {
			t.Fatalf("renewing a held lock: %v", err)
		}
		obj, err := honest.cl.Lock(ctx, c, next, time.Second)
		if err != nil || obj.LockHolder != honest.id() {
			t.Fatalf("another player's lock: %+v, %v", obj, err)
		}
	})
}
