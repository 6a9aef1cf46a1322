package position

import (
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TopicScoreParams is the gossipsub scoring of a region topic: only invalid
// messages count. The penalty is the square of a peer's count of rejected
// updates, so one costs 1 point, four put the peer below the gossip
// threshold (-10), eight below the publish threshold (-50) and nine past the
// graylist threshold (-80), after which its traffic is dropped unread. An
// honest player that trips a check now and then (a respawn looks like a
// teleport to a receiver that missed it) is not cut off; a peer that keeps
// sending bad updates is. The count decays by 1% per second. Time in mesh and delivery
// rates are left out: players come and go with their region, which says
// nothing about their honesty.
func TopicScoreParams() *pubsub.TopicScoreParams {
	return &pubsub.TopicScoreParams{
		SkipAtomicValidation:           true,
		TopicWeight:                    1,
		TimeInMeshQuantum:              time.Second,
		InvalidMessageDeliveriesWeight: -1,
		InvalidMessageDeliveriesDecay:  0.99,
	}
}

// Scoring turns on gossipsub peer scoring for the position topics and keeps
// the last snapshot of the scores. Pass Options to node.WithPubSubOptions;
// the Service sets each region topic's parameters when it joins it.
type Scoring struct {
	mu     sync.Mutex
	scores map[peer.ID]float64
}

// NewScoring returns a Scoring with no scores yet.
func NewScoring() *Scoring { return &Scoring{scores: map[peer.ID]float64{}} }

// Options enables peer scoring with thresholds suited to position traffic
// and inspects the scores every second. The IP colocation factor is off:
// players behind one NAT (and every peer of an in-memory network) share an
// address.
func (s *Scoring) Options() []pubsub.Option {
	params := &pubsub.PeerScoreParams{
		SkipAtomicValidation: true,
		Topics:               map[string]*pubsub.TopicScoreParams{},
		AppSpecificScore:     func(peer.ID) float64 { return 0 },
		DecayInterval:        time.Second,
		DecayToZero:          0.01,
		RetainScore:          time.Minute,
	}
	thresholds := &pubsub.PeerScoreThresholds{
		GossipThreshold:   -10,
		PublishThreshold:  -50,
		GraylistThreshold: -80,
		AcceptPXThreshold: 10,
	}
	return []pubsub.Option{
		pubsub.WithPeerScore(params, thresholds),
		pubsub.WithPeerScoreInspect(pubsub.PeerScoreInspectFn(s.inspect), time.Second),
	}
}

func (s *Scoring) inspect(scores map[peer.ID]float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scores = scores
}

// Score is p's score at the last inspection.
func (s *Scoring) Score(p peer.ID) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.scores[p]
	return v, ok
}
