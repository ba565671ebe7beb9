package dispatcher

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestNotStoredTellsCertainRefusals: only a failure that certainly stored
// nothing lets a publish say the fleet did not take the call; any other
// leaves the call possibly queued (unconfirmed). The JetStream refusals
// are the server's own (nats-server v2.15, errors.json).
func TestNotStoredTellsCertainRefusals(t *testing.T) {
	t.Parallel()
	api := func(code jetstream.ErrorCode, desc string) error {
		return fmt.Errorf("publish: %w", &jetstream.APIError{Code: 503, ErrorCode: code, Description: desc})
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"max payload", nats.ErrMaxPayload, true},
		{"no responders", nats.ErrNoResponders, true},
		{"no stream response", jetstream.ErrNoStreamResponse, true},
		{"maximum bytes exceeded", api(jsErrStoreFailed, "maximum bytes exceeded"), true},
		{"wrong expected last sequence", api(10071, "wrong last sequence: 4"), true},
		{"store closed (a leader stopping after its replicas took it)", api(jsErrStoreFailed, jsStoreClosed), false},
		{"duplicate message id in process", api(jsErrDuplicateInProcess, "duplicate message id is in process"), false},
		{"timeout", context.DeadlineExceeded, false},
		{"connection closed while waiting", nats.ErrConnectionClosed, false},
		{"nats timeout", nats.ErrTimeout, false},
	} {
		if got := notStored(c.err); got != c.want {
			t.Errorf("%s: notStored = %v, want %v", c.name, got, c.want)
		}
	}
}
