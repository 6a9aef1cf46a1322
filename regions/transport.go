package regions

import (
	"bufio"
	"context"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/regions/topic"
)

// Transport is everything the Service (and its Client) needs of the
// network: this peer's identity, one exchange with a peer (a request and
// its one reply), inbound exchanges, liveness signals, the view of
// candidate peers, the DHT lookup behind Locate, and the region event
// topics. libp2pTransport (transport_libp2p.go) is the production one; the
// in-memory network of regions/memnet drives scripted tests.
//
// What travels is bytes: the Service encodes and checks every message
// itself (wire.go), so each transport carries the same frames and every
// refusal stays in one place.
type Transport interface {
	// ID is this peer.
	ID() peer.ID
	// PrivKey is this peer's key, which signs what it commits (nil: none).
	PrivKey() crypto.PrivKey
	// PubKey is p's public key if known other than from its ID (nil if not).
	PubKey(p peer.ID) crypto.PubKey

	// Call sends request (this peer's token frame, then the message
	// frame: writeRequest) to p and returns the body of p's one reply
	// frame, read with a limit of MaxFrameSize. It ends with ctx; a
	// failure to reach p is an error.
	Call(ctx context.Context, p peer.ID, request []byte) (reply []byte, err error)
	// Serve hands every inbound exchange to h until Close (nil: stop).
	Serve(h Handler)

	// Notify tells up when a first connection to a peer opens and down
	// when the last one closes, until the returned stop is called. Both
	// must not block.
	Notify(up, down func(peer.ID)) (stop func())
	// Connected reports whether a connection to p is open now.
	Connected(p peer.ID) bool
	// Connect dials p (known by ID) if it is not connected.
	Connect(ctx context.Context, p peer.ID) error
	// CanCoordinate reports whether p may be placed as a coordinator or
	// replica (reachable without a relay; node.CanCoordinate).
	CanCoordinate(p peer.ID) bool
	// ServesRegions reports whether p is known to speak ProtocolID.
	ServesRegions(p peer.ID) bool

	// RoutingPeers lists the DHT routing table's peers, ConnectedPeers
	// the peers with an open connection: together, the candidates this
	// peer knows (filtered by the Service).
	RoutingPeers() []peer.ID
	ConnectedPeers() []peer.ID
	// RemovePeer drops p from the routing table (found unreachable).
	RemovePeer(p peer.ID)
	// RefreshRoutingTable asks the DHT to refresh its table now.
	RefreshRoutingTable()
	// ClosestPeers looks key up on the network and returns up to count
	// peers closest to it, closest first (this peer included if it can
	// coordinate).
	ClosestPeers(ctx context.Context, key string, count int) ([]peer.ID, error)

	// JoinTopic joins the named topic with validate deciding each of its
	// messages.
	JoinTopic(name string, validate topic.Validator) (topic.Channel, error)
	// TopicPeers lists the peers this peer knows subscribed to the named
	// topic, joined or not.
	TopicPeers(name string) []peer.ID
}

// Handler serves one inbound exchange from from (an alias, so that other
// packages implement Transport without importing this one): it reads the request
// (token frame, then message frame) from r and returns the reply's frame
// body. watch, if not nil, starts watching the exchange once the request
// is read and returns a channel that closes when the caller goes away
// (it reset or closed its side: it stopped waiting).
type Handler = func(from peer.ID, r *bufio.Reader, watch func() <-chan struct{}) (reply []byte)
