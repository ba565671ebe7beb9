package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/layout"
)

// publishQueued records that the fleet accepted call. It is a plain
// publish the events stream captures: the call path never waits for it.
func (d *Dispatcher) publishQueued(call windlass.ToolCall) {
	e := windlass.Event{CallID: call.ID, Kind: windlass.EventQueued, Tool: call.Name, Time: time.Now(), Deadline: call.Deadline, Origin: d.cfg.ID}
	data, err := json.Marshal(e)
	if err != nil {
		return
	}
	_ = d.cfg.Conn.PublishMsg(&nats.Msg{Subject: layout.EventSubject(call.ID, string(e.Kind)), Data: data,
		Header: nats.Header{layout.HeaderProtocol: []string{protocolVersion}}})
}

// lastEvent reads a call's latest event of one kind.
func (d *Dispatcher) lastEvent(ctx context.Context, callID string, kind windlass.EventKind) (windlass.Event, bool) {
	m, err := d.events.GetLastMsgForSubject(ctx, layout.EventSubject(callID, string(kind)))
	if err != nil {
		return windlass.Event{}, false
	}
	var e windlass.Event
	if json.Unmarshal(m.Data, &e) != nil || e.CallID != callID {
		return windlass.Event{}, false
	}
	return e, true
}

// Watch follows a call's life from any dispatcher instance: the events so
// far (queued, started, progress, retrying), then the live ones, and last a
// finished event carrying the result, after which the sequence ends. It is
// bounded like [Dispatcher.Wait]; when the wait ends without a result, or
// the call id is invalid, the sequence ends with the error.
//
// Progress events are the latest report at each of the worker's
// heartbeats, not every report the tool made.
func (d *Dispatcher) Watch(ctx context.Context, callID string) iter.Seq2[windlass.Event, error] {
	return func(yield func(windlass.Event, error) bool) {
		if err := windlass.ValidateCallID(callID); err != nil {
			yield(windlass.Event{}, fmt.Errorf("dispatcher: watch: %w", err))
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()

		events := make(chan windlass.Event, 64)
		cons, err := d.events.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{layout.EventsOfCall(callID)}})
		if err != nil {
			yield(windlass.Event{}, fmt.Errorf("dispatcher: watch %q: %w", callID, err))
			return
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			var e windlass.Event
			if json.Unmarshal(m.Data(), &e) != nil || e.CallID != callID {
				return
			}
			select {
			case events <- e:
			case <-ctx.Done():
			}
		})
		if err != nil {
			yield(windlass.Event{}, fmt.Errorf("dispatcher: watch %q: %w", callID, err))
			return
		}
		defer func() { cc.Stop(); <-cc.Closed() }()

		type outcome struct {
			r   windlass.ToolResult
			err error
		}
		finished := make(chan outcome, 1)
		go func() {
			r, err := d.Wait(ctx, callID)
			finished <- outcome{r, err}
		}()
		defer func() { cancel(); <-finished }()
		for {
			select {
			case e := <-events:
				if !yield(e, nil) {
					return
				}
			case o := <-finished:
				finished <- o // for the deferred receive
				if o.err != nil {
					yield(windlass.Event{}, o.err)
					return
				}
				// Hand over the events stored before the result first.
				for drained := false; !drained; {
					select {
					case e := <-events:
						if !yield(e, nil) {
							return
						}
					default:
						drained = true
					}
				}
				r := o.r
				yield(windlass.Event{CallID: callID, Kind: windlass.EventFinished, Tool: r.Name, Time: time.Now(), Attempt: r.Attempt, Worker: r.Worker, Result: &r}, nil)
				return
			}
		}
	}
}
