package worker

import "sync"

// handlers is a pool of long-lived goroutines that take delivered calls in
// (decode, check, start the tool) and settle finished ones (encode and
// store the result, ack). Both steps run deep code (schema validation,
// JSON encoding, the NATS client) that grows a fresh goroutine's 2 KB stack
// several times over, copying it at each step: a quarter of the worker's
// CPU at one call in flight in the profile that led here (BENCHMARKS.md). A
// pooled goroutine keeps its grown stack from call to call, until a garbage
// collection shrinks it while it idles.
//
// The idle goroutines form a stack: the one that finished last takes the
// next step, so a few busy goroutines stay warm while the rest idle. When
// all are busy and the pool is full, the caller decides where the step runs
// (see goOrPool and hereOrPool). A tool itself never runs on the pool: a
// sleeping tool must hold only its own small goroutine (the memory target).
type handlers struct {
	max  int
	quit chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	idle    []chan func() // the idle goroutines' inboxes, most recently idle last
	started int
	stopped bool // by stop: give refuses, and the step runs outside the pool
}

// maxHandlers bounds a worker's pool: enough for the calls being settled
// at once (each waits for its result's stored acknowledgement) at a few
// thousand calls a second; a step that finds every one busy runs outside
// the pool, as before.
const maxHandlers = 64

func newHandlers(max int) *handlers {
	return &handlers{max: max, quit: make(chan struct{})}
}

// give hands f to an idle pooled goroutine, or to a new one while the pool
// is not full, and reports whether it did.
func (h *handlers) give(f func()) bool {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return false
	}
	if n := len(h.idle); n > 0 {
		inbox := h.idle[n-1]
		h.idle = h.idle[:n-1]
		h.mu.Unlock()
		inbox <- f // buffered: its goroutine is idle, the slot is free
		return true
	}
	if h.started == h.max {
		h.mu.Unlock()
		return false
	}
	h.started++
	h.mu.Unlock()
	h.wg.Go(func() { h.loop(f) })
	return true
}

// goOrPool runs f on the pool, or on a goroutine of its own when the pool
// is busy: the caller must not wait for it.
func (h *handlers) goOrPool(f func()) {
	if !h.give(f) {
		go f()
	}
}

// hereOrPool runs f on the pool, or on the calling goroutine when the pool
// is busy.
func (h *handlers) hereOrPool(f func()) {
	if !h.give(f) {
		f()
	}
}

func (h *handlers) loop(f func()) {
	inbox := make(chan func(), 1)
	for {
		f()
		h.mu.Lock()
		h.idle = append(h.idle, inbox)
		h.mu.Unlock()
		select {
		case f = <-inbox:
		case <-h.quit:
			select {
			case f = <-inbox: // given just before stop: run it first
			default:
				return
			}
		}
	}
}

// stop ends the pool's goroutines once they are idle. The worker stops it
// once every call is settled; a step given later all the same runs outside
// the pool (see goOrPool and hereOrPool) rather than being lost.
func (h *handlers) stop() {
	h.mu.Lock()
	h.stopped, h.idle = true, nil
	h.mu.Unlock()
	close(h.quit)
	h.wg.Wait()
}
