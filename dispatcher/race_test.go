//go:build race

package dispatcher

// raceEnabled: the race detector changes what escapes to the heap, so
// allocation counts are compared only without it.
const raceEnabled = true
