package devnet

import (
	"context"
	"testing"
	"time"
)

func TestDevnetPeersJoinAndFillTables(t *testing.T) {
	const peers = 5
	d, err := Start(context.Background(), Config{Peers: peers, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	seen := map[int]bool{}
	timeout := time.After(60 * time.Second)
	for len(seen) < peers {
		select {
		case j, ok := <-d.Joined():
			if !ok {
				t.Fatalf("join reports ended after %d of %d peers", len(seen), peers)
			}
			if seen[j.Index] {
				t.Fatalf("peer %d reported joining twice", j.Index)
			}
			seen[j.Index] = true
		case <-timeout:
			t.Fatalf("only %d of %d peers joined", len(seen), peers)
		}
	}
	if _, ok := <-d.Joined(); ok {
		t.Fatal("Joined not closed after every peer joined")
	}
	for i, size := range d.TableSizes() {
		if size == 0 {
			t.Errorf("node %d has an empty routing table after joining", i)
		}
	}
}
