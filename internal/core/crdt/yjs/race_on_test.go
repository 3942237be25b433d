//go:build race

package yjs

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = true
