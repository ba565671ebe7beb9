package integration_test

import (
	"os"

	"github.com/windlass-dev/windlass/internal/testserver"
)

// benchNATSOptions is the server of the benchmarks: WINDLASS_BENCH_SYNC=always
// makes JetStream sync every write before acknowledging it (deploy/nats's
// production setting); unset, the server default (a sync every 2 minutes).
//
//	WINDLASS_BENCH_SYNC=always go test -run '^$' -bench RoundTrip -benchtime 3000x -count 5 ./integration/
func benchNATSOptions() testserver.NATSOptions {
	return testserver.NATSOptions{SyncAlways: os.Getenv("WINDLASS_BENCH_SYNC") == "always"}
}
