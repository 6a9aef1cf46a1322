package play

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/node"
)

// metrics are the runtime's counters.
type metrics struct {
	takes           *prometheus.CounterVec
	fights          *prometheus.CounterVec
	fightMismatches prometheus.Counter
	fightRefusals   *prometheus.CounterVec
	chatRejected    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		takes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_play_object_updates_total",
			Help: "Eats and pick-ups by outcome: committed, conflict (another player was first) or failed.",
		}, []string{"action", "result"}),
		fights: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_play_fights_total",
			Help: "Fights by this peer's role and how they ended: fought (both sides computed the same), stale (they saw different cards), mismatch, refused or failed.",
		}, []string{"role", "result"}),
		fightMismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overworld_play_fight_mismatches_total",
			Help: "Fights whose two sides computed different outcomes from the same inputs.",
		}),
		fightRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_play_fight_refusals_total",
			Help: "Attacks this peer refused as the defender, by reason.",
		}, []string{"reason"}),
		chatRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_play_chat_rejected_total",
			Help: "Chat-topic messages and whispers refused, by reason.",
		}, []string{"reason"}),
	}
	if err := node.RegisterShared(reg, m.takes, m.fights, m.fightMismatches, m.fightRefusals, m.chatRejected); err != nil {
		return nil, err
	}
	return m, nil
}
