package dispatcher

// Changed returns a channel closed at the next change of the fleet's tools
// as this dispatcher sees them: a tool or a spec added or changed, or a
// tool's set of live workers changed (a worker started, withdrew or its
// lease lapsed). Call it again after each change for the next one; read
// [Dispatcher.Catalog] to see what changed. It is the registry view's
// change signal; after [Dispatcher.Close] no further change is signalled.
func (d *Dispatcher) Changed() <-chan struct{} { return d.view.Changed() }
