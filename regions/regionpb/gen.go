// Package regionpb holds the wire messages of the region protocol.
package regionpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative region.proto
