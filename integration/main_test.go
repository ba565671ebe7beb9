// Package integration_test holds the fleet's end-to-end tests and its
// benchmarks, over real NATS and Redis servers started by the harness.
package integration_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
