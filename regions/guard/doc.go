// Package guard connects the region service (package regions) to the
// account server (package bootstrap/accounts): it is the account server's
// side of every region peer.
//
// Three parts, wired into a regions.Config by New and Guard.Apply, and a
// fourth for the pubsub topics:
//
//   - LeaseGate, the regions.CommitGate. When this peer becomes
//     coordinator of a region (regions.Config.OnRoleChange) the gate starts
//     a leases.Holder for the region's lease; when the role is lost it stops
//     the holder, which releases the lease. Allowed answers the holder's
//     Valid(now), so a coordinator commits only while it holds the lease.
//     The gate also implements regions.Eligibility: a peer that holds no
//     valid lease on a region while it cannot reach the lease service
//     (its last two calls got no answer) is not eligible to coordinate it, so the
//     service ranks itself last and the region moves to a peer that can
//     commit. While unreachable the gate probes the service with a renewal
//     that cannot succeed (lease ID 0) until an answer comes back. The gate
//     is also the region service's regions.LeaseProofs: it shows the lease
//     service's signed grant of each lease it holds and checks other
//     coordinators' grants offline with the account server's key; a peer
//     the service refuses as not placed near a region steps aside from it.
//   - TokenAuthorizer, the regions.Authorizer: it verifies the login token
//     a remote peer presents offline, with the account server's public key,
//     against the peer ID libp2p authenticated for the stream. A token
//     copied by another peer, an expired or a malformed one is refused.
//   - TokenSource, for regions.Config.Token: this peer's own access token
//     from its accounts.Client, refreshed in the background so that sending
//     a message never waits for the account server.
//   - Admission, for topic validators (regions/position.WithAdmission, the
//     game's chat topic): pubsub messages carry no token, so it keeps a
//     book of peer ID -> verified token expiry and fills it by asking peers
//     over TokenProtocol (the asker opens a stream, the answerer writes its
//     TokenSource token and closes). Tokens are verified offline against
//     the peer ID libp2p authenticated for the stream, as TokenAuthorizer
//     does. Check never blocks: Admitted, Refused (no, another peer's,
//     expired or bad token: reject the message) or Pending (not asked yet,
//     asking, or unreachable: ignore it). There is at most one ask per
//     peer in flight and MaxFetches in all; failed asks and refusals are
//     retried after a doubling backoff; the book is bounded and never
//     evicts a peer with a current token for an unknown one. New
//     connections are asked at once, and admitted peers again shortly
//     before their token expires (by traffic or the upkeep), so honest
//     peers see no gap.
//
// Data flow:
//
//	regions.Service ──OnRoleChange──► LeaseGate ──Holder.Run──► accounts.Client ──HTTP──► account server
//	       │  before each batch and its commit: Allowed(region) ◄── Holder.Valid(now)
//	       │  placement: Eligible(region)
//	       └─ every incoming message: TokenAuthorizer.Authorize(remote, token) ── token.Verify (offline)
//
//	topic validator ──Check(author)──► Admission book ──hit──► Admitted / Refused
//	                                       │ miss, renewal or recheck due
//	                                       └──ask (background)──TokenProtocol stream──► author's Admission
//	                                              token.Verify(key, tok, author) ◄── TokenSource.Token()
//	network.Notifiee Connected ──► Check (prefetch)
//
// Lease names: a region's lease is LeaseName(world, region).
package guard
