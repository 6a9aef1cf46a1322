package accounts

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the account server's Prometheus series.
type metrics struct {
	requests      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	logins        *prometheus.CounterVec
	registrations *prometheus.CounterVec
	saves         *prometheus.CounterVec
	leaseOps      *prometheus.CounterVec
	// refusals counts requests refused (4xx) by route and reason.
	refusals        *prometheus.CounterVec
	sessionsDeleted prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_accounts_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "overworld_accounts_http_request_duration_seconds",
			Help:    "HTTP request handling time by route pattern.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"route"}),
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_accounts_logins_total",
			Help: "Login attempts by result (ok or an error code).",
		}, []string{"result"}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_accounts_registrations_total",
			Help: "Registration attempts by result.",
		}, []string{"result"}),
		saves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_accounts_character_saves_total",
			Help: "Character saves by result.",
		}, []string{"result"}),
		leaseOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_accounts_lease_operations_total",
			Help: "Coordinator lease acquire, renew and release calls by result.",
		}, []string{"op", "result"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_accounts_refusals_total",
			Help: "Requests refused (4xx) by route and reason: lockouts, peer cap, out-of-bounds saves, reused refresh tokens, bad content types, admin calls without a bearer token, ...",
		}, []string{"route", "reason"}),
		sessionsDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overworld_accounts_sessions_deleted_total",
			Help: "Ended sessions deleted after the retention period.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.logins, m.registrations, m.saves, m.leaseOps, m.refusals, m.sessionsDeleted} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
