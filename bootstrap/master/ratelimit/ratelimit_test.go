package ratelimit

import (
	"fmt"
	"testing"
	"time"
)

func TestBurstThenRefill(t *testing.T) {
	p, err := New(Rate{Every: time.Second, Burst: 3}, 10)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	for i := range 3 {
		if !p.Allow("a", now) {
			t.Fatalf("event %d of the burst refused", i)
		}
	}
	if p.Allow("a", now) {
		t.Fatal("fourth event of a burst of 3 allowed")
	}
	if !p.Allow("b", now) {
		t.Fatal("another key shares a's bucket")
	}
	if !p.Allow("a", now.Add(time.Second)) {
		t.Fatal("no token after one refill period")
	}
	if p.Allow("a", now.Add(time.Second)) {
		t.Fatal("two tokens after one refill period")
	}
}

func TestTableStaysBoundedAndEvictsLeastRecentlyUsed(t *testing.T) {
	p, err := New(Rate{Every: time.Hour, Burst: 1}, 4)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	p.Allow("keep", now) // spends keep's only token
	for i := range 100 {
		p.Allow("keep", now) // keep stays the most recently used
		p.Allow(fmt.Sprint("flood", i), now)
		if p.Len() > 4 {
			t.Fatalf("table holds %d keys, bound 4", p.Len())
		}
	}
	if p.Allow("keep", now) {
		t.Fatal("a key in constant use was evicted by a flood of fresh keys (its empty bucket came back full)")
	}
}

func TestValidate(t *testing.T) {
	for _, r := range []Rate{{}, {Every: time.Second}, {Burst: 1}, {Every: -time.Second, Burst: 1}} {
		if _, err := New(r, 1); err == nil {
			t.Errorf("rate %+v accepted", r)
		}
	}
	if _, err := New(Rate{Every: time.Second, Burst: 1}, 0); err == nil {
		t.Error("table of 0 keys accepted")
	}
}
