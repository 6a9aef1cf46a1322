// Package vnet is a virtual network for many real libp2p peers in one
// process: hosts of libp2p's in-memory network (mocknet) whose streams
// carry each link's one-way latency, pipelined, and cost a goroutine only
// while bytes are in flight. Links form on first contact; a test or the
// simulator can cut links (partitions) and heal them, crash a host (its
// links and streams gone at once, no Close) and restart it with the same
// identity.
//
// Every wait in the package is a timer or a channel, so a Network runs the
// same inside a testing/synctest bubble, where its latencies pass on the
// bubble's virtual clock. The simulator (game/sim) runs on it, and so do
// the multi-peer tests through vnettest.
package vnet
