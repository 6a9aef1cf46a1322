// Package sim is overworld's simulator: many players in one process, each a
// full node (DHT, gossipsub, the position protocol) on libp2p's in-memory
// network with a latency per link, driven by seeded random-walk bots in the
// manner of SimMud's workload. It measures what the paper measures: per-node
// message rate and bandwidth, and the delay of position updates against the
// link latency, in direct and aggregated mode, and writes a JSON report and
// SVG plots.
//
// Data flow: Run builds the network (mocknet links without latency; a
// latencyHost per player adds each link's one-way latency, pipelined), starts
// one position.Service per player and one bot driver that moves every player
// every step; gossipsub tracers count RPCs and bytes per node; delivery hooks
// record delays; after the warm-up a window of Duration is measured and
// summarised into a Report.
//
// Discovery: players are given the directory of player IDs (as the
// operator's bootstrap service could hand it out) and compute each region's
// coordinator with regions.Placement over it; they meet the other players of
// their interest area through the coordinators' rendezvous (position.Join),
// and connect only to those. No DHT lookups run during a simulation.
//
// Run works the same inside a testing/synctest bubble, where all time is
// virtual (see TestVirtualTime).
package sim
