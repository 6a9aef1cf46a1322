package sim

import (
	"fmt"
	"io"
	"strings"
)

// Per-player bandwidth by kind of traffic, for all players and for
// interior and border players apart. A border player follows fewer
// regions than an interior one (a region on the world's edge has fewer
// neighbours), so a small world, where more players live on the border,
// costs less per player than a large one; the interior players' figures
// are the ones to compare across world sizes.

// The kinds of traffic. The first five make up the headline bytes per
// node (Report.BytesSentPerSec); kindOther is what the host carried
// besides them and is left out of the headline, as it always was.
const (
	kindPositionData    = "position topic data"
	kindEventData       = "event topic data"
	kindGossipControl   = "gossipsub control"
	kindPositionStreams = "position streams"
	kindWorkload        = "workload streams"
	kindOther           = "other streams"
)

// bandwidthKinds are the kinds in the order a person reads them.
var bandwidthKinds = []string{kindPositionData, kindEventData, kindGossipControl, kindPositionStreams, kindWorkload, kindOther}

// Bandwidth is the per-player bandwidth of a group of players.
type Bandwidth struct {
	Players         int  `json:"players"`
	BytesSentPerSec Dist `json:"bytes_sent_per_s"`
	BytesRecvPerSec Dist `json:"bytes_recv_per_s"`
	// SentByKind and RecvByKind are the group's average bytes per second
	// per player by kind: position topic data (the published updates,
	// batches and summaries gossipsub carried, forwarded copies
	// included), event topic data (the region services' committed
	// events), gossipsub control (the rest of its RPCs: subscriptions,
	// IHAVE/IWANT/GRAFT/PRUNE, message framing), position streams (uplink
	// to coordinators and rendezvous), workload streams (region requests
	// and fights) and other streams (the DHT, identify, the region
	// service's replication; not in the headline bytes).
	SentByKind map[string]float64 `json:"sent_by_kind"`
	RecvByKind map[string]float64 `json:"recv_by_kind"`
}

// BandwidthSplit is the bandwidth of all players, and of the interior and
// border ones apart (see windowEntry.interior).
type BandwidthSplit struct {
	All      Bandwidth `json:"all"`
	Interior Bandwidth `json:"interior"`
	Border   Bandwidth `json:"border"`
}

// kindBytes is one player's bytes per second by kind, sent or received.
func (e windowEntry) kindBytes(sent bool) map[string]float64 {
	a, b := e.last, e.first
	pick := func(out, in uint64) float64 {
		if sent {
			return float64(out)
		}
		return float64(in)
	}
	gossip := pick(a.wire.bytesOut-b.wire.bytesOut, a.wire.bytesIn-b.wire.bytesIn)
	pos := pick(a.wire.posBytesOut-b.wire.posBytesOut, a.wire.posBytesIn-b.wire.posBytesIn)
	events := pick(a.wire.eventBytesOut-b.wire.eventBytesOut, a.wire.eventBytesIn-b.wire.eventBytesIn)
	streams := pick(a.stats.StreamBytesOut-b.stats.StreamBytesOut, a.stats.StreamBytesIn-b.stats.StreamBytesIn)
	workload := pick(a.workloadOut-b.workloadOut, a.workloadIn-b.workloadIn)
	host := pick(a.hostOut-b.hostOut, a.hostIn-b.hostIn)
	// The tracer counts an RPC when gossipsub queues it, the host when it
	// is written: at the window's edges the two differ by what is in
	// flight, which must not make the rest negative.
	other := max(0, host-gossip-streams-workload)
	s := e.seconds
	return map[string]float64{
		kindPositionData:    pos / s,
		kindEventData:       events / s,
		kindGossipControl:   max(0, gossip-pos-events) / s,
		kindPositionStreams: streams / s,
		kindWorkload:        workload / s,
		kindOther:           other / s,
	}
}

// bandwidthOf summarises the entries' bandwidth (those online less than
// minOnlineSeconds left out, as in the headline figures).
func bandwidthOf(entries []windowEntry) Bandwidth {
	bw := Bandwidth{SentByKind: map[string]float64{}, RecvByKind: map[string]float64{}}
	var sent, recv []float64
	for _, e := range entries {
		if e.seconds < minOnlineSeconds {
			continue
		}
		sent = append(sent, e.bytesSentPerSec())
		recv = append(recv, e.bytesRecvPerSec())
		for k, v := range e.kindBytes(true) {
			bw.SentByKind[k] += v
		}
		for k, v := range e.kindBytes(false) {
			bw.RecvByKind[k] += v
		}
	}
	bw.Players = len(sent)
	for _, k := range bandwidthKinds {
		if bw.Players > 0 {
			bw.SentByKind[k] /= float64(bw.Players)
			bw.RecvByKind[k] /= float64(bw.Players)
		}
	}
	bw.BytesSentPerSec, bw.BytesRecvPerSec = summarise(sent), summarise(recv)
	return bw
}

// splitBandwidth is the bandwidth of all the window's players and of its
// interior and border players apart.
func splitBandwidth(window []windowEntry) *BandwidthSplit {
	var interior, border []windowEntry
	for _, e := range window {
		if e.interior() {
			interior = append(interior, e)
		} else {
			border = append(border, e)
		}
	}
	return &BandwidthSplit{All: bandwidthOf(window), Interior: bandwidthOf(interior), Border: bandwidthOf(border)}
}

// summary writes the split for a person; nothing if s is nil.
func (s *BandwidthSplit) summary(w io.Writer) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "  bandwidth per player, sent avg B/s (received):\n")
	for _, g := range []struct {
		name string
		bw   Bandwidth
	}{{"all", s.All}, {"interior", s.Interior}, {"border", s.Border}} {
		var b strings.Builder
		for i, k := range bandwidthKinds {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %.0f (%.0f)", k, g.bw.SentByKind[k], g.bw.RecvByKind[k])
		}
		fmt.Fprintf(w, "    %-8s (%3d) total %.0f (%.0f): %s\n", g.name, g.bw.Players, g.bw.BytesSentPerSec.Avg, g.bw.BytesRecvPerSec.Avg, b.String())
	}
}
