// Package sim is overworld's simulator: many players in one process, each a
// full node (gossipsub, the DHT, the position protocol, the region object
// store, the fight protocol) on libp2p's in-memory network with a latency
// per link, driven by seeded bots with SimMud's workload: a random walk
// with a region change every ~40 s, an eat every ~5 s and a fight every
// ~5 s, and, optionally, SimMud's churn. It measures what the paper
// measures: per-node message rate and bandwidth, the delay of position
// updates against the link latency, in direct and aggregated mode, plus
// the workload's commits, refusals and latencies, what the region services
// did (take-overs, retries, coordinator changes by cause, bandwidth by
// role), the churn's time to a region's next coordinator, the memory and
// connections each player costs, and the machine's load; it writes a JSON
// report and SVG plots, and plots several reports against player count
// (scale.go).
//
// Data flow: Run builds the players (population.go): a host of the
// virtual network (node/vnet) per player, which adds each link's one-way
// latency, pipelined, and links peers on first contact; a node, a position.Service
// and, for the workload, churn or DHT placement, a regions.Service and an
// actor that eats and fights (workload.go): eats are read-writes of the
// region's food objects through the region coordinator, as game/play does;
// fights use game/play's fight protocol pieces (play.NewAttack, SendAttack,
// ...). One driver moves every online bot each step; with churn a loop
// ends sessions and puts a new player in each leaver's place (churn.go).
// Gossipsub tracers count RPCs and bytes per node (by kind, bandwidth.go)
// and tell the path each direct update took (paths.go); delivery hooks
// record delays; the region services' role changes feed a log of coordinator
// changes (roles.go). After the warm-up a window of Duration is measured:
// every player's counters are read when it opens (or at a later join) and
// when it closes (or at the player's leave), and summarised into a Report
// (window.go, report.go).
//
// Placement: by default players are given the directory of the players
// online (as the operator's bootstrap service could hand it out) and
// compute each region's coordinator with placement over it; bots connect
// to a region's coordinator and replica before they use it, and no DHT
// lookup runs. With Config.DHTPlacement every player serves the DHT and
// bots find regions with regions.Service.Locate, as game/play does, and
// positions follow the region service. Either way players meet the others
// of their interest area through the coordinators' rendezvous
// (position.Join).
//
// Run works the same inside a testing/synctest bubble, where all time is
// virtual (see TestVirtualTime).
package sim
