// Package probe measures the round-trip time from a player to each mirror
// of a game, so the finder can send the player to the closest one (paper
// 000 §4.5.2 names an IDMaps HOPS server for this; we measure directly).
//
// Every mirror runs a Responder on a UDP port it registers with the master
// as its probe address. A finder calls Measure with the mirrors the master
// listed: from one socket it sends each mirror Options.Pings pings, the
// i-th ping of every mirror at the same moment and rounds Spacing apart,
// and times the pongs until every ping is answered or Silence (1 s) after
// the first ping. A mirror that stays silent costs at most that second.
//
// # Wire format
//
// A datagram is the header "owp", version 1, kind (1 ping, 2 pong), then a
// protobuf Ping or Pong (probe.proto). A ping carries a random nonce and
// is padded to MinPingSize; a pong echoes the nonce and names the game,
// the mirror and its load in permille. Nothing larger than MaxPacketSize
// is read. The prober takes a pong only from the address it pinged, for a
// nonce it sent and has not yet seen answered, naming the game and mirror
// the master listed there; other pongs are counted as wrong or dropped.
//
// # Abuse
//
// A pong is never larger than the ping that caused it, so a forged source
// address gains an attacker no amplification. The responder answers at
// most PerSource pings per source address (a bounded table) and Total
// pings overall, and counts what it does not answer by reason in
// overworld_probe_refused_total. The decoders are fuzzed.
package probe
