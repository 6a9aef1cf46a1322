// Package node builds the libp2p host every overworld process runs: player
// peers, bootstrap nodes and the simulator's peers alike.
//
// A Node owns, in start order: the identity key (loaded from, or created in,
// the data dir), the libp2p host (TCP and QUIC, Noise, yamux, resource and
// connection managers, relay client and hole punching), the Kademlia DHT
// (protocol prefix /overworld, auto, server or client mode, no provider or
// value records) and gossipsub tuned for game traffic.
//
// Data flows like this: New builds the stack and starts a joiner that dials
// the operator's bootstrap peers with backoff until one answers, then
// refreshes the DHT routing table; Joined reports when the table holds
// peers. Higher layers (regions, position multicast) take the host, the DHT
// and the pubsub router from the Node and ask it "who is closest to this
// key" through ClosestKnown (the local routing table) or ClosestPeers (a
// network lookup); both include the node itself, which the DHT's own lookup
// never returns. Close stops everything in reverse order.
//
// Behind NAT: the host runs AutoNAT, reserves a slot on the bootstrap
// nodes' relays when AutoNAT finds it private, and tries hole punching
// (DCUtR) on every relayed connection. The DHT mode is auto by default:
// server until AutoNAT says private, client from then on. A peer in client
// mode does not advertise the DHT protocol, which is how every peer tells
// who is behind NAT: CanCoordinate (used by region placement) and
// ClosestKnown count only peers that serve the DHT, the node itself
// included, because the others could be reached only through a relay.
package node
