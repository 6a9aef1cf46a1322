package position

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a Service's Stats to Prometheus, read at scrape time,
// so the protocol's hot path only bumps its own atomic counters.
type Collector struct {
	svc *Service
}

// NewCollector returns a collector for s; register it with the process's
// registry.
func NewCollector(s *Service) *Collector { return &Collector{svc: s} }

var (
	descPublished = prometheus.NewDesc("overworld_position_published_total",
		"Position updates this player published on its region topic (direct mode).", nil, nil)
	descUplink = prometheus.NewDesc("overworld_position_uplink_total",
		"Position updates sent to the region coordinator (aggregated mode), by result.", []string{"result"}, nil)
	descBatches = prometheus.NewDesc("overworld_position_batches_published_total",
		"Batches published as a region coordinator (aggregated mode).", nil, nil)
	descBatchEntries = prometheus.NewDesc("overworld_position_batch_entries_total",
		"Player updates carried in the batches this peer published.", nil, nil)
	descDelivered = prometheus.NewDesc("overworld_position_delivered_total",
		"Other players' updates accepted and delivered to the view.", nil, nil)
	descLost = prometheus.NewDesc("overworld_position_lost_total",
		"Sequence numbers skipped over by accepted updates.", nil, nil)
	descRejected = prometheus.NewDesc("overworld_position_rejected_total",
		"Updates rejected by the topic validator (the sender is penalised), by reason.", []string{"reason"}, nil)
	descIgnored = prometheus.NewDesc("overworld_position_ignored_total",
		"Updates dropped without penalty (duplicates, reordering, ...), by reason.", []string{"reason"}, nil)
	descRendezvous = prometheus.NewDesc("overworld_position_rendezvous_total",
		"Registrations with region coordinators, by result.", []string{"result"}, nil)
	descFallbacks = prometheus.NewDesc("overworld_position_fallbacks_total",
		"Aggregated mode: times this player started publishing its updates directly, by reason (no_coordinator, uplink_failed, unanswered).", []string{"reason"}, nil)
	descFallbackResumed = prometheus.NewDesc("overworld_position_fallback_resumed_total",
		"Aggregated mode: times the coordinator answered again and this player went back to sending it alone.", nil, nil)
	descFallbackPublished = prometheus.NewDesc("overworld_position_fallback_published_total",
		"Aggregated mode: updates this player published directly because its coordinator did not answer.", nil, nil)
	descPublishingDirect = prometheus.NewDesc("overworld_position_publishing_direct",
		"Aggregated mode: 1 while this player publishes its updates directly (fallback), else 0.", nil, nil)
	descSummaries = prometheus.NewDesc("overworld_position_summaries_published_total",
		"Summaries published, by whose: region (as its coordinator) or own (this player alone, while it publishes directly).", []string{"whose"}, nil)
	descSummaryEntries = prometheus.NewDesc("overworld_position_summary_entries_total",
		"Player updates carried in the region summaries this peer published.", nil, nil)
	descTopicBytesIn = prometheus.NewDesc("overworld_position_topic_bytes_in_total",
		"Bytes of other peers' messages accepted on position topics, by kind (position, summary).", []string{"kind"}, nil)
	descStreamBytes = prometheus.NewDesc("overworld_position_stream_bytes_total",
		"Bytes on position streams to and from coordinators, by direction.", []string{"direction"}, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPublished, descUplink, descBatches, descBatchEntries, descDelivered,
		descLost, descRejected, descIgnored, descRendezvous, descStreamBytes,
		descFallbacks, descFallbackResumed, descFallbackPublished, descPublishingDirect,
		descSummaries, descSummaryEntries, descTopicBytesIn} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.svc.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(descPublished, st.Published)
	counter(descUplink, st.SentUplink, "sent")
	counter(descUplink, st.UplinkFailed, "failed")
	counter(descBatches, st.BatchesPublished)
	counter(descBatchEntries, st.BatchEntries)
	counter(descDelivered, st.Delivered)
	counter(descLost, st.Lost)
	for _, r := range Reasons(st.Rejected) {
		counter(descRejected, st.Rejected[r], r)
	}
	for _, r := range Reasons(st.Ignored) {
		counter(descIgnored, st.Ignored[r], r)
	}
	counter(descRendezvous, st.RendezvousOK, "ok")
	counter(descRendezvous, st.RendezvousFailed, "failed")
	counter(descStreamBytes, st.StreamBytesOut, "out")
	counter(descStreamBytes, st.StreamBytesIn, "in")
	for _, r := range []string{FallbackNoCoordinator, FallbackUplinkFailed, FallbackUnanswered} {
		counter(descFallbacks, st.Fallbacks[r], r)
	}
	counter(descSummaries, st.SummariesPublished, "region")
	counter(descSummaries, st.OwnSummaries, "own")
	counter(descSummaryEntries, st.SummaryEntries)
	counter(descTopicBytesIn, st.PositionBytesIn, "position")
	counter(descTopicBytesIn, st.SummaryBytesIn, "summary")
	counter(descFallbackResumed, st.FallbackResumed)
	counter(descFallbackPublished, st.FallbackPublished)
	direct := 0.0
	if st.PublishingDirect {
		direct = 1
	}
	ch <- prometheus.MustNewConstMetric(descPublishingDirect, prometheus.GaugeValue, direct)
}
