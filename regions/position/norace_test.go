//go:build !race

package position_test

const raceEnabled = false
