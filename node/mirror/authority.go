package mirror

import (
	"crypto/ed25519"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// The authority's decisions at the mirror layer: releasing a dropped
// mirror's players, the reference hash a mismatching mirror resyncs to,
// and the state it resyncs (or starts) from. CRIMP signs its own (admit,
// deny, drop) with the same key; these are signed here, because CRIMP's
// data packets carry the sender's own claim of who sent them, so without a
// signature any member could release another mirror's players, or make
// every mirror resync to a state of its choosing.
//
// In rotate mode every mirror has a key of its own, which CRIMP bound to
// its member ID, and signs its commands and moves with it as well
// (outgoing): CRIMP does not authenticate a data packet's sender, so
// otherwise any member (in LAN mode, any player) could send inputs in
// another mirror's name, for that mirror's players. What a signature
// means is the message inside: only the holder's releases, decisions,
// consistent events and checkpoints count as the authority's.

// authorityContext separates these signatures from any other use of the
// key (CRIMP signs its packets' bytes, which start with a version byte).
const authorityContext = "overworld/mirror-authority/1"

// errBadAuthoritySignature is a Signed message whose signature does not
// verify with the authority's public key.
var errBadAuthoritySignature = errors.New("signature does not verify with the authority's key")

func authorityMessage(body []byte) []byte {
	b := make([]byte, 0, len(authorityContext)+1+len(body))
	b = append(b, authorityContext...)
	b = append(b, 0)
	return append(b, body...)
}

// signAuthority wraps body in a Signed message signed with key.
func signAuthority(key ed25519.PrivateKey, body []byte) *mirrorpb.Signed {
	return &mirrorpb.Signed{Message: body, Signature: ed25519.Sign(key, authorityMessage(body))}
}

// openAuthority returns the message a Signed carries if the authority
// signed it.
func openAuthority(pub ed25519.PublicKey, s *mirrorpb.Signed) ([]byte, error) {
	if s == nil || len(s.Signature) != ed25519.SignatureSize {
		return nil, fmt.Errorf("signed message without a %d-byte signature", ed25519.SignatureSize)
	}
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, authorityMessage(s.Message), s.Signature) {
		return nil, errBadAuthoritySignature
	}
	return s.Message, nil
}

// outgoing is a command or moves message as this mirror multicasts it:
// signed with its own key in rotate mode, plain under a fixed authority
// (whose mirrors are the operator's, with no keys of their own).
func (s *Server) outgoing(m *mirrorpb.PeerMessage) []byte {
	if s.cfg.Rotate {
		return signedPeerMessage(s.signingKey(), m)
	}
	return encode(m)
}

// signedPeerMessage is m as the authority sends it: signed.
func signedPeerMessage(key ed25519.PrivateKey, m *mirrorpb.PeerMessage) []byte {
	return encode(&mirrorpb.PeerMessage{Body: &mirrorpb.PeerMessage_Signed{Signed: signAuthority(key, encode(m))}})
}

// signedTransfer is a state transfer as the authority serves it.
func signedTransfer(key ed25519.PrivateKey, transfer []byte) ([]byte, error) {
	return proto.Marshal(signAuthority(key, transfer))
}

// openTransfer checks the authority's signature on a served state
// transfer and returns the transfer inside.
func openTransfer(pub ed25519.PublicKey, b []byte) ([]byte, error) {
	var s mirrorpb.Signed
	if err := proto.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decode signed transfer: %w", err)
	}
	body, err := openAuthority(pub, &s)
	if err != nil {
		return nil, fmt.Errorf("state transfer: %w", err)
	}
	return body, nil
}
