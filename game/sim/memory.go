package sim

import (
	"runtime"
)

// Memory is where the process's memory was at the end of the measured
// window, after a garbage collection: what each simulated player costs.
// The whole process is counted (the in-memory network and what players
// who left still hold included), divided by the players online.
type Memory struct {
	PlayersOnline int `json:"players_online"`
	// HeapLiveMB is the heap in use after a collection; StacksMB the
	// goroutine stacks.
	HeapLiveMB float64 `json:"heap_live_mb"`
	StacksMB   float64 `json:"stacks_mb"`
	Goroutines int     `json:"goroutines"`

	HeapPerPlayerMB     float64 `json:"heap_per_player_mb"`
	StacksPerPlayerMB   float64 `json:"stacks_per_player_mb"`
	GoroutinesPerPlayer float64 `json:"goroutines_per_player"`
	// PeersPerPlayer and StreamsPerPlayer are each online player's
	// connected peers and open streams; GoroutinesPerPeer is all
	// goroutines over all connected peers.
	PeersPerPlayer    Dist    `json:"peers_per_player"`
	StreamsPerPlayer  Dist    `json:"streams_per_player"`
	GoroutinesPerPeer float64 `json:"goroutines_per_connected_peer"`
}

func measureMemory(online []*player) Memory {
	m := Memory{PlayersOnline: len(online)}
	var peers, streams []float64
	var totalPeers float64
	for _, p := range online {
		n := len(p.host.Network().Peers())
		totalPeers += float64(n)
		peers = append(peers, float64(n))
		streams = append(streams, float64(p.host.OpenStreams()))
	}
	m.PeersPerPlayer, m.StreamsPerPlayer = summarise(peers), summarise(streams)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.HeapLiveMB = float64(ms.HeapAlloc) / (1 << 20)
	m.StacksMB = float64(ms.StackInuse) / (1 << 20)
	m.Goroutines = runtime.NumGoroutine()
	if m.PlayersOnline > 0 {
		n := float64(m.PlayersOnline)
		m.HeapPerPlayerMB, m.StacksPerPlayerMB, m.GoroutinesPerPlayer = m.HeapLiveMB/n, m.StacksMB/n, float64(m.Goroutines)/n
	}
	if totalPeers > 0 {
		m.GoroutinesPerPeer = float64(m.Goroutines) / totalPeers
	}
	return m
}
