package tss

// PendingCommands returns the commands accepted and not yet executed by the
// last state, in canonical order: what a transfer of the last state to
// another synchronizer (a mirror joining mid-game, or resyncing) must carry
// along, so that the receiver, started from that state, executes exactly
// what this one will.
func (s *Synchronizer[S, C, R]) PendingCommands() []C {
	out := make([]C, len(s.all))
	for i, e := range s.all {
		out[i] = e.cmd
	}
	return out
}
