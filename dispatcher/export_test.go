package dispatcher

import "context"

// Prepare exposes prepare (look up, validate, encode; no I/O) to the
// black-box benchmarks of package dispatcher_test.
func (d *Dispatcher) Prepare(ctx context.Context, name string, args any, opts ...CallOption) error {
	_, err := d.prepare(ctx, name, args, opts)
	return err
}
