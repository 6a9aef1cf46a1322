// Package sim is overworld's simulator: many players in one process, each a
// full node (gossipsub, the position protocol, the region object store, the
// fight protocol; the DHT in client mode) on libp2p's in-memory network with
// a latency per link, driven by seeded bots with SimMud's workload: a random
// walk with a region change every ~40 s, an eat every ~5 s and a fight every
// ~5 s. It measures what the paper measures: per-node message rate and
// bandwidth, the delay of position updates against the link latency, in
// direct and aggregated mode, plus the workload's commits, refusals,
// latencies, coordinator load and extra bandwidth, and the machine's load;
// it writes a JSON report and SVG plots.
//
// Data flow: Run builds the network (mocknet links without latency; a
// latencyHost per player adds each link's one-way latency, pipelined),
// starts one position.Service and one regions.Service per player, one bot
// driver that moves every player every step, and one actor per player that
// eats and fights (workload.go): eats are read-writes of the region's food
// objects through the region coordinator, as game/play does; fights use
// game/play's fight protocol pieces (play.NewAttack, SendAttack, ...).
// Gossipsub tracers count RPCs and bytes per node; delivery hooks record
// delays; after the warm-up a window of Duration is measured and summarised
// into a Report.
//
// Discovery: players are given the directory of player IDs (as the
// operator's bootstrap service could hand it out) and compute each region's
// coordinator with regions.Placement over it; they meet the other players of
// their interest area through the coordinators' rendezvous (position.Join),
// and connect only to those and, before using a region's objects, to its
// coordinator and replica. No DHT lookups run during a simulation.
//
// Run works the same inside a testing/synctest bubble, where all time is
// virtual (see TestVirtualTime).
package sim
