package registry_test

import (
	"slices"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/registry"
)

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
