package leases

import (
	"errors"
	"testing"
	"time"
)

func TestRules(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ttl := 3 * time.Second
	r := Record{Region: "0,0"}

	r, err := Acquire(r, "A", t0, ttl)
	if err != nil || r.LeaseID != 1 || r.Holder != "A" || !r.Expires.Equal(t0.Add(ttl)) {
		t.Fatalf("first acquire: %+v %v", r, err)
	}
	if _, err := Acquire(r, "B", t0.Add(ttl-1), ttl); !errors.Is(err, ErrHeld) {
		t.Fatalf("acquire of a held lease: %v", err)
	}
	// Not even the holder can acquire again while the lease runs.
	if _, err := Acquire(r, "A", t0.Add(time.Second), ttl); !errors.Is(err, ErrHeld) {
		t.Fatalf("re-acquire by holder: %v", err)
	}
	r, err = Renew(r, "A", 1, t0.Add(2*time.Second), ttl)
	if err != nil || !r.Expires.Equal(t0.Add(2*time.Second+ttl)) {
		t.Fatalf("renew: %+v %v", r, err)
	}
	for _, tc := range []struct {
		name   string
		holder string
		id     uint64
		at     time.Time
	}{
		{"other holder", "B", 1, t0.Add(2 * time.Second)},
		{"old id", "A", 0, t0.Add(2 * time.Second)},
		{"expired", "A", 1, r.Expires},
	} {
		if _, err := Renew(r, tc.holder, tc.id, tc.at, ttl); !errors.Is(err, ErrLost) {
			t.Errorf("renew %s: got %v, want ErrLost", tc.name, err)
		}
	}
	// After expiry another holder gets the next ID.
	r, err = Acquire(r, "B", r.Expires, ttl)
	if err != nil || r.LeaseID != 2 || r.Holder != "B" {
		t.Fatalf("takeover: %+v %v", r, err)
	}
	// Release by a non-holder changes nothing; by the holder it frees.
	if _, changed, err := Release(r, "A", 2, r.Granted); changed || err != nil {
		t.Fatalf("release by non-holder: changed=%v %v", changed, err)
	}
	at := r.Granted.Add(time.Second)
	r, changed, err := Release(r, "B", 2, at)
	if !changed || err != nil || r.ActiveAt(at) || !r.Expires.Equal(at) {
		t.Fatalf("release: %+v %v %v", r, changed, err)
	}
	// The ID never goes back, even for the earlier holder.
	r, err = Acquire(r, "A", at, ttl)
	if err != nil || r.LeaseID != 3 {
		t.Fatalf("acquire after release: %+v %v", r, err)
	}
}

func TestRulesRejectBadInput(t *testing.T) {
	now := time.Unix(1, 0)
	for _, r := range []Record{{Region: ""}, {Region: "a/b"}, {Region: "x'; DROP TABLE leases;--"}} {
		if _, err := Acquire(r, "A", now, time.Second); !errors.Is(err, ErrInvalid) {
			t.Errorf("region %q: got %v", r.Region, err)
		}
	}
	if _, err := Acquire(Record{Region: "r"}, "", now, time.Second); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty holder: %v", err)
	}
	if _, err := Acquire(Record{Region: "r"}, "A", now, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("zero ttl: %v", err)
	}
}
