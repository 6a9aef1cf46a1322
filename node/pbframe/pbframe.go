// Package pbframe reads and writes the length-prefixed frames that every
// overworld stream protocol speaks: a frame is its body's length as a
// minimally encoded unsigned varint, then the body, usually one protobuf
// message (the framing of protodelim and of libp2p's own protocols).
//
// Each protocol keeps its own size limits; this package enforces them the
// same way everywhere. A reader checks the announced length against the
// limit before it allocates anything, and then grows its buffer with the
// bytes that actually arrive, never with what the peer announced: a peer
// that announces a frame of the limit and sends nothing costs the reader a
// small first chunk, not the limit. Length prefixes must be minimal, so a
// frame has exactly one encoding.
//
// Data flow: a writer marshals (WriteMessage) or takes raw bytes (Write,
// Append) and writes prefix and body in one Write call; a reader takes the
// prefix and the body (Read, ReadMessage) from a buffered stream, or cuts
// one frame off the front of a byte slice (Cut).
package pbframe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/proto"
)

// ErrTooLarge marks a frame whose length is over its limit, whether
// announced by a peer or about to be written.
var ErrTooLarge = errors.New("frame too large")

// ErrBadPrefix marks a length prefix that is not a minimal uvarint of at
// most 64 bits.
var ErrBadPrefix = errors.New("malformed frame length")

// Reader is what a frame reader needs: byte-wise reads for the prefix and
// block reads for the body (a *bufio.Reader or a *bytes.Reader).
type Reader interface {
	io.Reader
	io.ByteReader
}

// firstChunk is the most a reader allocates for a frame body before any of
// it has arrived; after that the buffer at most doubles with what arrived.
const firstChunk = 4 << 10

// Read reads one frame of at most limit body bytes from r and returns its
// body. An end of stream before the first prefix byte comes back as io.EOF
// (wrapped): the peer sent no further frame; one within a frame as
// io.ErrUnexpectedEOF.
func Read(r Reader, limit int) ([]byte, error) {
	n, err := readLength(r)
	if err != nil {
		return nil, fmt.Errorf("read frame length: %w", err)
	}
	if n > uint64(max(limit, 0)) {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, n, limit)
	}
	size := int(n)
	body := make([]byte, 0, min(size, firstChunk))
	for len(body) < size {
		if len(body) == cap(body) {
			body = slices.Grow(body, min(size-len(body), cap(body)))
		}
		k, err := io.ReadFull(r, body[len(body):min(cap(body), size)])
		body = body[:len(body)+k]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("read frame body: %d of %d bytes: %w", len(body), size, err)
		}
	}
	return body, nil
}

// readLength reads a minimal uvarint length prefix.
func readLength(r io.ByteReader) (uint64, error) {
	var n uint64
	for i := 0; i < binary.MaxVarintLen64; i++ {
		b, err := r.ReadByte()
		if err != nil {
			if i > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		if i == binary.MaxVarintLen64-1 && b > 1 {
			return 0, fmt.Errorf("%w: over 64 bits", ErrBadPrefix)
		}
		n |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			if b == 0 && i > 0 {
				return 0, fmt.Errorf("%w: not minimally encoded", ErrBadPrefix)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: over 64 bits", ErrBadPrefix)
}

// ReadMessage reads one frame of at most limit body bytes from r and
// unmarshals it into m.
func ReadMessage(r Reader, limit int, m proto.Message) error {
	body, err := Read(r, limit)
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(body, m); err != nil {
		return fmt.Errorf("decode %T: %w", m, err)
	}
	return nil
}

// Cut takes one frame of at most limit body bytes off the front of b and
// returns its body and what follows it. The body aliases b.
func Cut(b []byte, limit int) (body, rest []byte, err error) {
	n, k := binary.Uvarint(b)
	switch {
	case k == 0:
		return nil, nil, fmt.Errorf("%w: %d bytes end inside it", ErrBadPrefix, len(b))
	case k < 0:
		return nil, nil, fmt.Errorf("%w: over 64 bits", ErrBadPrefix)
	case k != uvarintLen(n):
		return nil, nil, fmt.Errorf("%w: not minimally encoded", ErrBadPrefix)
	case n > uint64(max(limit, 0)):
		return nil, nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, n, limit)
	case n > uint64(len(b)-k):
		return nil, nil, fmt.Errorf("frame of %d bytes: %d follow the length: %w", n, len(b)-k, io.ErrUnexpectedEOF)
	}
	return b[k : k+int(n)], b[k+int(n):], nil
}

// uvarintLen is the length of n's minimal uvarint encoding.
func uvarintLen(n uint64) int {
	k := 1
	for n >= 0x80 {
		n >>= 7
		k++
	}
	return k
}

// Append appends a frame carrying body to b.
func Append(b, body []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(body)))
	return append(b, body...)
}

// AppendMessage marshals m and appends it to b as a frame, refusing a body
// over limit bytes.
func AppendMessage(b []byte, m proto.Message, limit int) ([]byte, error) {
	body, err := proto.Marshal(m)
	if err != nil {
		return b, fmt.Errorf("encode %T: %w", m, err)
	}
	if len(body) > limit {
		return b, fmt.Errorf("encode %T: %w: %d bytes, limit %d", m, ErrTooLarge, len(body), limit)
	}
	return Append(b, body), nil
}

// Write writes body as one frame, in one call to w (a frame never reaches
// a stream in pieces that another writer could interleave with). It
// refuses a body over limit bytes and returns the bytes written.
func Write(w io.Writer, body []byte, limit int) (int, error) {
	if len(body) > limit {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(body), limit)
	}
	n, err := w.Write(Append(make([]byte, 0, binary.MaxVarintLen64+len(body)), body))
	if err != nil {
		return n, fmt.Errorf("write frame: %w", err)
	}
	return n, nil
}

// WriteMessage marshals m and writes it as one frame of at most limit body
// bytes; it returns the bytes written.
func WriteMessage(w io.Writer, m proto.Message, limit int) (int, error) {
	buf, err := AppendMessage(nil, m, limit)
	if err != nil {
		return 0, err
	}
	n, err := w.Write(buf)
	if err != nil {
		return n, fmt.Errorf("write %T: %w", m, err)
	}
	return n, nil
}
