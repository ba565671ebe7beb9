package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestCommandsOnRedisTopologies runs `windlass worker` and `windlass call`
// with --redis-url naming a Redis Cluster and a Sentinel set: the worker
// advertises through the URL's client, the call finds it and is answered.
func TestCommandsOnRedisTopologies(t *testing.T) {
	t.Setenv("WINDLASS_DEV_FILE", filepath.Join(t.TempDir(), "none.json"))
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) string // the Redis URL
	}{
		{"cluster", func(t *testing.T) string { return testserver.StartRedisCluster(t, 3).URL() }},
		{"sentinel", func(t *testing.T) string { return testserver.StartRedisSentinel(t).URL() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			natsURL, redisURL := testserver.StartNATS(t).URL(), tc.start(t)
			ctx, stop := context.WithCancel(t.Context())
			var werr testserver.Buffer
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"worker", "--tools", "add", "--nats-url", natsURL, "--redis-url", redisURL}, io.Discard, &werr)
			}()
			defer func() {
				stop()
				select {
				case err := <-done:
					if err != nil && !t.Failed() {
						t.Errorf("worker stopped with %v\n%s", err, werr.String())
					}
				case <-time.After(30 * time.Second):
					t.Error("worker did not stop")
				}
			}()
			var out, errOut bytes.Buffer
			fleettest.WaitFor(t, fleettest.StartTimeout, "windlass call add answered", func() bool {
				select {
				case err := <-done:
					done <- err
					t.Fatalf("worker exited: %v\n%s", err, werr.String())
				default:
				}
				out.Reset()
				errOut.Reset()
				err := run(t.Context(), []string{"call", "add", `{"a":1,"b":2}`, "--nats-url", natsURL, "--redis-url", redisURL}, &out, &errOut)
				return err == nil && strings.TrimSpace(out.String()) == "3"
			})
		})
	}
}
