package regions

import (
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/node"
)

// Coord names a region by its column and row in the world's grid.
type Coord struct {
	X, Y int
}

func (c Coord) String() string { return fmt.Sprintf("%d,%d", c.X, c.Y) }

// Key is the region's name in the DHT keyspace. The DHT hashes it with
// SHA-256, as it hashes peer IDs, so placement is XOR distance between the
// two hashes.
func Key(world string, c Coord) string {
	return fmt.Sprintf("overworld/%s/region/%d,%d", world, c.X, c.Y)
}

// TopicPrefix is the stem of every pubsub topic of the region:
// /overworld/<world>/region/<x>,<y>, followed by /pos or /events.
func TopicPrefix(world string, c Coord) string {
	return fmt.Sprintf("/overworld/%s/region/%d,%d", world, c.X, c.Y)
}

// Placement returns the coordinator (closest) and replica (next closest) of
// the region key among candidates. The replica is empty when there is only
// one candidate.
func Placement(key string, candidates []peer.ID) (coordinator, replica peer.ID) {
	sorted := node.SortByDistance(key, append([]peer.ID(nil), candidates...))
	switch len(sorted) {
	case 0:
		return "", ""
	case 1:
		return sorted[0], ""
	default:
		return sorted[0], sorted[1]
	}
}
