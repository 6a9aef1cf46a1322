// Package arbiterpb holds the wire messages of the rotating arbiter
// (game/arbiter). Decode and validate them with arbiter.Decode, which bounds
// their sizes before anything reaches the protocol.
package arbiterpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative arbiter.proto
