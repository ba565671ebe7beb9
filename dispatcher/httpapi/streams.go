package httpapi

import (
	"fmt"
	"sync"
)

// streamSlots counts the event streams open, in the process and per API
// key, against [Config.MaxStreams] and [Config.MaxStreamsPerKey]. Each
// stream holds a JetStream consumer and a subscription on the server, so
// their number is bounded: a client opening streams in a loop gets 429s,
// not a NATS server that grows until it falls over.
type streamSlots struct {
	max, perKey int

	mu    sync.Mutex
	open  int
	byKey map[string]int // open streams of each key that has one
}

func newStreamSlots(max, perKey int) *streamSlots {
	return &streamSlots{max: max, perKey: perKey, byKey: map[string]int{}}
}

// acquire takes a slot for a stream of key ("" without API keys, where
// only the process's bound applies). It returns the function that frees
// it, to call once, or, when a bound is reached, the message saying which.
func (s *streamSlots) acquire(key string) (release func(), refused string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case key != "" && s.byKey[key] >= s.perKey:
		return nil, fmt.Sprintf("API key %q already has %d event streams open, the most one key may (MaxStreamsPerKey); close one, or try again after Retry-After", key, s.perKey)
	case s.open >= s.max:
		return nil, fmt.Sprintf("this server already has %d event streams open, the most it serves at once (MaxStreams); try again after Retry-After, or on another replica", s.max)
	}
	s.open++
	if key != "" {
		s.byKey[key]++
	}
	return func() { s.release(key) }, ""
}

func (s *streamSlots) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	if key == "" {
		return
	}
	if s.byKey[key]--; s.byKey[key] == 0 {
		delete(s.byKey, key)
	}
}
