// Package duty moves the CRIMP authority with the rotating arbiter: the
// mirror group's authority duties (admit mirrors, assign IDs, declare
// drops, serve state transfer) follow game/arbiter's rotation, and the
// arbiter grants the first-come resources, so one member at a time holds
// all of them and a partition side without a majority holds none.
//
// # Data flow
//
// A Node runs a crimp.Node in duty mode (crimp.Config.Key) and, once that
// member is established, an arbiter.Node with the member's CRIMP ID. Both
// speak over the one CRIMP group: arbiter messages travel as CRIMP payloads
// tagged tagArbiter, the application's payloads tagged tagApp, and the
// arbiter is told the sender CRIMP names. After every input the Node
// reconciles the two duties:
//
//   - it holds the CRIMP duty and its arbiter says another member serves:
//     it hands the CRIMP duty to that member (crimp.Node.HandOver, retried
//     until its lease allows);
//   - its arbiter serves and it does not hold the CRIMP duty: it campaigns
//     for it (crimp.Node.Campaign), which succeeds only once the CRIMP
//     holder has been silent long enough for a majority to vote it out
//     (an arbiter takeover after a crash); otherwise the live holder hands
//     over when its own arbiter catches up.
//
// A member the CRIMP authority drops rejoins the group and the game. The
// arbiter on duty expels members the CRIMP authority dropped, so both
// views shrink together.
//
// Fixed mode needs none of this: one mirror keeps the CRIMP authority
// (crimp.Config.Authority), as before.
//
// # Shape of the code
//
// Node is pure like its two parts: Step, Send, Claim and Tick take the
// current time and return a Ready (datagrams, the application's
// deliveries, events, the next tick). Member drives it over a
// crimp.Transport with a crimp.Clock, as crimp.Member does a crimp.Node.
package duty
