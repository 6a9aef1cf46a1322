package topic

import (
	"context"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Validator decides one message of a topic from its author (whose
// signature the carrier checked) and its data. value is handed to the
// deliver function with an accepted message (the decoded form, so that it
// is decoded once).
type Validator func(author peer.ID, data []byte) (verdict pubsub.ValidationResult, value any)

// Channel is one joined topic, whatever carries it: gossipsub (a
// Membership behind an adapter) or a test network. It is what the region
// service needs of a topic.
type Channel interface {
	Name() string
	// ListPeers lists the peers this peer knows subscribed to the topic.
	ListPeers() []peer.ID
	// Publish sends data to the topic's subscribers; the local validator
	// sees it first.
	Publish(ctx context.Context, data []byte) error
	// Subscribe delivers each accepted message's author and validator
	// value, one at a time, until ctx ends or Unsubscribe or Leave.
	Subscribe(ctx context.Context, buffer int, deliver func(author peer.ID, value any)) error
	Subscribed() bool
	// Unsubscribe stops delivering, staying joined; it does not wait.
	Unsubscribe()
	// Leave unsubscribes, waits for deliveries to end and leaves.
	Leave() error
}
