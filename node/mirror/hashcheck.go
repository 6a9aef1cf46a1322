package mirror

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/overworld-p2p/overworld/game/tss"
	"github.com/overworld-p2p/overworld/node/crimp"
)

// The hash exchange [MIRROR_MODE.md §2.4]: every second of the last
// state's ticks each mirror multicasts (tick, hash of its last state).
// Every mirror compares the hashes it hears with its own for the same
// tick. A difference is counted, the state is dumped to the data dir (each
// side dumps its own: between them, both states of the mismatch are on
// disk), and a mirror whose hash differs from the authority's fetches the
// authority's state (the authority's state is the reference, as the
// paper's überserver's is).

// Bounds of what the exchange remembers.
const (
	keepCheckpoints = 64 // own hashes and each peer's, by tick
	keepClones      = 4  // own states at the latest checkpoint ticks, for dumps
)

type checkpoints struct {
	own          map[uint64][32]byte
	clones       map[uint64]*State
	peers        map[crimp.MemberID]map[uint64][32]byte
	compared     map[compareKey]bool
	dumped       map[uint64]bool
	lastCompared uint64
}

type compareKey struct {
	peer crimp.MemberID
	tick uint64
	hash [32]byte
}

func (c *checkpoints) init() {
	*c = checkpoints{
		own: map[uint64][32]byte{}, clones: map[uint64]*State{}, peers: map[crimp.MemberID]map[uint64][32]byte{},
		compared: map[compareKey]bool{}, dumped: map[uint64]bool{},
	}
}

func (c *checkpoints) forget(peer crimp.MemberID) { delete(c.peers, peer) }

func (c *checkpoints) ownCopy() map[uint64][32]byte {
	out := make(map[uint64][32]byte, len(c.own))
	for k, v := range c.own {
		out[k] = v
	}
	return out
}

// keep stores a copy of the last state at a checkpoint tick.
func (c *checkpoints) keep(t uint64, last *State) {
	if _, ok := c.clones[t]; ok {
		return
	}
	c.clones[t] = last.Clone()
	trim(c.clones, keepClones)
	trim(c.dumped, keepCheckpoints)
}

// trim keeps the n highest ticks of m.
func trim[V any](m map[uint64]V, n int) {
	if len(m) <= n {
		return
	}
	ticks := make([]uint64, 0, len(m))
	for t := range m {
		ticks = append(ticks, t)
	}
	slices.Sort(ticks)
	for _, t := range ticks[:len(ticks)-n] {
		delete(m, t)
	}
}

// ownCheckpoint records and multicasts a checkpoint of the last state and
// compares it with what the others said of that tick.
func (s *Server) ownCheckpoint(cp tss.Checkpoint) {
	s.cps.own[cp.Tick] = cp.Hash
	trim(s.cps.own, keepCheckpoints)
	for _, k := range s.compareKeys() {
		if hs, ok := s.cps.peers[k]; ok {
			if h, ok := hs[cp.Tick]; ok {
				s.compare(k, cp.Tick, cp.Hash, h)
			}
		}
	}
	switch {
	case s.isHolder():
		if len(s.unconfirmed) > 0 {
			s.confirmLeaveSaves(cp.Tick) // the duty came to us: ours is the reference now
		}
		m := checkpointMessage(cp)
		if s.cfg.Rotate {
			m.GetCheckpoint().StateAddr = s.ownStateAddr
		}
		s.send(signedPeerMessage(s.signingKey(), m))
	case s.joined && s.id != 0:
		s.send(encode(checkpointMessage(cp)))
	}
}

