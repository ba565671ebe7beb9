package gatecond

import (
	"sync"
)

// maxCached bounds the cache: expressions come from registered specs, a
// handful per fleet; past the bound an expression is compiled per use.
const maxCached = 1024

var cache struct {
	sync.Mutex
	m map[string]*Condition
}

// Cached returns the compiled condition of expr, compiling it on first use
// (see [Compile]). A refused expression is not cached.
func Cached(expr string) (*Condition, error) {
	cache.Lock()
	c, ok := cache.m[expr]
	cache.Unlock()
	if ok {
		return c, nil
	}
	c, err := Compile(expr)
	if err != nil {
		return nil, err
	}
	cache.Lock()
	defer cache.Unlock()
	if cache.m == nil {
		cache.m = make(map[string]*Condition)
	}
	if len(cache.m) < maxCached {
		cache.m[expr] = c
	}
	return c, nil
}
