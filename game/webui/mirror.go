package webui

// MirrorStatus is what the page shows in mirror mode (Status.Mirror): which
// mirror the player is on, how often that mirror's states rolled back, and
// whether the mirrors' state hashes agree.
type MirrorStatus struct {
	// Mirror is the ingress mirror's ID; URL where the session reached it;
	// Mirrors the size of the group it reports.
	Mirror  uint32 `json:"mirror"`
	URL     string `json:"url"`
	Mirrors int    `json:"mirrors"`
	// Authority is the group's authority (the reference state).
	Authority uint32 `json:"authority"`
	// Rollbacks counts the mirror's rollbacks (every state, cascades
	// included); LeadingRollbacks those of the state the player sees.
	Rollbacks        uint64 `json:"rollbacks"`
	LeadingRollbacks uint64 `json:"leadingRollbacks"`
	// Agreed and Mismatched count the mirror's comparisons of its last
	// state's hash with the others'; Agreeing is false while a new
	// mismatch is unresolved; CheckpointTick is the last tick compared.
	Agreed         uint64 `json:"agreed"`
	Mismatched     uint64 `json:"mismatched"`
	Agreeing       bool   `json:"agreeing"`
	CheckpointTick uint64 `json:"checkpointTick"`
	Resyncs        uint64 `json:"resyncs"`
	// LeadingTick is what the player sees; ConfirmedTick what every
	// mirror agrees on.
	LeadingTick   uint64 `json:"leadingTick"`
	ConfirmedTick uint64 `json:"confirmedTick"`
	// Protocol is "event" under the event protocol (empty under the
	// command protocol); then Decided counts the authority's decisions the
	// mirror took in, DecidedLate those put in a later tick than their
	// own, Undecided actions no decision reached, Reconciled guesses taken
	// back.
	Protocol    string `json:"protocol,omitempty"`
	Decided     uint64 `json:"decided,omitempty"`
	DecidedLate uint64 `json:"decidedLate,omitempty"`
	Undecided   uint64 `json:"undecided,omitempty"`
	Reconciled  uint64 `json:"reconciled,omitempty"`
}
