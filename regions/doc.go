// Package regions spreads the world's regions over the overlay (SimMud on
// libp2p): each region's key hashes onto the DHT keyspace; the live peer
// closest to it coordinates the region and the next closest holds its
// replica.
//
// # Placement
//
// Key names a region in the DHT keyspace; a peer's place is the SHA-256 of
// its ID, as in kad-dht. Every peer computes placement from its own view:
// itself plus the peers of its routing table and its connections that speak
// the region protocol (learned through identify, so a bootstrap node is left
// out), minus the peers it found unreachable. Views agree once the routing
// tables settle; Locate refreshes a view with a DHT lookup. A peer asked
// about a region it does not hold redirects to the closest peer it knows.
//
// # Data flow
//
// The game calls the Client (Get, Initialize, ReadWrite, Lock, Release,
// ReleaseWith).
// The client sends the request, with a fresh request ID, to the
// coordinator in its view over a stream of ProtocolID (one protobuf frame
// each way, see regionpb), follows redirects, and when a peer cannot be
// reached tries the next one, naming the failed peer as a suspect; it
// keeps the request ID across all attempts.
//
// At the coordinator each region is a machine (machine.go): a deterministic
// state machine with one FIFO queue. It evaluates queued requests in order
// (initialize: blind write; read-write: only if the read version is
// current, else rejected with the current value and version; lock and
// release: paper 004's locks, locks.go — the lock's answer carries the
// value, the release may carry the new one, a request on an object another
// player locked waits in a bounded FIFO, dropped if the player goes away
// or its request times out, and locks run out by a committed expiry
// unless renewed), applies the
// changes, and sends them to the replica. Only when the replica has
// acknowledged them are the players answered and the changes published on
// the region's event topic (EventTopic), from which members (Subscribe)
// keep a cache of the region. Committed request IDs are remembered and
// replicated, so a retried request is applied once; its object is
// recorded again unchanged (one entry, replicated and published), since a
// write retried after a failure may never have reached the caches. The
// machines step on
// one loop per Service (loop.go): inbound requests, replications,
// hand-offs and retirements hand it their steps, the replicas'
// acknowledgements and the answers to an acquisition's asks are fed to
// it, it arms the acquisitions' deadlines and wakes each region's
// maintenance; exchanges with peers run on goroutines that only talk. The
// regions' slots are the loop's alone; what is asked of them off the loop
// (Role) reads the view the loop publishes after each step (view.go). A
// CommitGate (the lease service) is consulted before each batch and its
// lease ID recorded with every commit; an Authorizer checks every remote
// peer's token.
//
// # Failures and joins
//
// Epochs order coordinators: each new coordinator of a region starts a
// higher epoch, and a replica refuses an older one, which stops a deposed
// coordinator from committing.
//
//   - Fail-over: failures are noticed by traffic (a failed request or
//     replication, a closed connection) and confirmed with a probe; what
//     this peer believes about who lives is a table the loop owns
//     (liveness.go), fed those signs and probe results. The
//     replica, or whichever peer now believes itself closest, acquires the
//     region: it asks the next closest peers what they hold and takes over
//     from the freshest copy (its own, or by a state transfer), in a new
//     epoch, then picks a new replica and sends it a snapshot. Whom it
//     asks and what it takes are decided by another deterministic state
//     machine (acquisition.go), which the Service drives (acquire.go),
//     arming the timer of the deadline it returns.
//   - Maintenance: once per period, and when a nudge or a death wakes
//     it, each region's role is checked against the live placement by a
//     pure decision (maintenance.go: nudge a closer peer, acquire, change
//     the replica, step down, check the replica's copy, the next check's
//     time); maintain.go gathers its facts and carries it out. A replaced
//     replica keeps its copy until the new one has acknowledged its
//     snapshot, so that a coordinator's crash meanwhile loses nothing.
//   - Hand-off: a coordinator that sees a closer live peer nudges it; that
//     peer asks for the state. The coordinator finishes its batch in flight
//     (unless the replica answers it without acknowledging it, as when it
//     finds this coordinator not placed: the batch's writes are then
//     redirected to the closer peer, whose snapshot holds them, rather
//     than the region waiting while every replica is tried),
//     hands over a snapshot in a new epoch and becomes the replica; the old
//     replica retires once the new coordinator shows it installed the
//     region (it replicates to the old coordinator, retires it, or
//     answers its check as coordinator), so a lost reply does not leave
//     one copy. While the transfer runs the new peer forwards requests to
//     the old coordinator.
//   - A new lease: with a lease service that signs, a coordinator that
//     gains a lease it did not commit its copy under (after a take-over, a
//     hand-off or a lapse, or a second coordinator left over from a false
//     suspicion) compares its copy with the next closest peers' as acquire
//     does, and takes a fresher one over, before it commits or replicates
//     under the lease (machine.verifiedLease, acquire.go compareCopies). A
//     coordinator without the lease hands the region to a peer asking
//     with the current lease's grant, closer or not.
//   - Double failure: when nobody holds the region, the new coordinator
//     rebuilds it from the members' caches (the highest version of each
//     object) and logs that updates newer than any cache may be lost. A new
//     region is born the same way, empty.
//
// Partitions are beyond this package: two sides that each think the other
// dead can both coordinate unless the CommitGate refuses one of them. A
// gate that also implements Eligibility (regions/guard's lease gate) can
// say this peer cannot coordinate a region for now: the peer then ranks
// itself last in the region's placement, tells peers that ask (InfoReply)
// that it steps aside, hands the region to the peer it nudges and answers
// no nudge itself, so a coordinator that lost its lease does not block its
// region. A batch whose lease ended before the replica acknowledged it is
// not confirmed (answered RETRY, not published).
//
// # Transport
//
// The Service reaches the network only through a Transport (transport.go):
// one exchange with a peer (a request frame and its one reply), inbound
// exchanges with a watch for callers that went away, connection
// notifications, the candidate peers (routing table and connections), the
// DHT lookup behind Locate, and the region event topics. New runs over
// libp2p (transport_libp2p.go: a stream of ProtocolID per exchange, the
// DHT, gossipsub); NewWithTransport takes any, such as regions/memnet's
// in-memory network, on which testdata/scenarios script fail-over,
// hand-off, double failure, false suspicion, partitions and crashes that
// linger in the other peers' views message by message (scenario_test.go).
//
// # Trust
//
// Every peer may be hostile (trust.go). A message that claims a role --
// replication, a deposal, a copy offered while a region is taken over, a
// hand-off, an event -- is taken only from a peer placed among the region's
// closest in this peer's view and, with a lease service whose grants are
// signed (Config.Proofs, regions/guard), one that shows a grant of the
// region's lease naming it, not older than the newest known. Lease IDs
// order coordinators before epochs: a newer lease deposes, an older one is
// refused. Coordinators sign each entry they publish with their libp2p key
// and members keep it with its grant, so a rebuild takes only real entries;
// they sign each assignment of their copy to a replica (or to the peer they
// hand the region to), which the copy carries: a copy whose grant names
// another peer is believed only with that peer's assignment to its holder,
// and of copies under one lease the holder's own, then the latest
// assigned, then the longest is the freshest (fresher.go); they
// seal what the replica holds after each message (a signed hash of the
// state at its seq), and a copy the grant's holder assigned is taken over
// only if it hashes to that seal (trust.go checkSeal); a
// forwarded request needs the player's signature. Refusals are counted
// in overworld_region_refused_total{reason} and logged, rate-limited, at
// Info when an honest peer can cause them in a changing network and at
// Warn when only a forger can (trust.go refusalLevel). Without a lease service,
// placement is the only check (see the README's security section).
package regions
