package guard

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"
)

// BenchmarkAdmissionCheck is the validators' hot path: the verdict on an
// admitted author, from many goroutines at once.
func BenchmarkAdmissionCheck(b *testing.B) {
	clk := newFakeClock()
	now := clk.Now()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	hs := mockHostsB(b, 2)
	a, err := NewAdmission(hs[0], AdmissionConfig{Key: pub, Now: clk.Now, MaintainEvery: time.Hour, Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	id := hs[1].ID()
	tok := signed(b, key, id, now, now.Add(time.Hour))
	srv, err := NewAdmission(hs[1], AdmissionConfig{Key: pub, Token: func() []byte { return tok }, MaintainEvery: time.Hour, Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if v := a.Wait(ctx, id); v != Admitted {
		b.Fatalf("set-up: %v", v)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if a.Check(id) != Admitted {
				b.Fatal("not admitted")
			}
		}
	})
}

// BenchmarkAdmissionAsk is one complete ask on the in-memory network:
// stream, answer, offline verification.
func BenchmarkAdmissionAsk(b *testing.B) {
	clk := newFakeClock()
	now := clk.Now()
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	hs := mockHostsB(b, 2)
	a, err := NewAdmission(hs[0], AdmissionConfig{Key: pub, Now: clk.Now, MaintainEvery: time.Hour, Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	id := hs[1].ID()
	tok := signed(b, key, id, now, now.Add(time.Hour))
	srv, err := NewAdmission(hs[1], AdmissionConfig{Key: pub, Token: func() []byte { return tok }, MaintainEvery: time.Hour, Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	b.ResetTimer()
	for range b.N {
		got, err := a.ask(id)
		if err != nil || len(got) == 0 {
			b.Fatal(err)
		}
		a.mu.Lock()
		a.settleLocked(id, &ticket{}, got, nil, now)
		a.mu.Unlock()
	}
}
