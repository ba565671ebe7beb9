package limits

import (
	"sync"
	"time"
)

// drainer hands the items queued to write, in order, in batches of at
// most batch, on a goroutine that runs only while items wait: the first
// add to find it idle starts it, and it ends when the queue is empty.
//
// With a hold, a batch is written once its first item has waited hold,
// or at once when batch items wait or [drainer.wait] is waiting: items
// that come meanwhile share its write.
type drainer[T any] struct {
	write func([]T)
	batch int           // most items a write takes
	limit int           // most items queued; 0: no bound
	hold  time.Duration // how long the first item waits for company; 0: none

	mu      sync.Mutex
	queue   []T
	first   time.Time     // when the queue's first item came (with a hold)
	added   uint64        // items ever queued
	written uint64        // items ever written
	running bool          // the goroutine runs
	hurry   int           // callers in wait or flush: write without holding
	wake    chan struct{} // (cap 1) ends a hold early, for them
	changed sync.Cond     // on mu: broadcast after each write, and when the goroutine ends
}

// add queues item; false when limit items wait already.
func (q *drainer[T]) add(item T) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.limit > 0 && len(q.queue) >= q.limit {
		return false
	}
	if len(q.queue) == 0 && q.hold > 0 {
		q.first = time.Now()
	}
	q.queue = append(q.queue, item)
	q.added++
	if !q.running {
		q.running = true
		go q.drain()
	}
	return true
}

// drain writes batches until the queue is empty.
func (q *drainer[T]) drain() {
	for {
		q.mu.Lock()
		n := min(len(q.queue), q.batch)
		if n == 0 {
			q.running = false
			q.changed.Broadcast()
			q.mu.Unlock()
			return
		}
		if left := q.hold - time.Since(q.first); q.hold > 0 && left > 0 && n < q.batch && q.hurry == 0 {
			wake := q.wakeChan()
			q.mu.Unlock()
			t := time.NewTimer(left)
			select {
			case <-t.C:
			case <-wake:
				t.Stop()
			}
			continue
		}
		batch := q.queue[:n:n]
		q.queue = q.queue[n:]
		if len(q.queue) == 0 {
			q.queue = nil // let the backing array go
		} else {
			q.first = time.Now() // the rest came before: they wait at most one more hold
		}
		q.mu.Unlock()
		q.write(batch)
		q.mu.Lock()
		q.written += uint64(n)
		q.changed.Broadcast()
		q.mu.Unlock()
	}
}

// wakeChan is the channel that ends a hold; q.mu is held.
func (q *drainer[T]) wakeChan() chan struct{} {
	if q.wake == nil {
		q.wake = make(chan struct{}, 1)
	}
	return q.wake
}

// wait waits until the queue is empty and its goroutine has ended,
// writing what waits without holding it. Items may be added meanwhile,
// and after.
func (q *drainer[T]) wait() {
	q.mu.Lock()
	defer q.mu.Unlock()
	defer q.hurried()()
	for q.running {
		q.changed.Wait()
	}
}

// flush writes the items queued so far without holding them, and waits
// until they are written; items added meanwhile are not waited for.
func (q *drainer[T]) flush() {
	q.mu.Lock()
	defer q.mu.Unlock()
	target := q.added
	if q.written >= target {
		return
	}
	defer q.hurried()()
	for q.written < target {
		q.changed.Wait()
	}
}

// hurried makes the goroutine write without holding until the function
// it returns is called; q.mu is held.
func (q *drainer[T]) hurried() (done func()) {
	if q.changed.L == nil {
		q.changed.L = &q.mu
	}
	q.hurry++
	select {
	case q.wakeChan() <- struct{}{}:
	default:
	}
	return func() { q.hurry-- }
}
