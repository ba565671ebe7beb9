package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
)

// clusterTools are tool names whose keys land on every master of a
// three-master cluster (checked by the test).
var clusterTools = []string{"echo", "add", "search", "crm", "sleep", "fetch"}

// TestRegistryOnRedisCluster runs the registry on a three-master Redis
// Cluster under the default prefix (no hash tag), with tools whose keys
// live on different masters: advertising (several tools in one
// advertisement), a conflict and a rolling replace, a view following a
// new worker, a withdrawal and a lapsed lease, and the lookups all work
// (before the keys were sharded the advertise script failed with
// CROSSSLOT here).
func TestRegistryOnRedisCluster(t *testing.T) {
	t.Parallel()
	cluster := testserver.StartRedisCluster(t, 3)
	client := cluster.Client(t)
	ctx := t.Context()
	masters := map[string]bool{}
	for _, name := range clusterTools {
		slot, err := client.ClusterKeySlot(ctx, "windlass:tool:{"+name+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		masters[fmt.Sprint(slot*3/16384)] = true // the test cluster splits the slots evenly
	}
	if len(masters) < 2 {
		t.Fatalf("the test's tools all hash to one master; pick others")
	}

	reg, err := registry.New(registry.Config{Client: client, TTL: time.Second, ResyncInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	view := watch(t, reg)
	live := func(tool string) []string { return liveIn(view, tool) }

	specs := make([]windlass.Spec, len(clusterTools))
	for i, n := range clusterTools {
		specs[i] = spec(n, "v1")
	}
	advertise(t, reg, registry.Advertisement{WorkerID: "w1", Specs: specs, Rates: map[string]limits.Rate{"crm": limits.PerSecond(5)}})
	fleettest.WaitFor(t, 2*time.Second, "every tool seen by the view", func() bool {
		for _, n := range clusterTools {
			if !slices.Equal(live(n), []string{"w1"}) {
				return false
			}
		}
		return true
	})
	list, err := reg.List(ctx)
	if err != nil || len(list) != len(clusterTools) {
		t.Fatalf("List = %d tools, %v; want %d", len(list), err, len(clusterTools))
	}
	if info, err := reg.Lookup(ctx, "crm"); err != nil || info.Rate.String() != "5/s" {
		t.Errorf("Lookup(crm) = %+v, %v; want rate 5/s", info, err)
	}

	// A conflict on one tool takes nothing on the others.
	_, err = reg.Advertise(ctx, registry.Advertisement{WorkerID: "w2", Specs: []windlass.Spec{spec("add", "v1"), spec("search", "v2")}})
	var conflict *registry.ConflictError
	if !errors.As(err, &conflict) || conflict.Tool != "search" {
		t.Fatalf("Advertise(a differing spec) = %v, want a *ConflictError on search", err)
	}
	if info, _ := reg.Lookup(ctx, "add"); !slices.Equal(info.LiveWorkers(time.Now()), []string{"w1"}) {
		t.Errorf("a refused advertisement took a lease on add: %v", info.LiveWorkers(time.Now()))
	}
	w2 := advertise(t, reg, registry.Advertisement{WorkerID: "w2", Specs: []windlass.Spec{spec("add", "v1"), spec("search", "v2")}, Replace: true})
	fleettest.WaitFor(t, 2*time.Second, "the replaced spec seen", func() bool {
		info, _, _ := view.Tool("search")
		return info.Hash == spec("search", "v2").Hash() && len(live("search")) == 2
	})
	if err := w2.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	fleettest.WaitFor(t, 2*time.Second, "the withdrawal seen", func() bool {
		return slices.Equal(live("add"), []string{"w1"}) && slices.Equal(live("search"), []string{"w1"})
	})

	// A worker that dies: its own cluster client closes, its lease lapses.
	deadClient := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	deadReg, err := registry.New(registry.Config{Client: deadClient, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	advertise(t, deadReg, registry.Advertisement{WorkerID: "dead", Specs: []windlass.Spec{spec("fetch", "v1")}})
	fleettest.WaitFor(t, 2*time.Second, "the doomed worker seen", func() bool { return len(live("fetch")) == 2 })
	_ = deadClient.Close()
	fleettest.WaitFor(t, 3*time.Second, "the lapsed lease seen", func() bool { return slices.Equal(live("fetch"), []string{"w1"}) })

	// Heartbeats keep w1 live past several TTLs.
	time.Sleep(2500 * time.Millisecond) // 2.5 TTLs: only heartbeats keep it
	for _, n := range clusterTools {
		if !slices.Equal(live(n), []string{"w1"}) {
			t.Errorf("live workers of %s after 2.5 TTLs = %v, want [w1]", n, live(n))
		}
	}
	for _, key := range []string{"windlass:tools", "windlass:tool:echo"} {
		if n, err := client.Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Errorf("the legacy layout was written on a cluster without a hash tag: %s: %d, %v", key, n, err)
		}
	}
}

// TestRegistryOnRedisClusterUnderAHashTag: a prefix with a hash tag (the
// old advice for a cluster) puts every key in one slot: the registry, the
// legacy layout included, still works there.
func TestRegistryOnRedisClusterUnderAHashTag(t *testing.T) {
	t.Parallel()
	cluster := testserver.StartRedisCluster(t, 3)
	client := cluster.Client(t)
	reg, err := registry.New(registry.Config{Client: client, Prefix: "{windlass}:"})
	if err != nil {
		t.Fatal(err)
	}
	advertise(t, reg, registry.Advertisement{WorkerID: "w1", Specs: []windlass.Spec{spec("echo", ""), spec("add", "")}})
	if info, err := reg.Lookup(t.Context(), "add"); err != nil || !slices.Equal(info.LiveWorkers(time.Now()), []string{"w1"}) {
		t.Errorf("Lookup(add) = %+v, %v", info, err)
	}
	if n, err := client.Exists(t.Context(), "{windlass}:tool:add:workers").Result(); err != nil || n != 1 {
		t.Errorf("the legacy layout under a hash tag: %d keys, %v; want it written", n, err)
	}
}

// TestLimitsOnRedisCluster: admission caps and rates, and slots taken and
// freed in batches that span tools on different masters, on a three-master
// cluster, through the registry's enforcer.
func TestLimitsOnRedisCluster(t *testing.T) {
	t.Parallel()
	cluster := testserver.StartRedisCluster(t, 3)
	reg, err := registry.New(registry.Config{Client: cluster.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	e := reg.Limits()
	ctx := context.Background()
	lapse := time.Now().Add(time.Minute)
	capOne := limits.Limit{MaxInFlight: 1}
	for _, tool := range clusterTools {
		dec, err := e.Admit(ctx, tool, "k", "first-"+tool, lapse, capOne, limits.NoLimit)
		if err != nil || !dec.Allowed || dec.Slot == nil {
			t.Fatalf("%s: first call: %+v, %v", tool, dec, err)
		}
		if dec, err := e.Admit(ctx, tool, "k", "second-"+tool, lapse, capOne, limits.NoLimit); err != nil || dec.Allowed || dec.Reason != limits.ReasonInFlight {
			t.Errorf("%s: second call under a cap of 1: %+v, %v; want refused in_flight", tool, dec, err)
		}
		e.Free(dec.Slot)
	}
	e.Wait()
	rate := limits.PerSecond(1)
	if dec, err := e.Charge(ctx, "crm", "k", rate); err != nil || !dec.Allowed {
		t.Fatalf("first charge: %+v, %v", dec, err)
	}
	if dec, err := e.Charge(ctx, "crm", "k", rate); err != nil || dec.Allowed || dec.RetryAfter <= 0 {
		t.Errorf("second charge within the second: %+v, %v; want refused with a retry-after", dec, err)
	}

	var slots []*limits.Slot
	for i := range 120 {
		tool := clusterTools[i%len(clusterTools)]
		slot, ok := e.Take(tool, "k", fmt.Sprintf("call-%d", i), lapse, func(tk limits.Taken) {
			if tk.Err != nil {
				t.Errorf("take: %v", tk.Err)
			}
		})
		if !ok {
			t.Fatal("Take refused with an empty queue")
		}
		slots = append(slots, slot)
	}
	e.Wait()
	for _, tool := range clusterTools {
		if use, err := e.Use(ctx, tool); err != nil || use["k"] != 120/len(clusterTools) {
			t.Errorf("Use(%s) = %v, %v; want k: %d", tool, use, err, 120/len(clusterTools))
		}
	}
	for _, s := range slots {
		e.Free(s)
	}
	e.Wait()
	for _, tool := range clusterTools {
		if use, err := e.Use(ctx, tool); err != nil || len(use) != 0 {
			t.Errorf("Use(%s) after every slot was freed = %v, %v", tool, use, err)
		}
	}
}
