//go:build !race

package guard

const slowdown = 1
