package integration_test

import (
	"os"

	"github.com/windlass-dev/windlass/internal/bench"
)

// benchOptions is the fleet of the benchmarks: WINDLASS_BENCH_SYNC=always
// makes JetStream sync every write before acknowledging it (deploy/nats's
// production setting); unset, the server default (a sync every 2 minutes).
//
//	WINDLASS_BENCH_SYNC=always go test -run '^$' -bench RoundTrip -benchtime 3000x -count 5 ./integration/
func benchOptions() bench.Options {
	return bench.Options{SyncAlways: os.Getenv("WINDLASS_BENCH_SYNC") == "always"}
}