func (s *Server) compareKeys() []crimp.MemberID {
	ids := make([]crimp.MemberID, 0, len(s.cps.peers))
	for id := range s.cps.peers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// peerCheckpoint takes another mirror's checkpoint.
func (s *Server) peerCheckpoint(from crimp.MemberID, cp tss.Checkpoint) {
	hs := s.cps.peers[from]
	if hs == nil {
		if len(s.cps.peers) >= crimp.MaxMembers {
			return
		}
		hs = map[uint64][32]byte{}
		s.cps.peers[from] = hs
	}
	hs[cp.Tick] = cp.Hash
	trim(hs, keepCheckpoints)
	if own, ok := s.cps.own[cp.Tick]; ok {
		s.compare(from, cp.Tick, own, cp.Hash)
	}
}

// compare handles one pair of hashes for a tick (each pair once).
func (s *Server) compare(peer crimp.MemberID, tick uint64, own, theirs [32]byte) {
	key := compareKey{peer, tick, theirs}
	if s.cps.compared[key] {
		return
	}
	s.cps.compared[key] = true
	if len(s.cps.compared) > 4*keepCheckpoints*crimp.MaxMembers {
		clear(s.cps.compared)
	}
	s.cps.lastCompared = max(s.cps.lastCompared, tick)
	if own == theirs {
		s.m.checkpointsAgreed.Add(1)
		if peer == s.holderID() && len(s.unconfirmed) > 0 {
			s.confirmLeaveSaves(tick)
		}
		return
	}
	s.m.checkpointsMismatched.Add(1)
	s.log.Error("state hash mismatch", "tick", tick, "peer", peer,
		"ours", hex.EncodeToString(own[:8]), "theirs", hex.EncodeToString(theirs[:8]))
	s.dump(tick, peer, own, theirs)
	if peer == s.holderID() && !s.isHolder() && !s.resyncing &&
		(s.lastSync.IsZero() || s.clock.Now().Sub(s.lastSync) >= resyncCooldown) {
		s.log.Warn("our last state differs from the authority's: resyncing", "tick", tick)
		if s.cfg.Rotate && s.holderAddr.addr != "" {
			// From the mirror holding the duty now, not the one that
			// admitted us (it may be gone).
			s.stateAddr, s.stateFrom = s.holderAddr.addr, s.holderAddr.id
		}
		s.fetch(true)
	}
}

// dumpInfo is the readable side of a dump.
type dumpInfo struct {
	Tick      uint64   `json:"tick"`
	Mirror    uint32   `json:"mirror"`
	Authority uint32   `json:"authority"`
	Hash      string   `json:"hash"`
	Peer      uint32   `json:"peer"`
	PeerHash  string   `json:"peer_hash"`
	Players   []string `json:"players"`
	Owners    []Owner  `json:"owners"`
	StateFile string   `json:"state_file"`
}

// dump writes this mirror's state of the mismatched tick to the data dir:
// <tick>-mirror<id>.state (MarshalBinary, UnmarshalState reads it back)
// and a .json beside it.
func (s *Server) dump(tick uint64, peer crimp.MemberID, own, theirs [32]byte) {
	if s.cfg.DataDir == "" || s.cps.dumped[tick] {
		return
	}
	st := s.cps.clones[tick]
	if st == nil {
		s.log.Warn("no copy of the mismatched tick's state left to dump", "tick", tick)
		return
	}
	s.cps.dumped[tick] = true
	dir := filepath.Join(s.cfg.DataDir, "mismatches")
	base := fmt.Sprintf("tick%09d-mirror%d", tick, s.id)
	info := dumpInfo{
		Tick: tick, Mirror: uint32(s.id), Authority: s.authority, Hash: hex.EncodeToString(own[:]),
		Peer: uint32(peer), PeerHash: hex.EncodeToString(theirs[:]), Owners: st.Owners(), StateFile: base + ".state",
	}
	for _, p := range st.World().Players() {
		info.Players = append(info.Players, fmt.Sprintf("%s %q at (%d,%d) health %d hunger %d score %d alive %v",
			p.ID, p.Name, p.Pos.X, p.Pos.Y, p.Health, p.Hunger, p.Score, p.Alive))
	}
	s.spawn(func() {
		b, err := st.MarshalBinary()
		if err == nil {
			err = os.MkdirAll(dir, 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, base+".state"), b, 0o644)
		}
		if err == nil {
			var j []byte
			j, err = json.MarshalIndent(info, "", "  ")
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, base+".json"), j, 0o644)
			}
		}
		if err != nil {
			s.log.Error("dumping the mismatched state failed", "tick", tick, "err", err)
			return
		}
		s.m.dumps.Add(1)
		s.log.Warn("dumped the mismatched state", "file", filepath.Join(dir, base+".state"))
	})
}
