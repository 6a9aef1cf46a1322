package master

import "github.com/prometheus/client_golang/prometheus"

// metrics are the master server's Prometheus series.
type metrics struct {
	requests      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	refusals      *prometheus.CounterVec
	registrations *prometheus.CounterVec
	polls         *prometheus.CounterVec
	dropped       *prometheus.CounterVec
	rounds        prometheus.Counter
	roundTime     prometheus.Histogram
	games         prometheus.Gauge
	mirrors       prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_master_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "overworld_master_http_request_duration_seconds",
			Help:    "HTTP request handling time by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"route"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_master_refusals_total",
			Help: "Requests refused, by reason (the API error code: unauthorized, bad_request, body_too_large, rate_limited, forbidden, …).",
		}, []string{"reason"}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_master_registrations_total",
			Help: "Accepted registrations: created (a new game) or refreshed (a known game, e.g. a push keep-alive).",
		}, []string{"result"}),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_master_polls_total",
			Help: "Keep-alive polls of game status endpoints by result: changed, unchanged, unreachable, bad_status, bad_answer.",
		}, []string{"result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_master_games_removed_total",
			Help: "Games removed from the registry by reason: missed (keep-alives) or deregistered.",
		}, []string{"reason"}),
		rounds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overworld_master_keepalive_rounds_total",
			Help: "Keep-alive intervals completed.",
		}),
		roundTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "overworld_master_keepalive_round_seconds",
			Help:    "Time to poll every pollable game and settle one keep-alive interval.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		games: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "overworld_master_games",
			Help: "Games in the registry after the last keep-alive round.",
		}),
		mirrors: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "overworld_master_mirrors",
			Help: "Mirrors of the registered games after the last keep-alive round.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.refusals, m.registrations, m.polls, m.dropped, m.rounds, m.roundTime, m.games, m.mirrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
