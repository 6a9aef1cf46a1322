// Package mirror is mirror mode: the mirrored game servers of Cronin et al.
// (2001, ch. 2, 3.3.3, 3.5) on a private network, kept consistent by
// trailing state synchronization (game/tss) over CRIMP (node/crimp).
//
// # Data flow
//
// A client (the browser page through `overworld play -mirror`, or a bot)
// opens a WebSocket to its ingress mirror. The mirror sends a Challenge;
// the client's Hello carries its account token and proves, by signing the
// challenge with its libp2p key, that it holds the peer ID the token was
// issued to (token.Verify, offline, with the account server's public key).
// The session's player is the token's account. The mirror loads the
// character from the account server with the player's token and joins the
// player with a game.CommandJoin carrying it.
//
// Ingress: the client sends one InputFrame per tick (its newest input and
// the three before, as Quake's client did). The mirror takes only inputs
// newer than the last it took, for the session's player only, at most one
// per tick (a second in the same tick is held and goes out at the next;
// the last one wins), stamps each with its own clock, never the client's,
// numbers it, multicasts it over CRIMP and files it in its own
// synchronizer like every other command.
//
// Every mirror files the commands CRIMP delivers in its synchronizer,
// whose states are State: the world plus the ingress table. State.Advance
// applies the trust rule of mirror commands (DESIGN.md: accepted only from
// the ingress mirror of the player's session) deterministically, so every
// mirror takes and refuses the same commands.
//
// Egress: every frame each mirror sends each of its clients an Update from
// the leading state with the leading and the last state's ticks: the
// player, and what vector-field consistency (game/vfc/vfcworld, one view
// per client, its pivot the client's avatar) says the client needs this
// frame of the others and of the objects; the client keeps the rest and
// dead-reckons players between their updates (egress.go, vfcclient.go).
// Config.Egress can instead send the whole Interest area every frame. Strictly consistent events go out tentatively
// from the leading state and are confirmed or retracted when the last
// state has settled their tick.
//
// Consistency: every second of the last state's ticks each mirror
// multicasts the last state's hash; a mirror compares what it hears with
// its own. A mismatch is counted, the mirror's state of that tick is
// dumped to the data dir (each side dumps its own), and a mirror whose
// hash differs from the authority's fetches the authority's state
// (tss.Synchronizer.Reset) — the authority's state is the reference, as
// the paper's überserver's is.
//
// Membership: the authority (CRIMP member 1) starts the game: the world at
// tick 0 and the synchronizer's epoch. Every other mirror joins through it
// (CRIMP's request-join and establishment) and fetches a state transfer
// over TCP: the authority's last state, the synchronizer's timing and the
// commands that state has not executed; commands CRIMP delivers meanwhile
// are buffered, and CRIMP recovers what the group sent before the join. A
// mirror silent for 3/4 of CRIMP's history is dropped by the authority,
// which after ReleaseAfter releases (takes out of the world) the players
// still on it; players who reconnect to another mirror before that keep
// their character as the world has it (the new mirror's join moves them).
// Rotate mode (Config.Rotate): the authority is not fixed on member 1 but
// a duty that moves with the rotating arbiter (node/duty over CRIMP's duty
// mode): whoever holds it admits, drops, releases and serves the reference
// hashes, signing with its own key, which CRIMP bound to its ID; every
// mirror serves state transfers (a joiner fetches from the holder that
// admitted it, a resync from the holder whose checkpoints name its
// address), and when the holder dies a majority takes the duty over. The
// state then accepts releases from any mirror (AnyAuthority): each mirror
// checks at ingress that the holder signed them, keeping one that arrives
// before the move of the duty it follows for up to a history.
// Every mirror also signs its own commands and moves with its key, and
// the others take them only with a valid signature by the sender: CRIMP
// does not authenticate a packet's sender, and in LAN mode every player
// is a mirror, so without it any player could send inputs (or a leave)
// for another's avatar. One that comes before this mirror knows the
// sender's key waits for it, for up to a history.
// Characters are saved from the last trailing state only: every SaveEvery
// and when a player leaves (read at the tick before the leave, so the save
// holds everything up to it). A leave's save also waits for the authority
// to confirm that state: an input this mirror executed may have reached
// the others after their last delay, and then never happened in the game
// they play. Every state remembers its recent departures with the
// character at the tick before the leave, hashed with the rest, and the
// leaving player's mirror saves the departure from the first checkpoint
// at or after the leave on which its hash and the authority's agree (after
// a resync if they differ; the authority itself saves at once). Without
// agreement within half the time departures are remembered, or when the
// mirror leaves the group, it saves its own reading
// (mirror_leave_saves_total counts each kind).
//
// Protocols (Config.Protocol): the above is the command protocol (the
// paper's §3.3.3). Under the event protocol (§3.3.4, event.go) the ingress
// sends moves unreliably (CRIMP datagrams repeating the player's last
// moves) and actions reliably; every state but the last guesses actions at
// once, the authority decides them and multicasts its decisions and its
// last state's consistent events, signed, and the last state runs actions
// only as decided. The hash exchange and its repair serve both.
//
// Clocks: the skew to every other mirror is measured from CRIMP's session
// packets (an NTP exchange out of the session echoes) and exported; a
// command stamped beyond now + MaxSkew is refused, and /readyz fails while
// another mirror's clock is certainly off by more than MaxSkew.
//
// # Shape of the code
//
// Server is the driver: one lock serializes CRIMP callbacks, client frames
// and the tick timer; sends and network waits happen outside it. Its time
// comes from a crimp.Clock, so a whole group runs on a crimp.SimClock over
// a crimp.MemNetwork, with in-process clients (LocalClient) speaking the
// same frames as the WebSocket ones (Client). ClientCore is the client's
// protocol as a state machine, shared by both. Wire formats are protobuf
// (mirrorpb); every decoder bounds sizes and validates fields.
package mirror
