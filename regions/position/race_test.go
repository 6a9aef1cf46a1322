//go:build race

package position_test

// raceEnabled: the race detector slows every goroutine several times over,
// so the multi-peer tests use fewer peers (two per region) to keep the
// same checks inside their deadlines on a busy machine.
const raceEnabled = true
