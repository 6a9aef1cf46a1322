package guard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
)

// TokenProtocol is the stream protocol on which a peer hands its current
// login token to a peer that asks. The asker opens the stream and closes
// its write side without sending anything; the answerer writes one answer
// and closes. An answer is the token's length as a uvarint followed by the
// token's bytes; length zero means "I have no token".
const TokenProtocol protocol.ID = "/overworld/token/1.0.0"

// MaxTokenAnswerBytes bounds a token answer: the longest token and its
// length prefix.
const MaxTokenAnswerBytes = binary.MaxVarintLen16 + token.MaxLen

// ErrBadAnswer marks a token answer that breaks the framing: a length over
// token.MaxLen, a truncated token or bytes after it.
var ErrBadAnswer = errors.New("malformed token answer")

// AppendTokenAnswer appends the answer carrying tok to b.
func AppendTokenAnswer(b, tok []byte) ([]byte, error) {
	if len(tok) > token.MaxLen {
		return b, fmt.Errorf("token answer: token of %d bytes, limit %d", len(tok), token.MaxLen)
	}
	b = binary.AppendUvarint(b, uint64(len(tok)))
	return append(b, tok...), nil
}

// DecodeTokenAnswer parses one complete answer; it returns the token
// (empty when the peer has none).
func DecodeTokenAnswer(b []byte) ([]byte, error) {
	if len(b) > MaxTokenAnswerBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrBadAnswer, len(b), MaxTokenAnswerBytes)
	}
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, fmt.Errorf("%w: bad length prefix", ErrBadAnswer)
	}
	if k != len(binary.AppendUvarint(nil, n)) {
		return nil, fmt.Errorf("%w: length prefix not minimally encoded", ErrBadAnswer)
	}
	if n > token.MaxLen {
		return nil, fmt.Errorf("%w: token of %d bytes, limit %d", ErrBadAnswer, n, token.MaxLen)
	}
	rest := b[k:]
	if uint64(len(rest)) != n {
		return nil, fmt.Errorf("%w: length says %d bytes, %d follow", ErrBadAnswer, n, len(rest))
	}
	return rest, nil
}

// readTokenAnswer reads an answer up to the answerer's close. I/O errors
// come back unwrapped by ErrBadAnswer: they say nothing about the peer's
// token.
func readTokenAnswer(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxTokenAnswerBytes+1))
	if err != nil {
		return nil, err
	}
	return DecodeTokenAnswer(b)
}
