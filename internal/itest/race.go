//go:build race

package itest

// raceEnabled: the test binary runs under the race detector, so the daemon
// it builds does too.
const raceEnabled = true
