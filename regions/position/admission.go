package position

import (
	"errors"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Admission decides whether a player may be heard on the position topics
// at all, before any other check of its updates: Accept admits it, Reject
// refuses it (the message is rejected, which penalises the peer that sent
// it), Ignore drops the message without blame (the answer is not known
// yet). It must not block: the topic validators run inline. With accounts,
// regions/guard.Admission.Check provides it; without one the world is open.
type Admission func(player peer.ID) Verdict

// Reasons of an Admission's refusals, in the Rejected and Ignored stats.
const (
	// ReasonBadToken: the author showed no valid login token for its peer
	// ID.
	ReasonBadToken = "bad_token"
	// ReasonTokenPending: the author's token has not been checked yet.
	ReasonTokenPending = "token_pending"
)

// WithAdmission makes the service admit only the players f admits: the
// author of every update on a position topic, the coordinator that
// published a batch, and, as a coordinator in aggregated mode, every
// player that streams its updates to this peer. A batch's entries are not
// checked again: the coordinator checked their players, and the batch
// stands or falls with the coordinator's admission.
func WithAdmission(f Admission) Option {
	return func(s *Service) error {
		if f == nil {
			return errors.New("admission is nil")
		}
		s.admission = f
		return nil
	}
}

// admit is the admission verdict on player and the reason for the stats;
// this peer itself and an open world (no Admission) admit everyone.
func (s *Service) admit(player peer.ID) (Verdict, string) {
	if s.admission == nil || player == s.self {
		return Accept, ""
	}
	switch s.admission(player) {
	case Accept:
		return Accept, ""
	case Reject:
		return Reject, ReasonBadToken
	default:
		return Ignore, ReasonTokenPending
	}
}
