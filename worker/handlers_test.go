package worker

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestHandlersReuseTheLastIdleGoroutine gives steps one after another:
// each finds the goroutine the previous one left idle, so the pool never
// grows past one.
func TestHandlersReuseTheLastIdleGoroutine(t *testing.T) {
	h := newHandlers(4)
	defer h.stop()
	var ran atomic.Int32
	for range 50 {
		done := make(chan struct{})
		if !h.give(func() { ran.Add(1); close(done) }) {
			t.Fatal("give refused a step with the pool empty")
		}
		<-done
		waitIdle(t, h, 1)
	}
	if ran.Load() != 50 {
		t.Errorf("ran %d steps, want 50", ran.Load())
	}
	if n := startedOf(h); n != 1 {
		t.Errorf("pool started %d goroutines for steps one at a time, want 1", n)
	}
}

// TestHandlersFullPool blocks every pooled goroutine: give then refuses,
// hereOrPool runs the step on the caller's goroutine before returning, and
// goOrPool on a goroutine of its own.
func TestHandlersFullPool(t *testing.T) {
	h := newHandlers(2)
	defer h.stop()
	block := make(chan struct{})
	for range 2 {
		if !h.give(func() { <-block }) {
			t.Fatal("give refused a step while the pool was not full")
		}
	}
	if h.give(func() {}) {
		t.Fatal("give took a step with every pooled goroutine busy")
	}
	here := false
	h.hereOrPool(func() { here = true })
	if !here {
		t.Error("hereOrPool with the pool busy returned before running the step")
	}
	ran := make(chan struct{})
	h.goOrPool(func() { <-block; close(ran) }) // would deadlock if run here
	close(block)
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("goOrPool's step never ran")
	}
	waitIdle(t, h, 2)
	if n := startedOf(h); n != 2 {
		t.Errorf("pool started %d goroutines, want its bound 2", n)
	}
}

// TestHandlersStopRunsWhatWasGiven stops the pool right after giving it a
// step: the step still runs, and stop returns once it has. (The narrower
// case loop guards against, a step given between the goroutine going idle
// and its select, is not forced here.)
func TestHandlersStopRunsWhatWasGiven(t *testing.T) {
	for range 200 {
		h := newHandlers(1)
		warm(t, h)
		var ran atomic.Bool
		if !h.give(func() { ran.Store(true) }) {
			t.Fatal("give refused a step with a goroutine idle")
		}
		h.stop()
		if !ran.Load() {
			t.Fatal("a step given before stop did not run")
		}
	}
}

// TestHandlersAfterStop: a step given after stop is not lost; it runs
// outside the pool.
func TestHandlersAfterStop(t *testing.T) {
	h := newHandlers(2)
	warm(t, h)
	h.stop()
	if h.give(func() {}) {
		t.Fatal("give took a step after stop")
	}
	ran := false
	h.hereOrPool(func() { ran = true })
	if !ran {
		t.Error("a step given after stop did not run")
	}
}

// warm starts one pooled goroutine with a step and waits until it is idle.
func warm(t *testing.T, h *handlers) {
	t.Helper()
	done := make(chan struct{})
	if !h.give(func() { close(done) }) {
		t.Fatal("give refused a step with the pool empty")
	}
	<-done
	waitIdle(t, h, 1)
}

// waitIdle waits until n pooled goroutines are idle.
func waitIdle(t *testing.T, h *handlers, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		h.mu.Lock()
		idle := len(h.idle)
		h.mu.Unlock()
		if idle == n {
			return
		}
	}
	t.Fatalf("%d pooled goroutines never became idle", n)
}

func startedOf(h *handlers) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.started
}
