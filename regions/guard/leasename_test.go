package guard

import (
	"crypto/rand"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/leases"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/regions"
)

// The lease service checks placement with leases.PlacementKey and
// leases.Rank; they must name the key and the order the region service
// places regions by, or honest coordinators would be refused.
func TestLeaseServicePlacesAsTheRegionService(t *testing.T) {
	var ids []peer.ID
	var raw []string
	for range 30 {
		_, pub, _ := crypto.GenerateEd25519Key(rand.Reader)
		id, _ := peer.IDFromPublicKey(pub)
		ids = append(ids, id)
		raw = append(raw, string(id))
	}
	for _, c := range []regions.Coord{{X: 0, Y: 0}, {X: 3, Y: 7}, {X: 120, Y: 4}} {
		key, ok := leases.PlacementKey(LeaseName("demo", c))
		if !ok || key != regions.Key("demo", c) {
			t.Fatalf("region %s: lease service key %q, region key %q", c, key, regions.Key("demo", c))
		}
		for i, id := range node.SortByDistance(key, append([]peer.ID(nil), ids...)) {
			if r := leases.Rank(key, string(id), raw); r != i {
				t.Fatalf("region %s: peer placed %d ranks %d at the lease service", c, i, r)
			}
		}
	}
}
