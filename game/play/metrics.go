package play

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the runtime's counters.
type metrics struct {
	takes           *prometheus.CounterVec
	fights          *prometheus.CounterVec
	fightMismatches prometheus.Counter
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
			Help: "Fights by this peer's role and how they ended.",
		}, []string{"role", "result"}),
		fightMismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overworld_play_fight_mismatches_total",
			Help: "Fights whose two sides computed different outcomes from the same inputs.",
		}),
		chatRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_play_chat_rejected_total",
			Help: "Chat-topic messages and whispers refused, by reason.",
		}, []string{"reason"}),
	}
	if err := registerOnce(reg, m.takes, m.fights, m.fightMismatches, m.chatRejected); err != nil {
		return nil, err
	}
	return m, nil
}

// registerOnce registers collectors with reg, leaving alone those already
// registered (several peers of one process may share a registry; the first
// one's series are exported).
func registerOnce(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}
