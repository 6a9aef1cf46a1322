// Package regions spreads the world's regions over the overlay (SimMud on
// libp2p): each region's key hashes onto the DHT keyspace; the live peer
// closest to it coordinates the region and the next closest holds its
// replica.
package regions
