//go:build !race

package regions

const slowdown = 1
