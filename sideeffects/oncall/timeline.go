package oncall

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
)

// TimelineEntry is one thing that happened to an effect, in outboxd's
// words: enqueued, an attempt and its outcome, an operator's action, a
// provider's event, a late acknowledgement, drift.
type TimelineEntry struct {
	// At is when it happened; nil for an attempt whose time was not
	// recorded (one cut off by a crash): it is placed after the one
	// before it.
	At *time.Time `json:"at"`
	// What is a short label: "enqueued", "attempt 2", "retry", …
	What string `json:"what"`
	// Outcome is the attempt's or action's result: confirmed, in_doubt,
	// pending -> failed, …
	Outcome string `json:"outcome"`
	// Detail says more: the error, the host, the reason and who.
	Detail string `json:"detail"`
}

// Timeline orders what happened to e: its enqueue, its attempts (those
// recorded one by one, the confirmed one from the effect's row, and, for
// the numbers with neither, the one in flight or one interrupted), the
// audit trail (operator actions, provider events, late acknowledgements),
// the delivery status and drift, oldest first.
func Timeline(e *outboxtype.Effect, attempts []outboxtype.Attempt, audit []outboxtype.AuditEntry, delivery *outboxtype.Delivery, drift []outboxtype.DriftRecord) []TimelineEntry {
	created := e.CreatedAt
	out := []TimelineEntry{{At: &created, What: "enqueued", Outcome: string(outboxtype.StatePending), Detail: enqueuedDetail(e)}}
	byN := make(map[int]outboxtype.Attempt, len(attempts))
	for _, a := range attempts {
		byN[a.Attempt] = a
	}
	var unrecorded []TimelineEntry
	for n := 1; n <= max(e.TotalAttempts, maxAttempt(attempts)); n++ {
		what := fmt.Sprintf("attempt %d", n)
		last := n == e.TotalAttempts
		if a, ok := byN[n]; ok {
			at := a.StartedAt
			detail := strings.ReplaceAll(a.Error, "\n", " ")
			if a.Host != "" {
				detail = a.Host + ": " + detail
			}
			out = append(out, TimelineEntry{At: &at, What: what, Outcome: a.Outcome + " after " + a.Duration.Round(time.Millisecond).String(), Detail: detail})
			continue
		}
		switch {
		case last && e.State == outboxtype.StateConfirmed && confirmedBy(audit) != "":
			at := e.FiredAt
			out = append(out, TimelineEntry{At: at, What: what, Outcome: "no answer recorded",
				Detail: "confirmed by " + confirmedBy(audit) + ", not by the provider's answer (see the operator action)"})
		case last && e.State == outboxtype.StateConfirmed && e.FiredAt != nil && e.ConfirmedAt != nil && e.ConfirmedAt.After(*e.FiredAt):
			at := *e.FiredAt
			detail := "the provider acknowledged it"
			if e.ProviderRef != nil {
				detail += ": ref " + *e.ProviderRef
			}
			if e.Replayed {
				detail += " (a replay of an earlier request with the key)"
			}
			out = append(out, TimelineEntry{At: &at, What: what, Outcome: "confirmed after " + e.ConfirmedAt.Sub(*e.FiredAt).Round(time.Millisecond).String(), Detail: detail})
		case last && e.State == outboxtype.StateFired && e.FiredAt != nil:
			at := *e.FiredAt
			out = append(out, TimelineEntry{At: &at, What: what, Outcome: "no answer yet", Detail: "in flight, or its process died mid-call"})
		default:
			unrecorded = append(unrecorded, TimelineEntry{What: what, Outcome: "no outcome recorded",
				Detail: "interrupted (its process stopped or died mid-call) or resolved by an operator; the next attempt carried the same key"})
		}
	}
	for _, a := range audit {
		at := a.CreatedAt
		detail := a.Reason
		if a.Actor != "" {
			detail = "by " + a.Actor + ": " + a.Reason
		}
		out = append(out, TimelineEntry{At: &at, What: a.Action, Outcome: a.FromState + " -> " + a.ToState, Detail: detail})
	}
	if delivery != nil {
		at := delivery.EventAt
		out = append(out, TimelineEntry{At: &at, What: "delivery", Outcome: delivery.Status, Detail: strings.TrimSpace(delivery.Detail + " (event " + delivery.EventID + ")")})
	}
	for _, d := range drift {
		at := d.CreatedAt
		out = append(out, TimelineEntry{At: &at, What: "drift", Outcome: d.Reason, Detail: d.Check})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(*out[j].At) })
	// An attempt with no time recorded goes after the attempt before it.
	for _, u := range unrecorded {
		pos := len(out)
		var n int
		fmt.Sscanf(u.What, "attempt %d", &n)
		for i, t := range out {
			var m int
			if _, err := fmt.Sscanf(t.What, "attempt %d", &m); err == nil && m > n {
				pos = i
				break
			}
		}
		out = append(out[:pos], append([]TimelineEntry{u}, out[pos:]...)...)
	}
	return out
}

func maxAttempt(as []outboxtype.Attempt) int {
	n := 0
	for _, a := range as {
		n = max(n, a.Attempt)
	}
	return n
}

func enqueuedDetail(e *outboxtype.Effect) string {
	var parts []string
	if e.NotBefore != nil {
		parts = append(parts, "due "+e.NotBefore.UTC().Format(time.RFC3339))
	}
	if e.OrderingKey != nil {
		parts = append(parts, "ordering key "+*e.OrderingKey)
	}
	return strings.Join(parts, "; ")
}

// confirmedBy is the operator whose confirmation ended the effect, or ""
// when its last confirmation was not an operator's.
func confirmedBy(audit []outboxtype.AuditEntry) string {
	for i := len(audit) - 1; i >= 0; i-- {
		if audit[i].ToState == string(outboxtype.StateConfirmed) && audit[i].FromState != audit[i].ToState {
			if audit[i].Action == outboxtype.ActionConfirm {
				return audit[i].Actor
			}
			return ""
		}
	}
	return ""
}
