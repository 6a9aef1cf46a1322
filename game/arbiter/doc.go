// Package arbiter implements the rotating arbiter of Mazzacano (2003,
// "A Reliable Multicast Protocol for a Distributed System", the project's
// paper 003): a group of peers on one multicast
// channel with no fixed server, in which one member at a time is the
// arbiter ("server") that admits players, orders contested events and
// grants first-come resources, and the duty moves from member to member by
// ranges of a logical clock. LAN mode runs it among the players; in mirror
// mode it can carry the CRIMP authority's duties (admit mirrors, assign
// IDs, declare drops, serve state transfer, grant resources) as duty state.
//
// # The protocol (paper §3.3-3.7, and what we chose where it is silent)
//
// Logical clock (§3.3). Every message carries a Stamp: the membership
// epoch, the lap and ts. Only the arbiter advances ts, by one per event it
// decides (a grant, an admission, a departure); the others adopt a higher
// ts from the arbiter's messages. With N members ts runs 0 .. 10N-1; where
// the paper resets it to 0 ("if ts == N·10-1 → 0; else if ts > N·10-1 →
// ts = inc", not a modulo), we count laps, so a message of an old lap is
// never mistaken for a new one. An epoch is named by the number of
// membership changes and the member that made the last one (e3.1: the
// third view, made by member 1), so that two sides of a partition never
// give one name to two histories.
//
// Duty by ranges (§3.4). The member at place p of the view (join order)
// serves ts 10p .. 10p+9 (MAX_SERVER_TRANS = 10). The arbiter for a stamp
// is therefore a function of the stamp: a message that claims the
// arbiter's role (GRANT, DENY, ADMIT, PING, HANDOFF, view changes) is
// accepted only from the member at place ts/10 — the paper's serverID,
// checked — and a receiver ignores duty messages stamped in a term (lap,
// place) older than its own, in an older epoch, or beyond the next lap.
//
// SYNC hand-off (§3.4). When the arbiter's event reaches ts 10p+9 it hands
// the duty to the next active member: HANDOFF (the paper's SYNC) names the
// successor and its first stamp, 10·place (next lap if it wraps), so the
// clock leaps 10 for every skipped member ("two inactive ... increment by
// 20"); the successor answers ACK (RESPONSE) and PINGs. The HANDOFF also
// carries the newest grant's number and an opaque duty state
// (SetDutyState), which the successor gets in EventDutyBegin. A HANDOFF is
// repeated every HandoffRetry; without ACK after HandoffTimeout the
// successor is skipped like a frozen member. Claims the arbiter received
// but could not decide before its range ran out go with the HANDOFF, and
// the successor decides them first (first come across terms). Members that
// missed HANDOFF and ACK follow the new term when their old arbiter answers
// the new one's PING.
//
// PING check (§3.4). The arbiter PINGs when its term starts, as in the
// paper, and then every Heartbeat; members answer PONG. A member whose PONG
// was not heard within ActiveWindow is inactive and skipped at hand-off,
// so a frozen player never serves; so is one whose grant log lags far
// behind (back from a freeze, still catching up).
//
// Membership (§3.5, §3.7). A joiner multicasts JOIN until answered. Only
// the arbiter answers: GAME_FULL (Full), or OK_TO_JOIN (Admit) with the
// requested team if it has room, else the emptiest team with room (forced),
// the new member appended to the view (so no range moves) and the new
// epoch. The paper has every member send its own OK_TO_JOIN to the
// newcomer; the Admit carries the whole view instead. A JOIN for an ID
// another member holds is refused (ID_TAKEN) and counted. The paper's
// start (§3.5): two joiners and no game — the one that has waited longer,
// and heard no game for StartQuiet, creates the game and admits the other;
// Create starts a game directly. LEAVE asks the arbiter to remove the
// sender; the arbiter itself first hands the duty on (§3.4: "the next
// person in the list automatically becomes the server"), then leaves like
// anyone. Removals shift the places after the leaver, and the arbiter's
// clock with its range. The arbiter drops members silent for DropAfter.
//
// Chat (§3.2, keys T and R): to the sender's team or to all; a line
// stamped in a term or epoch older than the receiver's is stale and
// dropped (§3.3's example drops a chat at ts 2 in a group at 4; every
// grant moves ts, so we judge staleness by term, not by ts).
//
// Grants (§3.4, §3.6). CLAIM asks for a contested resource; the arbiter
// GRANTs it to the first claim it receives and DENYs it to later ones. A
// claim stamped two terms back or in an older epoch is discarded (§3.3:
// late pick-ups are refused); one stamped in the term that just handed
// over is still decided. Claims are repeated every ClaimRetry and at once
// when the duty moves. Each grant is the seq-th of the game; every member
// keeps the last LogWindow grants from the multicast GRANTs, and PING and
// PONG carry the ones others lack (with explicit ranges, so a number
// nobody holds is known not to exist; members carry turning slices so a
// far-behind arbiter catches up fast), plus a digest of the arbiter's log
// that makes a member whose log differs take the arbiter's. A new arbiter
// grants nothing until it holds every grant its predecessors made (it
// waits while repairs make progress; SyncTimeout without progress gives
// them up and opens a new lap). When two grants of one resource meet, the
// one with the later stamp stands; EventGrant reports the grant that
// stands whenever it changes.
//
// # What the paper leaves open: failures and partitions
//
// Leases. The arbiter may decide (grant, admit, drop) only while a
// majority of the view answered one of its PINGs within LeaseTimeout. A
// member answers only the arbiter of its own term and moves to another
// term only when its arbiter handed over or has been silent for
// TakeoverTimeout > LeaseTimeout, so two leases never overlap, and a
// partition side without a majority grants nothing.
//
// Takeover (arbiter crash mid-range, lost hand-off). After TakeoverTimeout
// of silence the next member in place order (the k-th waits
// (k-1)·TakeoverStagger more) opens a term of its own in the next lap and
// PINGs; once a majority answered it starts a new epoch (same members), so
// whoever followed the silent arbiter comes back through CATCH_UP and
// takes this side's grant log. An arbiter without a lease for
// TakeoverTimeout abdicates. A member that sees an arbiter serving a newer
// epoch than its own is behind: it follows nobody of its old epoch, answers
// no PING, takes nothing over and decides nothing until it caught up, so
// that no majority forms on an epoch the group has left. It asks with VIEW?
// and installs the CATCH_UP view an arbiter answers (with the arbiter's
// grant log in place of its own): from a leased arbiter, or from any
// arbiter of a newer epoch once its own promise has expired; a member
// whose arbiter is gone also returns to an older epoch's leased arbiter
// (its side of a partition died out). A process that notices it was
// suspended (a gap of SuspendAfter between calls) distrusts its view of
// the duty in the same way and does not take over at once.
//
// Limits. A grant made by a minority arbiter in its last lease and heard
// by nobody on the majority side cannot be known there; the majority may
// grant the item again in its new lap and epoch (never in the same one),
// and when the partition heals the majority's grant stands everywhere.
// The same holds for grants a new arbiter gives up after SyncTimeout
// because nobody it can reach holds them. Preventing both would need a
// majority to acknowledge each grant before it is sent (one more round
// trip per grant). A member whose superseded grant left every log before
// it came back (older than LogWindow grants) is never told it was
// superseded. Placement checks who may speak for a stamp, not whether the
// stamp is current: a member can claim its own range early, which members
// refuse while their arbiter is alive (out_of_turn), and a joiner, a
// member catching up and a new arbiter merging PONG carries trust what
// they are told; signed hand-offs would close that.
//
// # Shape of the code
//
// Node is the protocol as a pure state machine, in the shape of
// node/crimp: Step (a received message, with the sender the transport
// vouches for), Tick (time passing) and the application's calls (Create,
// Join, Claim, Chat, Leave, Expel, SetDutyState) take the current time and
// return a Ready — messages to multicast, events, and when to tick next.
// No goroutine, socket or clock inside; a driver runs it over CRIMP
// (payloads are bytes) or UDP multicast and acts on EventDutyBegin /
// EventDutyEnd to take up or drop the duties it hangs on the arbiter.
// Wire messages are protobuf (arbiterpb), decoded and bounded by Decode
// before anything reaches the protocol; every refusal is counted by reason
// in Metrics (plain atomics and a Prometheus collector).
//
// The tests run the protocol on an in-memory multicast network with
// per-direction delay, jitter, loss and cuts on a simulated clock: golden
// scenarios in testdata/ in the style of etcd's rafttest (-update rewrites
// them), a property test over many seeds with partitions, one-way cuts and
// frozen players, and fuzzers for Decode and Step.
package arbiter
