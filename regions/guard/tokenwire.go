package guard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/node/pbframe"
)

// TokenProtocol is the stream protocol on which a peer hands its current
// login token to a peer that asks. The asker opens the stream and closes
// its write side without sending anything; the answerer writes one answer
// and closes. An answer is one frame (node/pbframe: the token's length as
// a uvarint, then the token's bytes); length zero means "I have no token".
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
	return pbframe.Append(b, tok), nil
}

// DecodeTokenAnswer parses one complete answer; it returns the token
// (empty when the peer has none).
func DecodeTokenAnswer(b []byte) ([]byte, error) {
	if len(b) > MaxTokenAnswerBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrBadAnswer, len(b), MaxTokenAnswerBytes)
	}
	tok, rest, err := pbframe.Cut(b, token.MaxLen)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadAnswer, err)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the token", ErrBadAnswer, len(rest))
	}
	return tok, nil
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
