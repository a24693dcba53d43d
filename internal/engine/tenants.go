package engine

import (
	"maps"
	"slices"
	"time"
)

// Fair shares between tenants (migration 00025,
// docs/limits.md#fair-shares-between-tenants): an effect with a tenant
// and no ordering key waits in its tenant's queue; the dispatchers give
// each tenant's due effects their jobs in turn, at most the tenant's window
// per provider at once. A tenant's backlog then puts at most its window of
// jobs ahead of another tenant's new effect in River's queue.

// TenantLimitPrefix starts the limit key of a tenant's own rate
// ("tenant:acme"): set like any limit key, every request of the tenant's
// effects counts against it, besides its provider's account or destination.
const TenantLimitPrefix = "tenant:"

// tenantFeeder is one process's side of the tenants' queues.
type tenantFeeder struct {
	window  int
	tenants []string
	weights []float64
	// wake is poked when an effect with a tenant ends here: a place in
	// its tenant's window may have freed.
	wake chan struct{}
}

func newTenantFeeder(window int, weights map[string]float64) *tenantFeeder {
	f := &tenantFeeder{window: window, wake: make(chan struct{}, 1)}
	for _, t := range slices.Sorted(maps.Keys(weights)) {
		f.tenants, f.weights = append(f.tenants, t), append(f.weights, weights[t])
	}
	return f
}

// poke wakes the feeder, without waiting.
func (f *tenantFeeder) poke() {
	if f == nil {
		return
	}
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// tenantPoll bounds how long a queued tenant effect waits for a place
// freed on another replica (this process's own ends wake it at once).
const tenantPoll = 50 * time.Millisecond
