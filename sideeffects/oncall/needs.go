package oncall

import (
	"fmt"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
)

// Needs counts what asks for a person, as the web view's overview and
// outboxctl stuck show it.
type Needs struct {
	// HeldBack is the destinations a running dispatcher's gate holds back
	// (a breaker open, a host at its cap).
	HeldBack int
	// EndpointsDisabled and EndpointsFailing count the endpoints disabled
	// and those failing every delivery, the first of them since
	// FailingSince.
	EndpointsDisabled, EndpointsFailing int
	FailingSince                        time.Time
	// Incidents groups StuckEffects, the stuck and failed effects, by
	// cause.
	Incidents    int
	StuckEffects int64
	// KeysHolding counts the limit keys holding effects back, KeysWaiting
	// the effects waiting for them.
	KeysHolding int
	KeysWaiting int64
	// Drift counts the drift records nobody reviewed; StuckKeys the
	// Idempotency-Keys in progress past their lock.
	Drift     int64
	StuckKeys int
}

// Place is where a need is dealt with: a page of the web view, a command
// of outboxctl.
type Place string

// The places of the needs.
const (
	PlaceHeldBack  Place = "held back"
	PlaceEndpoints Place = "endpoints"
	PlaceIncidents Place = "incidents"
	PlaceLimits    Place = "limits"
	PlaceDrift     Place = "drift"
	PlaceKeys      Place = "keys"
)

// Need is one situation that asks for a person, and where it is dealt
// with.
type Need struct {
	Text  string
	Place Place
}

// Lines are the needs, one line per situation, the most urgent first: a
// destination that stopped answering, endpoints disabled or about to be,
// stuck and failed effects, limit keys holding effects back, drift, stuck
// Idempotency-Keys. A bulk of one situation is one line, so that it never
// hides another.
func (n Needs) Lines(now time.Time) []Need {
	var out []Need
	if n.HeldBack > 0 {
		out = append(out, Need{fmt.Sprintf("%d webhook destination(s) held back", n.HeldBack), PlaceHeldBack})
	}
	if n.EndpointsDisabled > 0 {
		out = append(out, Need{fmt.Sprintf("%d endpoint(s) disabled: their deliveries wait until enabled", n.EndpointsDisabled), PlaceEndpoints})
	}
	if n.EndpointsFailing > 0 {
		out = append(out, Need{fmt.Sprintf("%d endpoint(s) failing every delivery, the first since %s ago: outboxd disables one after --endpoint-disable-after",
			n.EndpointsFailing, now.Sub(n.FailingSince).Round(time.Second)), PlaceEndpoints})
	}
	if n.Incidents > 0 {
		out = append(out, Need{fmt.Sprintf("%d stuck or failed effect(s) in %d incident(s)", n.StuckEffects, n.Incidents), PlaceIncidents})
	}
	if n.KeysHolding > 0 {
		out = append(out, Need{fmt.Sprintf("%d limit key(s) holding back %d effect(s): paused by a 429 or 503, slowed, or a disabled endpoint's",
			n.KeysHolding, n.KeysWaiting), PlaceLimits})
	}
	if n.Drift > 0 {
		out = append(out, Need{fmt.Sprintf("%d drift record(s) to review: a provider did something outboxd does not hold", n.Drift), PlaceDrift})
	}
	if n.StuckKeys > 0 {
		out = append(out, Need{fmt.Sprintf("%d Idempotency-Key(s) stuck in progress: a request ended without storing its response", n.StuckKeys), PlaceKeys})
	}
	return out
}

// AddEndpoint counts an endpoint disabled at disabledAt (nil: enabled)
// and failing every delivery since failingSince (nil: not failing).
func (n *Needs) AddEndpoint(disabledAt, failingSince *time.Time) {
	switch {
	case disabledAt != nil:
		n.EndpointsDisabled++
	case failingSince != nil:
		n.EndpointsFailing++
		if n.FailingSince.IsZero() || failingSince.Before(n.FailingSince) {
			n.FailingSince = *failingSince
		}
	}
}

// AddLimits counts the limit keys holding effects back at now.
func (n *Needs) AddLimits(limits []outboxtype.LimitReport, now time.Time) {
	for _, l := range limits {
		if l.Holding(now) {
			n.KeysHolding++
			n.KeysWaiting += l.WaitingEffects
		}
	}
}
