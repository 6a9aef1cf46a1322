package accounts

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkPasswordHash is the cost of one login's password check at the
// production parameters.
func BenchmarkPasswordHash(b *testing.B) {
	h, err := newHasher(DefaultHashParams, 1)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	enc, err := h.Hash(ctx, "benchmark password")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if ok, err := h.Check(ctx, enc, "benchmark password"); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// forEachStoreB is forEachStore for benchmarks.
func forEachStoreB(b *testing.B, f func(b *testing.B, s *Store)) {
	b.Run("sqlite", func(b *testing.B) {
		s, err := OpenStore(context.Background(), "sqlite:"+b.TempDir()+"/bench.db", "")
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		f(b, s)
	})
	b.Run("postgres", func(b *testing.B) {
		dsn := postgresDSN(b)
		s, err := OpenStore(context.Background(), dsn, "")
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		f(b, s)
	})
}

// BenchmarkLeaseRenew is one coordinator lease renewal over loopback HTTP:
// token check, session and account lookups, and the locking transaction.
func BenchmarkLeaseRenew(b *testing.B) {
	forEachStoreB(b, func(b *testing.B, s *Store) {
		e := newTestEnv(b, s, nil)
		c, _ := e.registerAndLogin(b, "bench-lease")
		ctx := context.Background()
		g, err := c.AcquireLease(ctx, "0,0")
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := c.RenewLease(ctx, "0,0", g.LeaseID); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSaveCharacter is one save of a character with 20 item kinds
// over loopback HTTP.
func BenchmarkSaveCharacter(b *testing.B) {
	forEachStoreB(b, func(b *testing.B, s *Store) {
		e := newTestEnv(b, s, nil)
		c, _ := e.registerAndLogin(b, "bench-save")
		ctx := context.Background()
		ch := Character{Region: "1,1", Health: 100}
		for i := range 20 {
			ch.Inventory = append(ch.Inventory, Item{Kind: fmt.Sprintf("item%02d", i), Count: int64(i + 1)})
		}
		for b.Loop() {
			if _, err := c.SaveCharacter(ctx, ch); err != nil {
				b.Fatal(err)
			}
		}
	})
}
