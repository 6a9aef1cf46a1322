package regions

import (
	"bytes"
	"crypto/sha256"
	"sort"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
)

// hashCache keeps the SHA-256 of region keys and peer IDs: the DHT's
// keyspace, in which placement is XOR distance. Sorting peers for every
// request would otherwise hash every candidate each time.
type hashCache struct {
	mu sync.Mutex
	m  map[string][sha256.Size]byte
}

const hashCacheMax = 1 << 14

func (h *hashCache) of(s string) [sha256.Size]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.m[s]; ok {
		return v
	}
	if h.m == nil || len(h.m) >= hashCacheMax {
		h.m = map[string][sha256.Size]byte{}
	}
	v := sha256.Sum256([]byte(s))
	h.m[s] = v
	return v
}

// sortByDistance orders peers by XOR distance of their hashes to the
// hash of key, closest first, as node.SortByDistance does.
func (h *hashCache) sortByDistance(key string, peers []peer.ID) []peer.ID {
	target := h.of(key)
	type item struct {
		p peer.ID
		d [sha256.Size]byte
	}
	items := make([]item, len(peers))
	for i, p := range peers {
		hp := h.of(string(p))
		items[i].p = p
		for j := range hp {
			items[i].d[j] = hp[j] ^ target[j]
		}
	}
	sort.Slice(items, func(i, j int) bool { return bytes.Compare(items[i].d[:], items[j].d[:]) < 0 })
	for i := range items {
		peers[i] = items[i].p
	}
	return peers
}

// closer reports whether a is XOR-closer than b to key.
func (h *hashCache) closer(key string, a, b peer.ID) bool {
	t, ha, hb := h.of(key), h.of(string(a)), h.of(string(b))
	for i := range t {
		da, db := ha[i]^t[i], hb[i]^t[i]
		if da != db {
			return da < db
		}
	}
	return false
}
