package registry_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
)

// TestUpgradeKeepsTheLegacyLayout: during a rolling upgrade a worker of
// this release writes the legacy layout too, so dispatchers of the old
// releases (which read only it) keep seeing it, and a spec that conflicts
// with an old worker's is still refused; NoLegacyLayout stops it.
func TestUpgradeKeepsTheLegacyLayout(t *testing.T) {
	t.Parallel()
	rs := testserver.StartRedis(t)
	client := rs.Client(t)
	ctx := t.Context()
	reg := newRegistry(t, rs, 0)
	v1, v2 := spec("echo", "v1"), spec("echo", "v2")

	// A live worker of an old release, as its script wrote it.
	v1JSON, err := json.Marshal(v1)
	if err != nil {
		t.Fatal(err)
	}
	expires := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
	for _, cmd := range [][]any{
		{"SADD", "windlass:tools", "echo"},
		{"HSET", "windlass:tool:echo", "spec", string(v1JSON), "hash", v1.Hash(), "updated_ms", "1"},
		{"ZADD", "windlass:tool:echo:workers", expires, "old"},
	} {
		if err := client.Do(ctx, cmd...).Err(); err != nil {
			t.Fatal(err)
		}
	}

	_, err = reg.Advertise(ctx, registry.Advertisement{WorkerID: "new-v2", Specs: []windlass.Spec{v2}})
	var conflict *registry.ConflictError
	if !errors.As(err, &conflict) || !slices.Equal(conflict.Workers, []string{"old"}) {
		t.Fatalf("a spec conflicting with an old worker's: %v, want a *ConflictError naming old", err)
	}

	lease := advertise(t, reg, registry.Advertisement{WorkerID: "new", Specs: []windlass.Spec{v1}})
	legacyLive := func(id string) bool {
		score, err := client.ZScore(ctx, "windlass:tool:echo:workers", id).Result()
		return err == nil && int64(score) > time.Now().UnixMilli()
	}
	if !legacyLive("new") || !legacyLive("old") {
		t.Error("an old dispatcher does not see both workers in the legacy layout")
	}
	if info, err := reg.Lookup(ctx, "echo"); err != nil || !slices.Equal(info.LiveWorkers(time.Now()), []string{"new"}) {
		t.Errorf("the new layout: %+v, %v; want only the new worker (old workers write only the legacy layout)", info, err)
	}
	if err := lease.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	if legacyLive("new") {
		t.Error("a withdrawn worker is still live in the legacy layout")
	}

	quiet, err := registry.New(registry.Config{Client: client, NoLegacyLayout: true})
	if err != nil {
		t.Fatal(err)
	}
	advertise(t, quiet, registry.Advertisement{WorkerID: "solo", Specs: []windlass.Spec{spec("add", "")}})
	if n, err := client.Exists(ctx, "windlass:tool:add", "windlass:tool:add:workers").Result(); err != nil || n != 0 {
		t.Errorf("NoLegacyLayout wrote %d legacy keys (%v)", n, err)
	}
	if _, err := quiet.Lookup(ctx, "add"); err != nil {
		t.Errorf("NoLegacyLayout: the new layout: %v", err)
	}
}
