package sim

import (
	"encoding/binary"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/regions/position"
)

// wireCounter counts one node's gossipsub RPCs and their bytes on the wire
// (protobuf size plus the varint length prefix, as gossipsub frames them).
// It implements pubsub.RawTracer; only the RPC events count.
type wireCounter struct {
	rpcsIn, rpcsOut, bytesIn, bytesOut, dropped, undeliverable atomic.Uint64
	// eventBytesIn counts the published messages of region event topics
	// (the workload's committed updates) received.
	eventBytesIn atomic.Uint64
	// posBytesIn/Out and eventBytesOut split the RPC bytes by kind: the
	// published messages of position topics (updates, batches, summaries)
	// and of region event topics; the rest of each RPC is gossipsub's own
	// (subscriptions, IHAVE/IWANT/GRAFT/PRUNE, message framing).
	posBytesIn, posBytesOut, eventBytesOut atomic.Uint64
	// positions, if set, is told of every message gossipsub delivers
	// (play bots, whose position service has no delivery hook to offer).
	positions func(*pubsub.Message)
	// paths, if set, is told of the same messages, to tell the path each
	// took (see pathRecorder).
	paths func(*pubsub.Message)
	// topics are the topics this node subscribes to, since when.
	topics since[string]
}

func framed(rpc *pubsub.RPC) uint64 {
	n := proto.Size(&rpc.RPC)
	return uint64(n + binary.PutUvarint(make([]byte, binary.MaxVarintLen64), uint64(n)))
}

func (w *wireCounter) RecvRPC(rpc *pubsub.RPC) {
	w.rpcsIn.Add(1)
	w.bytesIn.Add(framed(rpc))
	pos, events := publishedBytes(rpc)
	w.posBytesIn.Add(pos)
	w.eventBytesIn.Add(events)
}

func (w *wireCounter) SendRPC(rpc *pubsub.RPC, _ peer.ID) {
	w.rpcsOut.Add(1)
	w.bytesOut.Add(framed(rpc))
	pos, events := publishedBytes(rpc)
	w.posBytesOut.Add(pos)
	w.eventBytesOut.Add(events)
}

// publishedBytes are the sizes of rpc's published messages on position
// topics ("/pos", "/sum/...") and on region event topics.
func publishedBytes(rpc *pubsub.RPC) (pos, events uint64) {
	for _, m := range rpc.Publish {
		switch t := m.GetTopic(); {
		case strings.HasSuffix(t, "/events"):
			events += uint64(proto.Size(m))
		case strings.HasSuffix(t, "/pos") || strings.Contains(t, "/sum/"):
			pos += uint64(proto.Size(m))
		}
	}
	return pos, events
}

func (w *wireCounter) DropRPC(*pubsub.RPC, peer.ID)             { w.dropped.Add(1) }
func (w *wireCounter) UndeliverableMessage(*pubsub.Message)     { w.undeliverable.Add(1) }
func (w *wireCounter) AddPeer(peer.ID, protocol.ID)             {}
func (w *wireCounter) RemovePeer(peer.ID)                       {}
func (w *wireCounter) OnNewOutboundStream(peer.ID, protocol.ID) {}
func (w *wireCounter) OnClosedOutboundStream(peer.ID)           {}
func (w *wireCounter) Join(topic string)                        { w.topics.begin(topic, time.Now()) }
func (w *wireCounter) Leave(topic string)                       { w.topics.end(topic) }
func (w *wireCounter) Graft(peer.ID, string)                    {}
func (w *wireCounter) Prune(peer.ID, string)                    {}
func (w *wireCounter) ValidateMessage(*pubsub.Message)          {}
func (w *wireCounter) DeliverMessage(m *pubsub.Message) {
	if w.positions != nil {
		w.positions(m)
	}
	if w.paths != nil {
		w.paths(m)
	}
}
func (w *wireCounter) RejectMessage(*pubsub.Message, string) {}
func (w *wireCounter) DuplicateMessage(*pubsub.Message)      {}
func (w *wireCounter) ThrottlePeer(peer.ID)                  {}

type wireSnapshot struct {
	rpcsIn, rpcsOut, bytesIn, bytesOut, dropped, undeliverable, eventBytesIn uint64
	posBytesIn, posBytesOut, eventBytesOut                                   uint64
}

func (w *wireCounter) snapshot() wireSnapshot {
	return wireSnapshot{w.rpcsIn.Load(), w.rpcsOut.Load(), w.bytesIn.Load(), w.bytesOut.Load(), w.dropped.Load(), w.undeliverable.Load(), w.eventBytesIn.Load(),
		w.posBytesIn.Load(), w.posBytesOut.Load(), w.eventBytesOut.Load()}
}

// delays collects update delays (arrival minus send) and, beside each, the
// one-way latency of the link between sender and receiver, while recording
// is on.
type delays struct {
	mu        sync.Mutex
	on        bool
	delay     []float64 // milliseconds
	link      []float64 // milliseconds
	batched   int
	perPlayer map[peer.ID]int
}

func (d *delays) record(delay, link time.Duration, batched bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.on {
		return
	}
	d.delay = append(d.delay, float64(delay.Microseconds())/1000)
	d.link = append(d.link, float64(link.Microseconds())/1000)
	if batched {
		d.batched++
	}
}

func (d *delays) setRecording(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.on = on
}

// follower counts, for one receiver, the updates of other players it
// missed while it was following them: a sequence gap between two updates
// of the same sender that arrived at most followWindow apart. The
// position protocol's own count (Stats.Lost) also counts every update sent
// while the sender was out of the receiver's interest area, as when a bot
// walks away and back within half a minute; those were never due.
type follower struct {
	mu   sync.Mutex
	last map[peer.ID]followed
	// lost and due (delivered + lost) while following.
	lost, due atomic.Uint64
}

type followed struct {
	seq uint64
	at  time.Time
}

// followWindow is the longest silence of a sender after which its next
// update still counts as followed: a receiver lingers on a region for 2 s
// after leaving it (position.Config.Linger), and a coordinator's fail-over
// takes about a second.
const followWindow = 2 * time.Second

// maxFollowed bounds the senders a follower remembers; past it those not
// heard from for a followWindow are forgotten.
const maxFollowed = 1024

// delivered counts update d and reports whether it is new (not a
// duplicate or older than one already delivered).
func (f *follower) delivered(d position.Delivery) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil {
		f.last = map[peer.ID]followed{}
	}
	prev, ok := f.last[d.Player]
	if ok && d.Seq <= prev.seq {
		return false
	}
	f.due.Add(1)
	if ok && d.Arrived.Sub(prev.at) <= followWindow {
		gap := d.Seq - prev.seq - 1
		f.lost.Add(gap)
		f.due.Add(gap)
	}
	if !ok && len(f.last) >= maxFollowed {
		for p, fl := range f.last {
			if d.Arrived.Sub(fl.at) > followWindow {
				delete(f.last, p)
			}
		}
	}
	f.last[d.Player] = followed{seq: d.Seq, at: d.Arrived}
	return true
}
