// Package finder is `overworld find`: it asks the master server for the
// games a player wants, probes every mirror of those games in parallel
// (package probe) and ranks the mirrors by median RTT, the closest first.
// Paper 000 §4.5.2 sketches this tool as qm-find.
//
// # Ranking
//
// Mirrors that answered are ordered by their median RTT counted in steps
// of Options.TieWithin (default 1 ms): mirrors in the same step tie, and
// ties go to the lower load, then the lower mirror ID, then the lower game
// ID. The order depends only on the measurements, never on the order the
// master listed the mirrors in. Mirrors that stayed silent for
// probe.Options.Silence (1 s) are listed after the ranked ones and never
// chosen.
package finder
