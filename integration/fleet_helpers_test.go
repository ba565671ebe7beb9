package integration_test

import (
	"testing"
	"time"

	"github.com/windlass-dev/windlass/internal/fleettest"
)

// fleetTTL is the lease TTL of the integration tests' registries.
const fleetTTL = 2 * time.Second

// newFleet starts one test's fleet (see fleettest) with the integration
// tests' registry settings: leases of fleetTTL, views resynced every 200ms.
// Later options override them.
func newFleet(t testing.TB, opts ...fleettest.Option) *fleettest.Fleet {
	t.Helper()
	return fleettest.New(t, append([]fleettest.Option{fleettest.WithRegistryTTL(fleetTTL), fleettest.WithResyncInterval(200 * time.Millisecond)}, opts...)...)
}
