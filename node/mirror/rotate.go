package mirror

import (
	"crypto/ed25519"
	"time"

	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/duty"
)

// groupMember is the mirror's CRIMP member: a crimp.Member under a fixed
// authority, a duty.Member (CRIMP in duty mode with the rotating arbiter)
// in rotate mode.
type groupMember interface {
	Start() error
	Join() error
	Send([]byte) error
	SendUnreliable([]byte) error
	Close() error
	// crimp runs f with the CRIMP node under the member's lock.
	crimp(f func(*crimp.Node))
	crimpMetrics() *crimp.Metrics
}

type fixedMember struct{ *crimp.Member }

func (m fixedMember) crimp(f func(*crimp.Node))    { m.Inspect(f) }
func (m fixedMember) crimpMetrics() *crimp.Metrics { return m.Metrics() }

type rotateMember struct{ *duty.Member }

func (m rotateMember) crimp(f func(*crimp.Node))    { m.Inspect(func(n *duty.Node) { f(n.CRIMP()) }) }
func (m rotateMember) crimpMetrics() *crimp.Metrics { return m.CRIMPMetrics() }

// holderID is the mirror holding the authority now: the fixed authority,
// or the duty's holder as this mirror's CRIMP member knows it.
func (s *Server) holderID() crimp.MemberID {
	if !s.cfg.Rotate {
		return authorityID
	}
	var h crimp.MemberID
	s.member.crimp(func(n *crimp.Node) { h, _ = n.Holder() })
	return h
}

// isHolder reports whether this mirror holds the authority now.
func (s *Server) isHolder() bool {
	if !s.cfg.Rotate {
		return s.cfg.Authority
	}
	return s.id != 0 && s.holderID() == s.id
}

// signingKey signs this mirror's authority decisions.
func (s *Server) signingKey() ed25519.PrivateKey {
	if s.cfg.Rotate {
		return s.cfg.MemberKey
	}
	return s.cfg.AuthorityKey
}

// keyOf is the key that checks what mirror id signed as the authority: the
// fixed authority's, or the key CRIMP bound to id (nil if unknown).
func (s *Server) keyOf(id crimp.MemberID) ed25519.PublicKey {
	if !s.cfg.Rotate {
		return s.cfg.AuthorityPublicKey
	}
	var k ed25519.PublicKey
	s.member.crimp(func(n *crimp.Node) { k = n.MemberKey(id) })
	return k
}

// Duty reports this mirror's CRIMP ID, the mirror holding the authority
// and its duty epoch (0 under a fixed authority), for status lines.
func (s *Server) Duty() (self, holder crimp.MemberID, epoch uint64) {
	s.mu.Lock()
	self = s.id
	s.mu.Unlock()
	if s.member == nil {
		return self, 0, 0
	}
	s.member.crimp(func(n *crimp.Node) { holder, epoch = n.Holder() })
	if !s.cfg.Rotate {
		holder = authorityID
	}
	return self, holder, epoch
}

// parkedDelivery is a signed release or checkpoint from a mirror not (yet)
// known to hold the duty, or a signed payload from a mirror whose key this
// one does not know yet.
type parkedDelivery struct {
	d  crimp.Delivery
	at time.Time
	// forKey: parked until CRIMP tells this mirror its sender's key (a
	// member that lost the establishment learns it from the holder's next
	// refresh), not until its sender holds the duty.
	forKey bool
}

// maxParked bounds the parked deliveries.
const maxParked = 32

// park keeps d until the duty moves (lock held). What waits longer than
// CRIMP's history, or does not fit, is refused as not the authority's.
func (s *Server) park(d crimp.Delivery, forKey bool) {
	s.expireParked()
	if len(s.parked) >= maxParked {
		s.m.refuse(refusedAuthorityUnsigned)
		return
	}
	s.parked = append(s.parked, parkedDelivery{d: d, at: s.clock.Now(), forKey: forKey})
}

func (s *Server) expireParked() {
	now := s.clock.Now()
	kept := s.parked[:0]
	for _, p := range s.parked {
		if now.Sub(p.at) > s.cfg.CRIMP.History {
			if p.forKey {
				s.m.refuse(refusedUnsigned) // no key ever came to check it with
			} else {
				s.m.refuse(refusedAuthorityUnsigned)
			}
			continue
		}
		kept = append(kept, p)
	}
	s.parked = kept
}

// unpark checks the parked deliveries again after the duty moved (lock
// held): their sender may hold it now.
func (s *Server) unpark() {
	s.expireParked()
	ps := s.parked
	s.parked = nil
	holder := s.holderID()
	for _, p := range ps {
		if p.forKey && s.keyOf(p.d.Source) != nil || !p.forKey && p.d.Source == holder {
			s.deliverPeer(p.d)
		} else {
			s.parked = append(s.parked, p)
		}
	}
}
