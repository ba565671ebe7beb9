package limits

import "sync"

// drainer hands the items queued to write, in order, in batches of at
// most batch, on a goroutine that runs only while items wait: the first
// add to find it idle starts it, and it ends when the queue is empty.
type drainer[T any] struct {
	write func([]T)
	batch int // most items a write takes
	limit int // most items queued; 0: no bound

	mu      sync.Mutex
	queue   []T
	running bool
	idle    sync.Cond // on mu: broadcast when the goroutine ends
}

// add queues item; false when limit items wait already.
func (q *drainer[T]) add(item T) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.limit > 0 && len(q.queue) >= q.limit {
		return false
	}
	q.queue = append(q.queue, item)
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
			q.idle.Broadcast()
			q.mu.Unlock()
			return
		}
		batch := q.queue[:n:n]
		q.queue = q.queue[n:]
		if len(q.queue) == 0 {
			q.queue = nil // let the backing array go
		}
		q.mu.Unlock()
		q.write(batch)
	}
}

// wait waits until the queue is empty and its goroutine has ended. Items
// may be added meanwhile, and after.
func (q *drainer[T]) wait() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.idle.L == nil {
		q.idle.L = &q.mu
	}
	for q.running {
		q.idle.Wait()
	}
}
