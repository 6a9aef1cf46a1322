// Package accounts is overworld's account server: accounts, logins,
// persistent characters and coordinator leases, over an HTTP/JSON API, plus
// the Go client for it. Paper 002 keeps accounts and player state on a
// central server and uses that server to refuse two coordinators for one
// region during a partition; this is that server. `overworld accounts` runs
// it; `overworld demo` embeds it.
//
// # Running it
//
//	store, err := accounts.OpenStore(ctx, dbURL, dataDir) // "" = SQLite in dataDir; "postgres://…" = PostgreSQL
//	key, err := accounts.LoadOrCreateKey(dataDir)         // ed25519, 0600, survives restarts
//	srv, err := accounts.New(accounts.Config{Key: key, AdminToken: tok}, store)
//	err = srv.Serve(ctx, listener)                         // returns after a graceful drain when ctx ends
//
// srv.Handler() serves the same API for embedding in another server or a
// test. Both stores share one set of SQL migrations (migrations/*.sql,
// embedded), applied at start.
//
// # API (all JSON; errors are {"error":{"code","message"}} with a 4xx/5xx)
//
//	GET  /v1/pubkey                          the token-signing public key
//	POST /v1/register        {name,password}            → 201 {account_id,name}
//	POST /v1/login           {name,password,peer_id}    → Tokens
//	POST /v1/refresh         {refresh_token}            → Tokens (refresh tokens work once)
//	POST /v1/logout          bearer, or {refresh_token} → 204
//	POST /v1/tokens/verify   {token,peer_id}            → who; also sees logouts and disabling
//	GET  /v1/character       bearer                     → Character (version 0: never saved)
//	PUT  /v1/character       bearer {character,base_version} → {version} (base_version: the stored one, 0 = none)
//	POST /v1/password        bearer {old_password,new_password} → 204, other sessions end
//	POST /v1/leases/{region}/acquire|renew|release      bearer, {lease_id} for renew/release
//	POST /v1/admin/accounts/{name}/disable|enable       admin bearer
//	GET  /v1/admin/sessions?account=NAME&limit=N        admin bearer
//	GET  /v1/admin/leases                               admin bearer
//	GET  /healthz, /readyz, /metrics
//
// # Tokens and peers
//
// Login names a libp2p peer ID. The access token (package
// bootstrap/accounts/token) is signed with the server's ed25519 key and
// names the account, the player, the session and that peer ID, with an
// expiry (default 15 minutes). Peers fetch the public key once
// (Client.PublicKey) and check tokens offline with token.Verify against the
// peer ID of the connection the token came on, so a token taken by another
// peer is useless. Offline checks cannot see logouts or disabled accounts
// before the token expires; the server's own endpoints, and
// POST /v1/tokens/verify, can.
//
// A player peer uses Client:
//
//	c, _ := accounts.NewClient("https://accounts.example.org")
//	c.Login(ctx, name, password, host.ID())
//	ch, _ := c.LoadCharacter(ctx)          // restore
//	tok, _ := c.AccessToken(ctx)           // present to region coordinators; refreshed as needed
//	ch.Version, _ = c.SaveCharacter(ctx, ch) // periodically and on exit
//
// # Coordinator leases
//
// Client implements leases.Client; a region coordinator runs a
// leases.Holder on it and commits only while Holder.Valid says so. The
// server applies the rules of package bootstrap/leases inside a database
// transaction that locks the region's row, so lease IDs (fencing tokens)
// grow by one per grant, never repeat, and survive restarts. Every grant
// answered carries a proof signed with the token key (leases.Proof), which
// peers verify offline as they verify tokens. A region's lease is granted
// only to a peer among the LeaseCandidates (default 8) closest to the
// region's key of the peers holding live tokens (403 lease_not_entitled
// otherwise, counted in refusals_total).
//
// # Abuse limits
//
// Failed password checks back off per (account, source address) and per
// account, doubling the wait up to a maximum; the account-wide wait holds
// back only addresses the account never logged in from, so a guesser
// cannot lock the owner out (LockoutPolicy). Login and registration
// attempts are limited per source address (429 with Retry-After). One
// account holds live tokens for at most MaxPeersPerAccount peer IDs (409
// too_many_peers). Saves are conditional on the stored version (0 only
// creates) and bounded in what they may hold and gain (CharacterRules). A
// refresh token presented twice ends its session. Bodies are accepted only
// as application/json (415 otherwise: no cross-site form can post here),
// bounded (413) and decoded strictly (400); admin calls need
// "Authorization: Bearer". Ended sessions are deleted after
// SessionRetention. Passwords are hashed with argon2id and never logged;
// hashing runs at most HashConcurrency at a time. Every refusal is counted
// in overworld_accounts_refusals_total{route,reason}.
package accounts
