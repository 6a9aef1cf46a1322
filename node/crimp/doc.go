// Package crimp implements CRIMP, the Clocked Reliable Interactive Multicast
// Protocol of Cronin, Filstrup and Kurc (2001, ch. 4.4): low-latency,
// reliable, unordered many-to-many multicast between the mirrors of a game.
// Mirror mode uses it to carry player commands between mirrors; the
// trailing state synchronizer above it does the ordering.
//
// # Protocol
//
// Every data packet is named by (sender ID, sequence number) and carries the
// sender's timestamp. A receiver declares a sequence number lost once N
// later packets of the same sender arrived (N-out-of-order) or a session
// packet shows the sender went past it. Recovery follows SRM with the
// paper's changes: a request (NAK) is multicast after a random wait in
// [C1·d, (C1+C2)·d] (d: one-way delay to the source), or at once with
// probability 1/n; hearing another member's request suppresses one's own.
// Any holder of the packet schedules a repair in [D1·d, (D1+D2)·d], cancelled
// if another repair is heard; the original sender repairs at once. After a
// repair, requests for that packet are ignored for E·d. A request without a
// repair within F·d restarts recovery. Packets and first recovery attempts
// live in a history of intervals moved on by each tick (the paper's tic());
// when an interval falls off the end its packets are forgotten and its
// recoveries cancelled, and nothing older than the history is delivered.
// Optionally each data packet also carries the previous k payloads (FEC), so
// a single loss needs no round trip at all. Beside the reliable stream,
// SendUnreliable multicasts a datagram once (no number, no recovery): the
// event protocol's moves, which want low latency more than reliability.
//
// Ages are measured against the sender's timestamp, so members' clocks must
// be synchronized (NTP on the mirrors' private network), as TSS requires
// anyway: perceived latency is receive time minus send time, and a packet
// older than the history is never delivered.
//
// Session packets, sent periodically, estimate the one-way delay to every
// member without synchronized clocks (timestamp echo with hold time, as in
// SRM), keep the member alive at the authority, and reveal lost tails.
//
// Membership goes through the authority (the paper's überserver): a new
// member multicasts request-join, retried with exponential backoff; the
// authority answers establishment (with the new ID and the address of its
// state-transfer server) or denial; everyone who hears the establishment
// adds the member. The authority drops a member silent for 3/4 of the
// history (DropAfter); until it is first heard, a new member may be silent
// one round trip longer (as the age of its request-join shows, at most the
// history), so that a member whose round trip exceeds DropAfter can join.
// Silence is measured by arrivals, so a path whose delay grows at once by
// more than DropAfter minus the member's gap between packets (550 ms for an
// idle member with the defaults) looks like a dead member: it is dropped
// and joins again. Silence is the authority's running time: a gap of more
// than four intervals between its own steps (a stalled process) is its
// pause, not the members' silence. FetchState and ServeState carry the
// game state over TCP.
//
// The authority multicasts each drop it decides four times, each copy a
// fresh signed decision, spread over what is left of the dropped member's
// history (History minus DropAfter: 62.5 ms apart with the defaults, at
// most a SessionInterval), so that a member misses every copy with
// probability p⁴ at independent loss p (1e-4 at 10 %); it repeats it again
// to a dropped member that keeps talking. A copy of a drop a member has
// taken already changes nothing (no second event; its drain and tombstone
// keep their time). Only the authority (the duty holder, while leased)
// repeats drops.
//
// A drop takes effect at once (EventMemberDropped; nothing the dropped
// member sends is accepted any more: a tombstone, 4 histories long, and the
// authority never hands its ID out again), but every member keeps the
// dropped member's receive state for one more history (draining), so that
// delivery does not depend on whether a sender died right after sending: a
// packet it sent before going silent, which reached some members and not
// others, still reaches every member that recovers it within its history
// (of which History minus DropAfter is left at the drop, 250 ms with the
// defaults: sooner than that, a silent member is not known dead). A draining
// member's missing packets are lost at once (no later packet of its will
// show them), requested and repaired by any holder as a live member's, its
// packets repaired are delivered as its own, and session packets carry how
// far their sender heard each member it drains, so that a member that
// missed the last packets learns of them (each member sends a session at
// once when it starts a drain). When the drain ends, what is still missing
// counts as losses given up. A member drains at most MaxGroup-1 dropped
// members (fewer for MaxGroup above 57, so that a session packet keeps
// room for them beside the echoes); one more ends the oldest drain early.
//
// # Trust
//
// Any member may be hostile, so the membership decisions (establish with
// its ID, deny, drop) are the authority's alone: it signs each with its
// ed25519 key (Config.AuthorityKey) and members accept one only with a
// valid signature (Config.AuthorityPublicKey) and a time stamp within the
// history of their clock, so that a member can neither throw another out
// nor admit members of its own, nor replay an old decision. The authority
// never hands out an ID that some sender used unadmitted. ServeState
// serves at most MaxConns joiners at once, buffers at most MaxBuffered
// snapshot bytes across them, and frees the slot of a request that does not
// arrive within RequestTimeout. Every refusal is counted by reason
// (Metrics.Refused, crimp_refused_total{reason}).
//
// The authority may also be a duty that moves (duty mode, Config.Key; see
// duty.go): each member has its own key, bound to its ID by the signed
// establishment; the holder of the duty signs its decisions with its own
// key and stamps them with the duty epoch; the duty moves by a hand-over
// the holder signs (carrying the AuthorityState: members and keys, next ID,
// recent drops) or by a takeover carrying the signed votes of a majority;
// members accept decisions only from their epoch's holder, and a holder
// decides only while a majority leases it, so that a partition side without
// the duty admits and drops nothing. Package node/duty moves the duty with
// the rotating arbiter (game/arbiter). Sender IDs on data,
// request, repair and session packets are the sender's own claim, not
// authenticated by CRIMP: a member can still send data in another's name.
//
// # Shape of the code
//
// Node is the protocol as a pure state machine (as etcd's raft): Step (a
// received datagram), Send (an application payload), Join and Tick (time
// passing) take the current time and return a Ready — packets to multicast,
// payloads to deliver, membership events, and when to tick next. Timer draws
// come from an injected *rand.Rand; Config.Deterministic removes them.
//
// Member is the thin driver that runs a Node over a Transport with a Clock.
// Two transports share the interface: UDPTransport (IP multicast through
// golang.org/x/net/ipv4) and MemNetwork's endpoints (in memory, with
// per-site and per-link delay and loss from a seed, Disconnect/Partition).
// Two clocks: WallClock and SimClock, a discrete-event clock on which whole
// runs take simulated time (package crimpbench reproduces the paper's table
// 4.1 that way).
//
// Metrics counts deliveries, perceived latency, losses, requests, repairs
// and their duplicates, as plain atomics and as a Prometheus collector.
package crimp
