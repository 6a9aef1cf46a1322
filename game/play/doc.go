// Package play is one player's peer runtime in P2P mode: the game as a
// player's computer runs it on the overlay, behind the browser client
// (Peer implements webui.Session) or a bot.
//
// A Peer sits on a node.Node and starts a regions.Service (the region object
// store) and a position.Service (region position multicast) on it. Data
// flows like this:
//
//   - The fixed-step loop (the world's tick rate) takes the page's held
//     input or the bot's, moves the player's Avatar in a local game.World
//     (terrain and collision), runs hunger and respawn, and hands the new
//     position and velocity to the position service, which publishes them on
//     the region's topic. Other players come back from the position
//     service's dead-reckoned view and are smoothed with game.Smoother.
//   - Region objects (food, health packs) live in the region object store.
//     The peer loads the regions around the player (subscribe, Get, create
//     missing objects from the world seed with a version-0 read-write) into
//     the avatar world's ObjectTable. Eat and pick-up are read-writes against
//     the version read; the coordinator lets exactly one of two racing
//     players commit, and the loser sees the current value. See objects.go.
//   - Fights are direct streams between the two players (FightProtocol);
//     both compute game.FightOutcome from the two players' public cards
//     (never from stats the other side declares) and compare. See fight.go.
//   - Chat lines and player cards (name, bars) go on a chat topic per region;
//     whispers on a direct stream (WhisperProtocol). With an account, the
//     names shown and whispered to are the names on the players' login
//     tokens. See social.go.
//   - With an Account, the peer logs in on the account server with a token
//     bound to its peer ID and hands the region service a regions/guard.Guard:
//     it presents its token to region coordinators, demands everyone else's,
//     and commits as a coordinator only under the region's lease. A
//     guard.Admission does the same for the position and chat topics: it
//     shows this peer's token to those who ask and asks every author for
//     its own, and the validators drop the messages of players without a
//     valid token for their peer ID (position.WithAdmission, social.go).
//     Without an account the topics are open. It restores the saved
//     character and saves it periodically and on exit, one save at a time,
//     recognising a save whose answer was lost (account.go).
//
// Run owns every goroutine the peer starts and stops them when its context
// ends; the node is the caller's.
package play
