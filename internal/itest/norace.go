//go:build !race

package itest

const raceEnabled = false
