package leases

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"
	"time"
)

func TestProofRoundTripAndTampering(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	want := Proof{Region: RegionLease("w", 3, 4), Holder: "12D3KooWholder", LeaseID: 7, Expires: time.UnixMilli(1_700_000_000_123)}
	b, err := SignProof(key, want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseProof(pub, b)
	if err != nil || got.Region != want.Region || got.Holder != want.Holder || got.LeaseID != 7 || !got.Expires.Equal(want.Expires) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if _, err := ParseProof(otherPub, b); !errors.Is(err, ErrProofSignature) {
		t.Fatalf("another key: %v", err)
	}
	for i := range b {
		bad := append([]byte(nil), b...)
		bad[i] ^= 1
		if _, err := ParseProof(pub, bad); err == nil {
			t.Fatalf("flipping byte %d still verifies", i)
		}
	}
	if _, err := ParseProof(pub, b[:len(b)-1]); err == nil {
		t.Fatal("a truncated proof verifies")
	}
	if _, err := SignProof(key, Proof{Region: "r", Holder: "h"}); err == nil {
		t.Fatal("lease ID 0 signed")
	}
}

func TestPlacementKey(t *testing.T) {
	for name, want := range map[string]string{
		RegionLease("w", 0, 0):         "overworld/w/region/0,0",
		RegionLease("demo:x", 12, 345): "overworld/demo:x/region/12,345",
	} {
		if got, ok := PlacementKey(name); !ok || got != want {
			t.Errorf("PlacementKey(%q) = %q %v, want %q", name, got, ok, want)
		}
	}
	for _, name := range []string{"2,3", "region:w:1", "region::1,2", "region:w:01,2", "region:w:-1,2", "region:w:1,2,3", "region:w:1,x"} {
		if got, ok := PlacementKey(name); ok {
			t.Errorf("PlacementKey(%q) = %q, want none", name, got)
		}
	}
}

func TestRank(t *testing.T) {
	peers := []string{"a", "b", "c", "d"}
	// Each peer's rank counts the others closer; ranks are a permutation.
	seen := map[int]bool{}
	for _, p := range peers {
		seen[Rank("key", p, peers)] = true
	}
	for i := range peers {
		if !seen[i] {
			t.Fatalf("ranks %v are not 0..%d", seen, len(peers)-1)
		}
	}
	if Rank("key", "a", peers) != Rank("key", "a", []string{"b", "c", "d"}) {
		t.Fatal("a holder's rank depends on whether the list names it")
	}
}

func FuzzParseProof(f *testing.F) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	b, _ := SignProof(key, Proof{Region: "region:w:1,2", Holder: "holder", LeaseID: 1, Expires: time.UnixMilli(5)})
	f.Add(b)
	f.Add([]byte("owg1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProof(pub, data)
		if err != nil {
			return
		}
		again, err := SignProof(key, p)
		if err != nil {
			t.Fatalf("a verified proof does not sign again: %v", err)
		}
		if q, err := ParseProof(pub, again); err != nil || q != p && !q.Expires.Equal(p.Expires) {
			t.Fatalf("re-signed proof: %+v %v", q, err)
		}
	})
}
