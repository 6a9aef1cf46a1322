// Package mirrorpb holds the wire messages of mirror mode: what a client
// and its ingress mirror say over the WebSocket (client.proto), and what
// mirrors say to each other inside CRIMP payloads and the state transfer
// (peer.proto). Package mirror bounds and validates every field before it
// acts on one.
package mirrorpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative client.proto
//go:generate protoc --go_out=. --go_opt=paths=source_relative peer.proto
