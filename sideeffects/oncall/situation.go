package oncall

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
)

// RiverRescuerInterval is how often River looks for jobs running longer
// than their RescueStuckJobsAfter (River's default, which outboxd keeps).
const RiverRescuerInterval = 30 * time.Second

// heartbeatSlack allows for a dispatcher's 30s heartbeat arriving late.
const heartbeatSlack = 30 * time.Second

// DestinationName is how operators see a destination: its host and, for a
// name, the address it is dialled at.
func DestinationName(d outboxtype.DestinationState) string {
	if d.Address == "" {
		return d.Host
	}
	return d.Host + " (" + d.Address + ")"
}

// SituationOf is what a diagnosis knows from the dispatchers' records
// (outboxctl dispatchers): how many reported in the last minute, what
// each holds (HolderState), what their gates hold back by destination, and
// the crash-recovery bound their own settings give — the longest
// --rescue-after among them, River's rescuer interval and the first retry
// delay — or bound when none recorded one.
func SituationOf(now time.Time, bound time.Duration, ds []outboxtype.DispatcherRecord) Situation {
	sit := Situation{Now: now, FiredBound: bound, Holders: make(map[string]string, len(ds)), Destinations: map[string]string{}}
	var rescue, retry time.Duration
	for _, d := range ds {
		sit.Holders[d.ID] = HolderState(d, now)
		if !Alive(d, now) {
			continue
		}
		sit.Dispatchers++
		for _, dest := range d.Destinations {
			if text := DestinationText(dest, now); text != "" {
				names := []string{dest.Host}
				if dest.Address != "" {
					names = append(names, dest.Address)
				}
				sit.HeldBack = append(sit.HeldBack, HeldDestination{Names: names, State: text, On: d.ID, BreakerOpen: dest.BreakerOpen})
				for _, key := range names {
					if sit.Destinations[key] == "" {
						sit.Destinations[key] = text + " on " + d.ID
					}
				}
			}
		}
		var st struct {
			RescueAfter string `json:"rescue_after"`
			RetryBase   string `json:"retry_base_delay"`
		}
		if json.Unmarshal(d.Settings, &st) != nil {
			continue
		}
		// Each provider's request timeout, the longest any running
		// dispatcher uses: no call of it lasts longer.
		var perProvider map[string]json.RawMessage
		_ = json.Unmarshal(d.Settings, &perProvider)
		for name, raw := range perProvider {
			var p struct {
				Timeout string `json:"timeout"`
			}
			if json.Unmarshal(raw, &p) != nil {
				continue
			}
			if t, err := time.ParseDuration(p.Timeout); err == nil && t > sit.CallTimeouts[name] {
				if sit.CallTimeouts == nil {
					sit.CallTimeouts = map[string]time.Duration{}
				}
				sit.CallTimeouts[name] = t
			}
		}
		if r, err := time.ParseDuration(st.RescueAfter); err == nil && r > rescue {
			rescue = r
		}
		if r, err := time.ParseDuration(st.RetryBase); err == nil && r > retry {
			retry = r
		}
	}
	if rescue > 0 {
		sit.RescueAfter = rescue
		sit.FiredBound = rescue + RiverRescuerInterval + retry
		sit.BoundFrom = fmt.Sprintf("from the running dispatchers' --rescue-after %s", rescue)
	}
	return sit
}

// Alive is whether dispatcher d reported in the last minute and has not
// stopped.
func Alive(d outboxtype.DispatcherRecord, now time.Time) bool {
	return d.StoppedAt == nil && now.Sub(d.SeenAt) <= time.Minute+heartbeatSlack
}

// HolderState says what is known of dispatcher d: running, stopped, or
// gone silent (killed).
func HolderState(d outboxtype.DispatcherRecord, now time.Time) string {
	switch {
	case d.StoppedAt != nil:
		return "stopped " + Ago(*d.StoppedAt, now) + " ago"
	case Alive(d, now):
		return "running"
	default:
		return "silent since " + Ago(d.SeenAt, now) + " ago: killed?"
	}
}

// DestinationText says what a gate holds back for a destination, or ""
// when it is nothing worth an operator's attention.
func DestinationText(d providers.DestinationState, now time.Time) string {
	switch {
	case d.BreakerOpen:
		return fmt.Sprintf("not answering: its circuit breaker is open until %s (%d requests in a row got no answer; %d in flight, %d waiting)",
			d.OpenUntil.UTC().Format(time.RFC3339), d.Failures, d.InFlight, d.Waiting)
	case d.Waiting > 0:
		return fmt.Sprintf("at its cap: %d requests in flight (limit %d), %d effects waiting for a slot", d.InFlight, d.Limit, d.Waiting)
	case d.Failures >= 3:
		return fmt.Sprintf("%d requests in a row got no answer (%d in flight)", d.Failures, d.InFlight)
	}
	return ""
}

// Ago is how long before now t was, as operators read it: seconds within
// the hour (they matter when watching whether something moves), minutes
// within two days, days beyond.
func Ago(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

// Carried says, for an operator who looked up an effect that has no row
// yet, that its event still carries it (outbox.EffectsByDispatcher) and
// what that means.
func Carried(c outboxtype.CarriedEffect, now time.Time) string {
	return fmt.Sprintf("effect %s (%s) is carried by event %s, enqueued %s: no dispatcher has taken the event yet. "+
		"A running outboxd writes its row and dispatches it within milliseconds; if this lasts, check that one runs (outboxctl dispatchers)",
		c.ID, c.Kind, c.EventID, relative(c.Since, now))
}
