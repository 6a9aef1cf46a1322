// Package position multicasts player positions inside regions of the world,
// SimMud style, over gossipsub.
//
// Every region has a topic, regions.TopicPrefix(world, c)+"/pos". A player
// publishes an Update (fixed-point position, velocity, region, sequence
// number) on its own region's topic every Interval, and subscribes to every
// region within Radius of its own, so it sees its neighbours across region
// borders. Near a border it subscribes ahead to the regions it is about to
// see, and keeps left regions for a short linger, so a crossing leaves no
// gap.
//
// In aggregated mode (SimMud's message aggregation) players send their
// updates over the direct stream protocol /overworld/position/1.0.0 to the
// region's coordinator (regions.Placement over the peers that run this
// protocol, or, with WithCoordinators, the region service's coordinator),
// which publishes one Batch per interval. A player hears its own update
// back in the coordinator's batch; when the coordinator leaves
// Config.FallbackAfter updates unanswered (or none is known, or its stream
// breaks) the player publishes on the topic itself as well, until an
// update comes back again, so a failed coordinator costs receivers at most
// FallbackAfter updates of each player (failover.go). With
// WithCoordinators the coordinators are taken from the region service
// every interval, so the uplink and the batches accepted follow its
// fail-overs and hand-overs. A receiver takes a batch whole only from the
// peer it names coordinator; from another, only the author's own entry
// (signed by it like a direct update), which keeps a new coordinator's
// player heard while receivers still name the old one. A Service that
// never Moves (a headless peer) does the coordinator's part alone.
//
// Data flow on a receiver: gossipsub -> topic validator (size, decode,
// author = named player or coordinator, region = topic, admission, the
// author's rate on the topic (AuthorLimiter), Tracker: sequence newer,
// timestamp within [arrival-MaxDelay, arrival+MaxClockSkew] of the
// receiver's own clock, move within the speed limit) -> delivery into the
// View, which dead-reckons between updates. Rejected updates are counted
// and penalise the sender through gossipsub's peer scoring (see
// ScoreOptions); ignored ones (duplicates, stale, over the rate) are
// counted and dropped unforwarded. Every per-peer table (tracker,
// limiter, rendezvous registrations) is bounded and evicts.
//
// With Config.Summaries (a setting of the world, aggregated mode) a
// player takes full-rate updates only of its own region and, near a
// border, of the region across it; of the other regions within Radius it
// takes their coordinators' summaries, which vector-field consistency
// (game/vfc) thins by each player's distance from the region's border, on
// a topic of their own (summary.go).
//
// The coordinator stream also serves rendezvous: a player sends Join for each
// region it subscribes to, saying whether it is in the region, and gets
// back the peers to connect to so that gossipsub can build the topic's
// mesh: a player in the region gets everyone following it, a player
// following it from around only the players in it. A player's connections
// thus stay within its own neighbourhood, however large the world.
//
// Tracker and the interest functions are pure (no clock, no network); the
// Service wires them to a node.
package position
