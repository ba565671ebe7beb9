package registry_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
)

// TestAConflictOnOneToolDoesNotUnadvertiseTheOthers: a worker serves two
// tools, "search" (spec v1) and "report"; a rolling upgrade brings a
// worker of "search" v2 with Replace. Redis loses its data (flushed, or
// restarted empty) and the upgraded worker's heartbeat re-advertises
// first. The first worker's heartbeat is then refused for "search", and
// takes "report" all the same, which it still serves. Before, a refused
// advertisement took nothing, also a heartbeat's: "report" vanished from
// the registry and every dispatcher refused its calls (unknown_tool, or
// no_worker) for as long as the upgraded worker lived. (Found by a review
// helper.)
func TestAConflictOnOneToolDoesNotUnadvertiseTheOthers(t *testing.T) {
	t.Parallel()
	rs := testserver.StartRedis(t)
	client := rs.Client(t)
	slow, err := registry.New(registry.Config{Client: client, TTL: 3 * time.Second, HeartbeatInterval: time.Second, ResyncInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fast, err := registry.New(registry.Config{Client: client, TTL: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, ResyncInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	v1, v2, report := spec("search", "v1"), spec("search", "v2"), spec("report", "Report.")
	mixed := advertise(t, slow, registry.Advertisement{WorkerID: "mixed", Specs: []windlass.Spec{v1, report}})
	advertise(t, fast, registry.Advertisement{WorkerID: "upgraded", Specs: []windlass.Spec{v2}, Replace: true})
	reportServedBy := func(id string) bool {
		info, err := slow.Lookup(t.Context(), "report")
		return err == nil && slices.Contains(info.LiveWorkers(time.Now()), id)
	}
	if !reportServedBy("mixed") {
		t.Fatal("report not advertised at the start")
	}

	if err := client.FlushAll(t.Context()).Err(); err != nil { // Redis lost its data
		t.Fatal(err)
	}
	// The upgraded worker (heartbeat every 100 ms) re-advertises before
	// the mixed one (every second).
	fleettest.WaitFor(t, 2*time.Second, "the upgraded worker re-advertised", func() bool {
		info, err := slow.Lookup(t.Context(), "search")
		return err == nil && info.Hash == v2.Hash() && info.HasLiveWorker(time.Now())
	})
	// The mixed worker is alive and heartbeating: it advertises "report"
	// again, and its lease reports the conflict on "search".
	fleettest.WaitFor(t, 10*time.Second, "the live worker serving report advertising it again", func() bool { return reportServedBy("mixed") })
	var conflict *registry.ConflictError
	fleettest.WaitFor(t, 10*time.Second, "the conflict on search reported", func() bool {
		_, err := mixed.Status()
		return errors.As(err, &conflict) && conflict.Tool == "search"
	})
}

// TestAToolComesBackAfterTheRegistrySlotsMasterRestartsEmpty: on a Redis
// Cluster, the master holding the {registry} slot (the tools set, the
// version, the lease index) restarts without its data, quickly, while the
// masters holding a tool's keys keep theirs. The tool's live worker keeps
// heartbeating and lists the tool again (every commit lists the tools the
// worker holds), and views keep offering it. Before, its lease on the tool
// still held, it only renewed it and never listed the tool again: views
// dropped it after one TTL, and every dispatcher refused its calls
// unknown_tool for as long as the worker lived. (Found by a review
// helper.)
func TestAToolComesBackAfterTheRegistrySlotsMasterRestartsEmpty(t *testing.T) {
	t.Parallel()
	cluster := testserver.StartRedisCluster(t, 3)
	client := cluster.Client(t)
	ctx := t.Context()
	master := func(key string) int {
		slot, err := client.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return int(slot * 3 / 16384) // the test cluster splits the slots evenly, in node order
	}
	regNode := master("windlass:{registry}:tools")
	tool := ""
	for _, n := range clusterTools {
		if master("windlass:tool:{"+n+"}") != regNode {
			tool = n
			break
		}
	}
	if tool == "" {
		t.Fatal("no tool on another master than {registry}")
	}
	reg, err := registry.New(registry.Config{Client: client, TTL: 3 * time.Second, ResyncInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	view := watch(t, reg)
	lease := advertise(t, reg, registry.Advertisement{WorkerID: "w1", Specs: []windlass.Spec{spec(tool, "v1")}})
	fleettest.WaitFor(t, 2*time.Second, "the tool seen", func() bool { return slices.Equal(liveIn(view, tool), []string{"w1"}) })

	// A marker in the {registry} slot that nothing writes again: gone
	// after the restart, it shows the slot's data was lost (the tools set
	// itself may be listed again by then).
	const marker = "windlass:{registry}:test-marker"
	if err := client.Set(ctx, marker, 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	cluster.Node(regNode).Restart(t) // empty: the nodes keep their cluster state, not their data
	if err := cluster.WaitOK(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := client.Exists(ctx, marker).Result(); err != nil || n != 0 {
		t.Fatalf("the {registry} slot's data survived the restart (%d, %v); the test needs it lost", n, err)
	}
	// The worker is alive and heartbeating throughout: it lists the tool
	// again, and the view offers it.
	fleettest.WaitFor(t, 9*time.Second, "the tool listed again", func() bool {
		ok, err := client.SIsMember(ctx, "windlass:{registry}:tools", tool).Result()
		return err == nil && ok
	})
	fleettest.WaitFor(t, 9*time.Second, "the view offering the tool after a sync", func() bool {
		list, err := reg.List(ctx)
		return err == nil && len(list) == 1 && slices.Equal(liveIn(view, tool), []string{"w1"})
	})
	if _, lerr := lease.Status(); lerr != nil {
		t.Errorf("the lease's last error: %v", lerr)
	}
}
