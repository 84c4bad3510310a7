//go:build race

package store

// raceDetector tells the tests that only measure (sizes, not concurrency)
// that the race detector would make them ten times slower.
const raceDetector = true
