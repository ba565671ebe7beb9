// Package testserver starts real servers for integration tests and runnable
// examples: an in-process nats-server with JetStream and a redis-server
// child process, or several: a Redis Cluster ([StartRedisCluster]) and a
// replicated Redis watched by Sentinel ([StartRedisSentinel]), whose waits
// (the cluster's state, the sentinels' view) poll the servers with a
// deadline.
//
// Every server listens on 127.0.0.1 on a free port, never on a standard one,
// and keeps its data in a temporary directory of its own, so tests that each
// start their own servers can run in parallel. Both kinds can be stopped and
// restarted on the same address with the same data directory, to test
// reconnection and recovery.
//
// [NewNATS] and [NewRedis] need no testing.TB: they return an error, and the
// caller ends the server with Close, which also removes its directory. This
// is the form for Example functions. Tests use [StartNATS] and [StartRedis],
// which call tb.Fatalf on error and Close when the test ends.
//
// The functions and methods that take a testing.TB call tb.Fatalf on error,
// so they must be called from the goroutine running the test.
package testserver
