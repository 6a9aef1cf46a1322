// Package master is overworld's master server: the registry of running
// mirror-mode games and their mirrors (paper 000 §4.5.1), and the game
// side of its protocol. `overworld master` runs the server; a game's
// authority runs a Registrar; `overworld find` (package finder) queries
// the server and probes the mirrors (package probe).
//
// # Data flow
//
//	authority ──POST /v1/games (operator token)──▶ master ──▶ store (SQLite | PostgreSQL)
//	authority ◀──GET status_url?since=v, every interval── master   (keep-alive poll)
//	authority ──POST /v1/games every ¾ interval──▶ master          (keep-alive push, behind NAT)
//	finder ──GET /v1/games?world=&mode=&has_space=──▶ master
//	finder ──UDP probes──▶ each mirror's probe.Responder
//
// A game's authority registers its game: ID, world, mode, players,
// capacity, and for each mirror its CRIMP ID, the UDP address of its probe
// responder and the address players connect to. It names a status URL the
// master can poll, or none if the master cannot reach it. Every interval
// (default 5 s) the master polls each pollable game with the version it
// holds; the game answers its version, and its info only if that differs,
// so a mirror added or a player joining shows at the next poll. A game the
// master cannot poll instead registers again every ¾ interval and at once
// on a change. A game that neither answered a poll nor registered during
// MaxMissed (default 3) intervals in a row is dropped.
//
// The registry lives in the store, so a restarted master keeps its games
// and goes on polling them (misses counted before the restart are
// forgiven): its games are back at once. If the master lost its store,
// each Registrar notices and registers again: a pushing game with its next
// push (within ¾ interval), a polled one when no poll came for 2
// intervals.
//
// # Running it
//
//	store, err := master.OpenStore(ctx, dbURL, dataDir) // "" = SQLite in dataDir; "postgres://…"
//	m, err := master.New(master.Config{OperatorTokens: []string{tok}}, store)
//	err = m.Serve(ctx, listener)                        // API + keep-alive rounds; drains on ctx end
//
// And in a game's authority:
//
//	reg, err := master.NewRegistrar(master.RegistrarConfig{Master: url, Token: tok, Game: info,
//		StatusURL: "http://10.0.0.5:8651/v1/status", StatusListener: ln})
//	go reg.Run(ctx)
//	reg.Update(func(g *master.GameInfo) { g.Players = n; g.Mirrors = mirrors })
//
// # API (JSON; errors are {"error":{"code","message"}} with a 4xx/5xx)
//
//	POST   /v1/games            operator bearer, Registration → 201/200 RegisterResponse
//	DELETE /v1/games/{id}       operator bearer, ?instance=   → 204
//	GET    /v1/games            ?world= (or map=) &mode= &has_space= &min_free= &limit= &after= → GameList
//	GET    /v1/games/{id}       → Game
//	GET    /healthz, /readyz, /metrics
//
// and on the game: GET status_url?since=v, bearer status key → StatusAnswer.
//
// # Trust and abuse limits
//
// Only operator tokens register; each token is one operator, and a game
// belongs to the operator that registered it first: another token can
// neither replace nor remove it (403). A deregistration from an older run
// of the registrar (the authority moved) leaves a newer registration in
// place (409). Every body and poll answer is bounded (64 KiB, 413),
// decoded strictly and validated before anything is stored (400); queries
// and writes are limited per source address (429) in bounded tables;
// refusals are counted by reason in overworld_master_refusals_total. Polls
// follow no redirects, use no proxy and carry the game's status key, and
// an answer is taken only for the game polled, at the status URL still
// registered.
package master
