// Package playpb holds the wire messages of the player runtime's protocols:
// the fight stream, the region chat topic and the whisper stream.
package playpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative fight.proto
//go:generate protoc --go_out=. --go_opt=paths=source_relative chat.proto
