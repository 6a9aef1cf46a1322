package regions

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/node"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// metrics are the service's Prometheus series. Requests are counted where
// they are answered, for remote players and this peer's own alike (so a
// redirect or a retry is visible to an operator as such); held regions are
// read from the slots at scrape time.
type metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	denied    prometheus.Counter
	takeovers *prometheus.CounterVec
	replicas  prometheus.Counter
	// refused counts role claims and messages refused by reason (trust.go).
	refused *prometheus.CounterVec
	// singleCopy counts changes acknowledged with no replica holding them.
	singleCopy prometheus.Counter
	held       *prometheus.Desc
	svc        *Service
}

// Takeover kinds, the label of overworld_region_takeovers_total.
const (
	takeoverOwnCopy  = "own_copy" // the replica (or a stale holder) promoted its own copy
	takeoverTransfer = "transfer" // by a state transfer from a fresher holder
	takeoverCreated  = "created"  // a region nobody held, born empty
	takeoverRebuilt  = "rebuilt"  // from the members' caches after a double failure
)

func newMetrics(s *Service, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_region_requests_total",
			Help: "Region requests this peer answered, by operation and status (ok, conflict, locked, redirect, retry, ...).",
		}, []string{"op", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "overworld_region_request_duration_seconds",
			Help:    "Time from a request's arrival to its answer at the coordinator, replication included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5 ms .. 4 s
		}, []string{"op"}),
		denied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overworld_region_denied_total",
			Help: "Region messages refused because the sender's token did not check out.",
		}),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_region_takeovers_total",
			Help: "Regions this peer started coordinating, by how it got their state.",
		}, []string{"how"}),
		replicas: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overworld_region_replica_failures_total",
			Help: "Replications that failed and made the coordinator choose another replica.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_region_refused_total",
			Help: "Region messages and role claims refused, by reason (not_placed, proof_missing, proof_stale, deposal_unproven, holder_unproven, cache_unproven, origin_unproven, replica_excluded, event_forged, ...).",
		}, []string{"reason"}),
		singleCopy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overworld_region_single_copy_commits_total",
			Help: "Changes this coordinator acknowledged with no replica holding them (no replica reachable): lost if this peer fails before a replica syncs.",
		}),
		held: prometheus.NewDesc("overworld_regions_held",
			"Regions this peer holds, by role.", []string{"role"}, nil),
		svc: s,
	}
	if reg == nil {
		return m, nil
	}
	if err := node.RegisterShared(reg, m.requests, m.duration, m.denied, m.takeovers, m.replicas, m.refused, m.singleCopy, heldCollector{m}); err != nil {
		return nil, err
	}
	return m, nil
}

// answered counts a reply to req that took since start.
func (m *metrics) answered(req *pb.Request, r *pb.Reply, start time.Time) {
	op := opLabel(req.GetOp())
	m.requests.WithLabelValues(op, statusLabel(r.GetStatus())).Inc()
	if r.GetStatus() != pb.Status_STATUS_REDIRECT {
		m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	}
}

func opLabel(op pb.Op) string {
	return strings.ToLower(strings.TrimPrefix(op.String(), "OP_"))
}

func statusLabel(st pb.Status) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "STATUS_"))
}

// heldCollector reports overworld_regions_held from the service's slots.
type heldCollector struct{ m *metrics }

func (c heldCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.m.held }

func (c heldCollector) Collect(ch chan<- prometheus.Metric) {
	var coord, replica int
	for _, r := range c.m.svc.heldRegions() {
		switch c.m.svc.Role(r) {
		case RoleCoordinator:
			coord++
		case RoleReplica:
			replica++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.m.held, prometheus.GaugeValue, float64(coord), "coordinator")
	ch <- prometheus.MustNewConstMetric(c.m.held, prometheus.GaugeValue, float64(replica), "replica")
}
