package worker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/windlass-dev/windlass"
)

// logPanic logs the panic a call's tool ended in, with its value and stack,
// through the worker's logger and with the call's context (its trace): the
// root package recovers a panic into the result and logs nothing itself.
func logPanic(ctx context.Context, log *slog.Logger, r windlass.ToolResult) {
	if p := r.Panic(); p != nil {
		log.ErrorContext(ctx, "worker: tool panicked", "panic", fmt.Sprint(p.Value), "stack", string(p.Stack))
	}
}
