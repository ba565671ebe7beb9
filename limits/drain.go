package limits

import (
	"context"
	"sync"
	"time"
)

// drainer hands the items queued to write, in order, in batches of at
// most batch, on a goroutine that runs only while items wait: the first
// add to find it idle starts it, and it ends when the queue is empty.
//
// With a hold, a batch is written once its first item has waited hold,
// or at once when batch items wait, when an item added with now (or
// before one) waits, or while [drainer.flush] or [drainer.wait] waits:
// items that come meanwhile share its write.
type drainer[T any] struct {
	write func([]T)
	batch int           // most items a write takes
	limit int           // most items queued; 0: no bound
	hold  time.Duration // how long the first item waits for company; 0: none

	mu       sync.Mutex
	queue    []T
	first    time.Time     // when the queue's first item came (with a hold)
	added    uint64        // items ever queued
	written  uint64        // items ever written
	due      uint64        // the items up to this count are written without holding
	running  bool          // the goroutine runs
	hurry    int           // callers in wait: write without holding
	wake     chan struct{} // (cap 1) ends a hold early
	progress chan struct{} // closed (and replaced) after each write, and when the goroutine ends
}

// add queues item; false when limit items wait already. With now, it and
// every item before it are written without holding them.
func (q *drainer[T]) add(item T, now bool) bool {
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
	if now {
		q.hurryTo(q.added)
	}
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
			q.signal()
			q.mu.Unlock()
			return
		}
		if left := q.hold - time.Since(q.first); left > 0 && q.holding(n) {
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
		q.signal()
		q.mu.Unlock()
	}
}

// holding reports whether the next batch of n items may wait for
// company; q.mu is held.
func (q *drainer[T]) holding(n int) bool {
	return q.hold > 0 && n < q.batch && q.hurry == 0 && q.written >= q.due
}

// hurryTo makes the items up to count due now; q.mu is held.
func (q *drainer[T]) hurryTo(count uint64) {
	q.due = max(q.due, count)
	select {
	case q.wakeChan() <- struct{}{}:
	default:
	}
}

// wakeChan is the channel that ends a hold; q.mu is held.
func (q *drainer[T]) wakeChan() chan struct{} {
	if q.wake == nil {
		q.wake = make(chan struct{}, 1)
	}
	return q.wake
}

// signal tells the waiters that something was written or the goroutine
// ended; q.mu is held.
func (q *drainer[T]) signal() {
	if q.progress != nil {
		close(q.progress)
		q.progress = nil
	}
}

// changed is closed at the next signal; q.mu is held.
func (q *drainer[T]) changed() <-chan struct{} {
	if q.progress == nil {
		q.progress = make(chan struct{})
	}
	return q.progress
}

// wait waits until the queue is empty and its goroutine has ended,
// writing what waits without holding it. Items may be added meanwhile,
// and after.
func (q *drainer[T]) wait() {
	q.mu.Lock()
	q.hurry++
	q.hurryTo(q.added)
	for q.running {
		ch := q.changed()
		q.mu.Unlock()
		<-ch
		q.mu.Lock()
	}
	q.hurry--
	q.mu.Unlock()
}

// flush writes the items queued so far without holding them, and waits
// until they are written or ctx ends; items added meanwhile are not
// waited for.
func (q *drainer[T]) flush(ctx context.Context) error {
	q.mu.Lock()
	target := q.added
	q.hurryTo(target)
	for q.written < target {
		ch := q.changed()
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		q.mu.Lock()
	}
	q.mu.Unlock()
	return nil
}
