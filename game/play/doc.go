// Package play is one player's peer runtime in P2P mode: the game as a
// player's computer runs it on the overlay, behind a client (the browser
// page, through game/webui.PeerSession, which depends on this package and
// not the other way round) or a bot.
//
// A Peer sits on a node.Node and starts the region services on it
// (StartRegionServices: a regions.Service, the region object store, and a
// position.Service, region position multicast). The Peer itself is a thin
// composition of parts, each owning its state and its goroutines, started
// in order and stopped in the reverse order (parts.go). Data flows like
// this:
//
//   - The game loop (loop.go) steps the player's Avatar at the world's tick
//     rate with the client's held input or the bot's: terrain and
//     collision in a local game.World, hunger, death and respawn by the
//     game's rules. It hands the new position and velocity to the position
//     service, which publishes them on the region's topic; other players
//     come back from the position service's dead-reckoned view and are
//     smoothed with game.Smoother. The tick's eat, pick-up and fight go to
//     the parts below.
//   - The object cache (objects.go) loads the region objects (food, health
//     packs) around the player from the region object store (subscribe,
//     Get, create missing objects from the world seed with a version-0
//     read-write) into the avatar world's ObjectTable. Eat and pick-up are
//     two-step writes under the object's lock at the region's coordinator.
//   - Fights (fight.go, duel.go) are direct streams between the two
//     players (FightProtocol); both compute game.FightOutcome from the two
//     players' public cards (never from stats the other side declares) and
//     compare. The defender's decision is a pure function (decideDefence).
//   - Social (social.go): chat lines and player cards (name, bars) go on a
//     chat topic per region (regions/topic); whispers on a direct stream
//     (WhisperProtocol). With an account, the names shown and whispered to
//     are the names on the players' login tokens.
//   - With an Account, the peer logs in on the account server with a token
//     bound to its peer ID and hands the region service a regions/guard.Guard:
//     it presents its token to region coordinators, demands everyone else's,
//     and commits as a coordinator only under the region's lease. A
//     guard.Admission does the same for the position and chat topics: it
//     shows this peer's token to those who ask and asks every author for
//     its own, and the validators drop the messages of players without a
//     valid token for their peer ID (position.WithAdmission, social.go).
//     Without an account the topics are open. Saves (account.go) restore
//     the saved character and save it periodically and on exit, one save at
//     a time, recognising a save whose answer was lost.
//   - Clients read the player's View (view.go) and send game.Input.
//
// Run owns every goroutine the peer starts and stops them when its context
// ends; the node is the caller's.
package play
