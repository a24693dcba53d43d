package outboxtype

import (
	"fmt"
	"strings"
	"time"
)

// Diagnosis explains why a stuck effect is not progressing and what to do.
// firedBound is the crash-recovery bound; window the provider's key window
// minus margin (zero: none).
func (s StuckEffect) Diagnosis(now time.Time, firedBound, window time.Duration) string {
	e := s.Effect
	lastErr := ""
	if e.LastError != nil {
		lastErr = *e.LastError
	}
	if e.State == StateFailed {
		return "failed: " + strings.TrimRight(lastErr, ". ") + ". " + failedAdvice(e, lastErr)
	}
	if window > 0 && e.KeyWindowFrom != nil {
		if closes := e.KeyWindowFrom.Add(window); closes.Sub(now) < time.Hour {
			return fmt.Sprintf("key window closes %s (first request with the key %s): if it passes, the effect fails for reconciliation",
				relative(closes, now), relative(*e.KeyWindowFrom, now))
		}
	}
	if s.BlockedBehind != nil && e.OrderingKey != nil {
		return fmt.Sprintf("blocked behind %s on ordering key %q: it fires once that effect ends (confirmed, cancelled or released). "+
			"Act on %s; if it will never complete, `outboxctl release %s` lets this chain go on", s.BlockedBehind, *e.OrderingKey, s.BlockedBehind, s.BlockedBehind)
	}
	if s.JobID == nil {
		return "no live River job: nothing will fire it. `outboxctl requeue` gives it one (the sweeper would, within --sweep-interval)"
	}
	if e.State == StateFired && e.FiredAt != nil && now.Sub(*e.FiredAt) > firedBound {
		return fmt.Sprintf("fired %s, beyond the crash-recovery bound (%s): the worker died mid-call and River has not rescued job %d (%s); is any outboxd running? "+
			"An outboxd that starts rescues it within seconds and re-fires it with the same key (at_least_once) or parks it for review (at_most_once). "+
			"To resolve it yourself: look up key %s at the provider, then `outboxctl confirm --ref` if done, or let it re-fire",
			relative(*e.FiredAt, now), firedBound, *s.JobID, *s.JobState, e.IdempotencyKey)
	}
	if e.Attempts > 0 && lastErr != "" {
		next := "unknown"
		if s.JobScheduledAt != nil {
			next = relative(*s.JobScheduledAt, now)
		}
		return fmt.Sprintf("retrying: %d attempts, last error: %s; next attempt %s", e.Attempts, lastErr, next)
	}
	if s.JobScheduledAt != nil && s.JobScheduledAt.Before(now) {
		return fmt.Sprintf("waiting for a worker: job %d %s since %s; is an outboxd serving queue %q?",
			*s.JobID, *s.JobState, relative(*s.JobScheduledAt, now), e.Provider)
	}
	return fmt.Sprintf("job %d %s", *s.JobID, *s.JobState)
}

// failedAdvice says, per failure class, which actions are safe for a
// failed effect and which one could cause a second real-world effect.
func failedAdvice(e *Effect, lastErr string) string {
	switch {
	case strings.HasPrefix(lastErr, ReasonUnqueueable):
		return "Fix the row's provider, then `outboxctl retry`; or `outboxctl cancel`."
	case strings.HasPrefix(lastErr, ReasonInDoubt) || e.InDoubt && !strings.HasPrefix(lastErr, ReasonKeyWindow):
		return fmt.Sprintf("An earlier request may have been delivered: look up key %s at the provider "+
			"(`outboxctl reconcile` asks Stripe for you; with provider events on, outboxd confirms it by itself when the provider's event arrives). "+
			"Done: `outboxctl confirm --ref`. Not done: `outboxctl retry` (with --allow-duplicate for at_most_once kinds: "+
			"a second delivery if it was done after all). Not wanted: `outboxctl cancel`.", e.IdempotencyKey)
	case strings.HasPrefix(lastErr, ReasonKeyWindow):
		return fmt.Sprintf("The provider may have forgotten key %s, so a re-fire could act twice: check at the provider. "+
			"Done: `outboxctl confirm --ref`. Not done: `outboxctl retry --force` (a new key window). Not wanted: `outboxctl cancel`.", e.IdempotencyKey)
	case strings.HasPrefix(lastErr, "retries exhausted"):
		return "The provider never acted (each failure proved it): `outboxctl retry` once the cause is fixed (same key, no duplicate), or `outboxctl cancel`."
	default:
		return "The provider refused it (permanent): `outboxctl cancel` if it should not happen, or fix the cause and `outboxctl retry` (same key)."
	}
}

func relative(t, now time.Time) string {
	d := now.Sub(t).Round(time.Second)
	if d >= 0 {
		return d.String() + " ago"
	}
	return "in " + (-d).String()
}
