// Package testserver starts real servers for integration tests: an
// in-process nats-server with JetStream and a redis-server child process.
//
// Every server listens on 127.0.0.1 on a free port, never on a standard one,
// keeps its data in a directory from tb.TempDir, and is shut down by
// tb.Cleanup, so tests that each start their own servers can run in
// parallel. Both kinds can be stopped and restarted on the same address with
// the same data directory, to test reconnection and recovery.
//
// The functions and methods that take a testing.TB call tb.Fatalf on error,
// so they must be called from the goroutine running the test.
package testserver
