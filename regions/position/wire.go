package position

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/node/pbframe"
	"github.com/overworld-p2p/overworld/regions"
)

//go:generate protoc --go_out=. --go_opt=paths=source_relative position.proto

// DecodeEnvelope decodes a topic message, refusing anything larger than
// MaxBatchBytes, batches with more than MaxBatchUpdates entries and single
// updates larger than MaxUpdateBytes.
func DecodeEnvelope(data []byte) (*Envelope, error) {
	if len(data) > MaxBatchBytes {
		return nil, fmt.Errorf("position message of %d bytes: limit %d", len(data), MaxBatchBytes)
	}
	var env Envelope
	if err := proto.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("decode position message: %w", err)
	}
	switch b := env.Body.(type) {
	case *Envelope_Update:
		if len(data) > MaxUpdateBytes {
			return nil, fmt.Errorf("position update of %d bytes: limit %d", len(data), MaxUpdateBytes)
		}
		if err := checkUpdate(b.Update); err != nil {
			return nil, err
		}
	case *Envelope_Batch:
		if n := len(b.Batch.GetUpdates()); n > MaxBatchUpdates {
			return nil, fmt.Errorf("position batch of %d updates: limit %d", n, MaxBatchUpdates)
		}
		if _, err := peer.IDFromBytes(b.Batch.GetCoordinator()); err != nil {
			return nil, fmt.Errorf("position batch coordinator: %w", err)
		}
		for i, u := range b.Batch.GetUpdates() {
			if err := checkUpdate(u); err != nil {
				return nil, fmt.Errorf("batch entry %d: %w", i, err)
			}
		}
	default:
		return nil, errors.New("position message has no body")
	}
	return &env, nil
}

// checkUpdate checks what can be checked of an update without context.
func checkUpdate(u *Update) error {
	if u == nil {
		return errors.New("position update is empty")
	}
	if len(u.GetPlayer()) > maxPeerIDBytes {
		return fmt.Errorf("position update player ID of %d bytes: limit %d", len(u.GetPlayer()), maxPeerIDBytes)
	}
	if _, err := peer.IDFromBytes(u.GetPlayer()); err != nil {
		return fmt.Errorf("position update player: %w", err)
	}
	if u.GetSeq() == 0 {
		return errors.New("position update sequence 0: sequences start at 1")
	}
	return nil
}

func coordOf(x, y int32) regions.Coord { return regions.Coord{X: int(x), Y: int(y)} }

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n *atomic.Uint64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(uint64(n))
	return n, err
}

// decodeStreamMessage reads and checks one player -> coordinator message.
func decodeStreamMessage(r *bufio.Reader) (*StreamMessage, error) {
	var m StreamMessage
	if err := pbframe.ReadMessage(r, maxStreamMessageBytes, &m); err != nil {
		return nil, err
	}
	switch b := m.Body.(type) {
	case *StreamMessage_Join:
	case *StreamMessage_Update:
		if err := checkUpdate(b.Update); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("stream message has no body")
	}
	return &m, nil
}

// decodeMembers reads and checks a rendezvous answer.
func decodeMembers(r *bufio.Reader) (*Members, error) {
	var m Members
	if err := pbframe.ReadMessage(r, maxMembersBytes, &m); err != nil {
		return nil, err
	}
	if len(m.GetMembers()) > MaxMembers {
		return nil, fmt.Errorf("member list of %d: limit %d", len(m.GetMembers()), MaxMembers)
	}
	for i, mem := range m.GetMembers() {
		if _, err := peer.IDFromBytes(mem.GetId()); err != nil {
			return nil, fmt.Errorf("member %d: %w", i, err)
		}
		if len(mem.GetAddrs()) > 16 {
			return nil, fmt.Errorf("member %d has %d addresses: limit 16", i, len(mem.GetAddrs()))
		}
	}
	return &m, nil
}
