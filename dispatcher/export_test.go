package dispatcher

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// Prepare exposes prepare (look up, validate, encode; no I/O) to the
// black-box benchmarks of package dispatcher_test.
func (d *Dispatcher) Prepare(ctx context.Context, name string, args any, opts ...CallOption) error {
	_, err := d.prepare(ctx, name, args, opts)
	return err
}

// WrapJetStream replaces d's JetStream client, for tests that must force a
// fault a real server does not show on demand (a lost acknowledgement).
func WrapJetStream(d *Dispatcher, f func(jetstream.JetStream) jetstream.JetStream) { d.js = f(d.js) }

// WaitingOn reports whether a Wait (or a Watch, which waits) on this
// instance waits for id's result.
func (d *Dispatcher) WaitingOn(id string) bool { _, ok := d.waiters.Load(id); return ok }
