package node

import (
	"context"
	"errors"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
)

// metrics are the node's own Prometheus series; libp2p adds its transport
// and resource-manager series to the same registerer.
type metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector

	peers        prometheus.Gauge
	routingTable prometheus.Gauge
	topics       prometheus.Gauge
	rpcIn        prometheus.Counter
	rpcOut       prometheus.Counter
	rpcInBytes   prometheus.Counter
	rpcOutBytes  prometheus.Counter
	rpcDropped   prometheus.Counter
	published    prometheus.Counter
	delivered    prometheus.Counter
	rejected     *prometheus.CounterVec
	duplicates   prometheus.Counter

	node *Node
}

func newMetrics(reg prometheus.Registerer, n *Node) (*metrics, error) {
	m := &metrics{reg: reg, node: n}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "overworld", Subsystem: "node", Name: name, Help: help})
		m.collectors = append(m.collectors, g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "overworld", Subsystem: "pubsub", Name: name, Help: help})
		m.collectors = append(m.collectors, c)
		return c
	}
	m.peers = gauge("connected_peers", "Peers with an open connection.")
	m.routingTable = gauge("dht_routing_table_peers", "Peers in the Kademlia routing table.")
	m.topics = gauge("pubsub_topics", "Pubsub topics this node has joined.")
	m.rpcIn = counter("rpc_received_total", "Pubsub RPCs received.")
	m.rpcOut = counter("rpc_sent_total", "Pubsub RPCs sent.")
	m.rpcInBytes = counter("rpc_received_bytes_total", "Bytes of pubsub RPCs received (protobuf size).")
	m.rpcOutBytes = counter("rpc_sent_bytes_total", "Bytes of pubsub RPCs sent (protobuf size).")
	m.rpcDropped = counter("rpc_dropped_total", "Pubsub RPCs dropped because a peer's outbound queue was full.")
	m.published = counter("messages_published_total", "Messages this node published (delivered locally as its own).")
	m.delivered = counter("messages_delivered_total", "Messages validated and delivered to local subscribers.")
	m.duplicates = counter("messages_duplicate_total", "Messages received again after the first copy.")
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "overworld", Subsystem: "pubsub", Name: "messages_rejected_total",
		Help: "Messages rejected by validation, by reason.",
	}, []string{"reason"})
	m.collectors = append(m.collectors, m.rejected)
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) unregister() {
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

// sampleLoop refreshes the gauges that have no event of their own.
func (m *metrics) sampleLoop(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		m.peers.Set(float64(len(m.node.host.Network().Peers())))
		m.routingTable.Set(float64(m.node.dht.RoutingTable().Size()))
		if m.node.pubsub != nil {
			m.topics.Set(float64(len(m.node.pubsub.GetTopics())))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *metrics) tracer() pubsub.RawTracer { return (*pubsubTracer)(m) }

// pubsubTracer counts pubsub traffic; gossipsub calls it from its event
// loop, so every method only bumps counters.
type pubsubTracer metrics

var _ pubsub.RawTracer = (*pubsubTracer)(nil)

func (t *pubsubTracer) OnNewOutboundStream(peer.ID, protocol.ID) {}
func (t *pubsubTracer) OnClosedOutboundStream(peer.ID)           {}
func (t *pubsubTracer) Join(string)                              {}
func (t *pubsubTracer) Leave(string)                             {}
func (t *pubsubTracer) Graft(peer.ID, string)                    {}
func (t *pubsubTracer) Prune(peer.ID, string)                    {}
func (t *pubsubTracer) ValidateMessage(*pubsub.Message)          {}
func (t *pubsubTracer) ThrottlePeer(peer.ID)                     {}
func (t *pubsubTracer) UndeliverableMessage(*pubsub.Message)     {}
func (t *pubsubTracer) DuplicateMessage(*pubsub.Message)         { t.duplicates.Inc() }
func (t *pubsubTracer) DropRPC(*pubsub.RPC, peer.ID)             { t.rpcDropped.Inc() }
func (t *pubsubTracer) RejectMessage(_ *pubsub.Message, reason string) {
	t.rejected.WithLabelValues(reason).Inc()
}

func (t *pubsubTracer) DeliverMessage(msg *pubsub.Message) {
	if msg.ReceivedFrom == t.node.host.ID() {
		t.published.Inc()
		return
	}
	t.delivered.Inc()
}

func (t *pubsubTracer) RecvRPC(rpc *pubsub.RPC) {
	t.rpcIn.Inc()
	t.rpcInBytes.Add(float64(proto.Size(&rpc.RPC)))
}

func (t *pubsubTracer) SendRPC(rpc *pubsub.RPC, _ peer.ID) {
	t.rpcOut.Inc()
	t.rpcOutBytes.Add(float64(proto.Size(&rpc.RPC)))
}

// RegisterShared registers the collectors of a service that runs on a node
// (regions, positions, the player runtime) with reg. Several peers of one
// process may share a registry: a collector already registered by the
// first of them is left as it is, and the first peer's series are the ones
// exported.
func RegisterShared(reg prometheus.Registerer, cs ...prometheus.Collector) error {
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
