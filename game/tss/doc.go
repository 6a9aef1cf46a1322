// Package tss is trailing state synchronization (Cronin, Filstrup, Kurc and
// Jamin, 2001, §3.5): how each mirror of a mirrored game server keeps one
// consistent world although the commands of every mirror reach it late and
// out of order over CRIMP.
//
// # Data flow
//
// A Synchronizer holds k+1 copies of one deterministic State (the game
// world), each executing the same commands a fixed delay d0 < d1 < ... < dk
// behind the wall clock. The caller hands it every command with its arrival
// time (Deliver) and the passage of time (Tick); both take the time as an
// argument, so the core has no clock or goroutine and a run can be replayed
// exactly. A command stamped s by its ingress mirror runs in tick
// ceil((s-Epoch)/TickPeriod) of every state, in canonical order (stamp,
// mirror, seq); a state that has already passed that tick when the command
// arrives runs it in its next tick instead (out of order).
//
// Each state but the leading one compares the record (events, positions)
// of every tick it executes with the record the state ahead of it made of
// the same tick. Strictly consistent events must be identical; weakly
// consistent values may differ by Config.WeakMargin. On a difference the
// trailing state is copied onto the one ahead, which re-executes its later
// commands up to where it was — checked in turn against the state ahead of
// it, so a rollback cascades to the leading state, which feeds the clients.
// The last state is never checked: a command arriving after dk is counted
// as too late and dropped (CRIMP, whose history equals dk, would not deliver
// it either); the mirrors' hash exchange catches what it changes. Every
// second of ticks the last state's hash is emitted as a Checkpoint.
//
// Around the core:
//   - TraceWriter/TraceReader record every call (deliveries with their
//     times, ticks, delay changes) and the checkpoints in a bounded, CRC'd
//     binary stream; Replay re-runs it and checks every checkpoint.
//   - SyncTest re-simulates the last N ticks every tick and reports the
//     first tick whose hash differs: the tool that finds nondeterminism.
//   - TimeWarp is the classic optimistic baseline on the same interface
//     (a snapshot before every tick with commands, restore and re-execute
//     on a straggler), for the benchmark.
//   - ChooseDelays picks the number of states and their delays from a
//     measured arrival latency distribution, command rate and the costs of
//     execution and copying; Retuner re-runs it online with hysteresis and
//     Synchronizer.SetDelays applies its choice safely.
//   - Metrics counts rollbacks (by the state that found them, and their
//     depth), execution and rollback time, late, duplicate and future
//     commands, as atomics and as a Prometheus collector.
package tss
