// Package integration_test holds the fleet's end-to-end tests and its
// benchmarks, over real NATS and Redis servers started by the harness.
package integration_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(faultWorkerEnv) != "" {
		// This process is a worker of the fault suite, started by the test
		// binary itself so that it can be killed (see faultworker_test.go).
		os.Exit(runFaultWorker())
	}
	if os.Getenv(traceWorkerEnv) != "" {
		// A worker process of the trace test (see traceworker_test.go).
		os.Exit(runTraceWorker())
	}
	if os.Getenv(largeWorkerEnv) != "" {
		// The worker process of the large-result memory benchmark (see
		// largeresult_memory_test.go).
		os.Exit(runLargeWorker())
	}
	if os.Getenv(largeDispatcherEnv) != "" {
		// Its dispatcher process.
		os.Exit(runLargeDispatcher())
	}
	goleak.VerifyTestMain(m)
}
