package fleettest

import (
	"context"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
)

// UntilCanceled is a tool that runs until its context ends and then
// fails with the context's cause: a long call to cancel.
type UntilCanceled struct {
	windlass.Tool
	started  chan struct{}
	canceled chan error
}

// NewUntilCanceled builds the tool, named name, for up to 16 calls.
func NewUntilCanceled(name string) *UntilCanceled {
	u := &UntilCanceled{started: make(chan struct{}, 16), canceled: make(chan error, 16)}
	u.Tool = windlass.MustFunc(name, func(ctx context.Context, _ struct{}) (string, error) {
		u.started <- struct{}{}
		<-ctx.Done()
		u.canceled <- context.Cause(ctx)
		return "", context.Cause(ctx)
	})
	return u
}

// Started waits until a call of the tool runs, failing t after 30 s.
func (u *UntilCanceled) Started(t testing.TB) {
	t.Helper()
	select {
	case <-u.started:
	case <-time.After(30 * time.Second):
		t.Fatal("fleettest: the call did not start")
	}
}

// Canceled is what a call's context ended with, waiting for it for up
// to 30 s (failing t past them).
func (u *UntilCanceled) Canceled(t testing.TB) error {
	t.Helper()
	select {
	case cause := <-u.canceled:
		return cause
	case <-time.After(30 * time.Second):
		t.Fatal("fleettest: the tool's context was not canceled")
		return nil
	}
}
