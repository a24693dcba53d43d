package oncall

import (
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/bundled"
)

// Situation is what a diagnosis knows beyond the effect itself.
type Situation struct {
	Now time.Time
	// FiredBound is the crash-recovery bound: how long an effect may stay
	// fired under a job River thinks is running before the worker must
	// have died (the dispatchers' --rescue-after, River's rescuer interval
	// and the first retry delay).
	FiredBound time.Duration
	// KeyWindow is the provider's key window minus its margin (0: none).
	KeyWindow time.Duration
	// Dispatchers is how many outboxd processes reported in the last
	// minute, or -1 when unknown.
	Dispatchers int
	// BoundFrom says where FiredBound comes from, for the text ("the
	// running dispatchers' settings"); "" reads as the default.
	BoundFrom string
	// Holders says, by dispatcher ID, what is known of the process that
	// holds a running job: "running", or how long ago it stopped or was
	// last seen.
	Holders map[string]string
	// Destinations says, by a webhook's host (as in its URL, and as the
	// address it is dialled at), what the running dispatchers' gates hold
	// back for it: an open breaker, effects waiting at its cap.
	Destinations map[string]string
	// HeldBack lists the same, one entry per destination and dispatcher.
	HeldBack []HeldDestination
	// Profiles are the providers' profiles the advice follows (the
	// operator's, Operator.Profiles); nil: the built-in providers'.
	Profiles providers.Profiles
	// Say names actions as the surface showing the advice offers them
	// (CLI when nil, Web).
	Say Surface
	// CallTimeouts are the running dispatchers' request timeouts by
	// provider (the longest of them): no call lasts longer.
	CallTimeouts map[string]time.Duration
	// RescueAfter is the running dispatchers' --rescue-after (the
	// longest), 0 when none recorded one.
	RescueAfter time.Duration
}

// UsualRescueAfter is the --rescue-after beyond which the diagnosis calls
// the setting far from its default (2m): an effect of a dead process
// then waits that long for River's rescue.
const UsualRescueAfter = 30 * time.Minute

// HeldDestination is a webhook destination a running dispatcher's gate
// holds back: its host names and dialled address, what holds it
// (DestinationText) and the dispatcher that reported it.
type HeldDestination struct {
	Names       []string
	State, On   string
	BreakerOpen bool
}

// Diagnosis explains why a stuck effect is not progressing and what to do.
// firedBound is the crash-recovery bound; window the provider's key window
// minus margin (zero: none). Explain says more when it knows more.
func Diagnosis(s outboxtype.StuckEffect, now time.Time, firedBound, window time.Duration) string {
	return Explain(s, Situation{Now: now, FiredBound: firedBound, KeyWindow: window, Dispatchers: -1})
}

// Explain is Diagnosis with what is known of the dispatchers.
func Explain(s outboxtype.StuckEffect, sit Situation) string {
	e, now := s.Effect, sit.Now
	lastErr := ""
	if e.LastError != nil {
		lastErr = *e.LastError
	}
	if e.State == outboxtype.StateFailed {
		return "failed: " + strings.TrimRight(lastErr, ". ") + ". " + failedAdvice(e, lastErr, sit)
	}
	if tenant, ok := strings.CutPrefix(deref(e.WaitingFor), "turn:"); ok && e.State == outboxtype.StatePending {
		why := fmt.Sprintf("waiting for its tenant's turn (tenant %s)", tenant)
		if e.WaitingSince != nil {
			why += " since " + relative(*e.WaitingSince, now)
		}
		return why + ": each tenant has a window of effects with a dispatch job at once, and this one gets its job when one of " +
			"the tenant's ends (fair shares; waiting is not an attempt). " + sit.say(ActTenants, "") + " shows each tenant's queue"
	}
	// A held effect whose last request ended in doubt waits in fired:
	// nothing is in flight (a claim clears the mark).
	if e.WaitingFor != nil && (e.State == outboxtype.StatePending || e.State == outboxtype.StateFired) {
		why := fmt.Sprintf("waiting for limit %s", *e.WaitingFor)
		if e.WaitingSince != nil {
			why += " since " + relative(*e.WaitingSince, now)
		}
		why += " (the provider answered 429, or held it back, or the key had no token left when it was due): waiting is not an attempt and spends none of its retries"
		if e.State == outboxtype.StateFired {
			why += "; nothing is in flight, but its last request's outcome is unknown, so it goes again with the same key"
		}
		if e.LastError != nil && *e.LastError != "" {
			// What held it back, in the provider's words (a 429's body, a
			// disabled endpoint and its reason).
			why += "; last answer: " + *e.LastError
		}
		if s.JobScheduledAt != nil && s.JobScheduledAt.After(now) {
			why += "; it asks again " + relative(*s.JobScheduledAt, now)
		}
		if sit.KeyWindow > 0 && e.KeyWindowFrom != nil {
			closes := e.KeyWindowFrom.Add(sit.KeyWindow)
			why += "; its key window closes " + relative(closes, now)
			if closes.Sub(now) < time.Hour {
				why += " (if it is still waiting then, it fails for reconciliation: raise the key's rate, or check the provider)"
			}
		}
		return why + ". " + sit.say(ActLimits, "") + " shows the key's rate and pause"
	}
	if sit.KeyWindow > 0 && e.KeyWindowFrom != nil {
		if closes := e.KeyWindowFrom.Add(sit.KeyWindow); closes.Sub(now) < time.Hour {
			return fmt.Sprintf("key window closes %s (first request with the key %s): if it passes, the effect fails for reconciliation",
				relative(closes, now), relative(*e.KeyWindowFrom, now))
		}
	}
	if s.BlockedBehind != nil && e.OrderingKey != nil {
		return fmt.Sprintf("blocked behind %s on ordering key %q: it fires once that effect ends (confirmed, cancelled or released). "+
			"Act on %s; if it will never complete, %s lets this chain go on", s.BlockedBehind, *e.OrderingKey, s.BlockedBehind, sit.say(ActRelease, s.BlockedBehind.String()))
	}
	if d := sit.Destinations[destination(e, sit)]; d != "" && e.State != outboxtype.StateFailed {
		// Never "confirm --kind": a partner that processed some of them
		// and then hung would have the others confirmed unsent.
		this := ""
		if e.IdempotencyKey != "" {
			this = "; this one's is " + e.IdempotencyKey
		}
		return fmt.Sprintf("destination %s: %s. Its effects wait without an attempt being counted; they go on when it answers again "+
			"(or cancel them; or confirm only those the receiver's own log shows processed, by the webhook-id it logged: "+
			"%s%s)", destination(e, sit), d, sit.say(ActConfirmLogged, ""), this)
	}
	if s.JobID == nil {
		return "no live River job: nothing will fire it. " + sit.say(ActRequeue, "") + " gives it one (the sweeper would, within --sweep-interval)"
	}
	running := s.JobState != nil && *s.JobState == "running"
	if e.Attempts > 0 && lastErr != "" && !running {
		// Backing off between attempts, in doubt or not: nothing died.
		next := "unknown"
		if s.JobScheduledAt != nil {
			next = relative(*s.JobScheduledAt, now)
		}
		why := fmt.Sprintf("retrying: %d attempts, last error: %s; next attempt %s", e.Attempts, lastErr, next)
		if e.InDoubt || e.State == outboxtype.StateFired {
			why += " with the same key (the last attempt's outcome is unknown, so the provider may have acted: its key makes a repeat harmless)"
		}
		return why
	}
	if e.State == outboxtype.StateFired && e.FiredAt != nil && running && now.Sub(*e.FiredAt) > sit.FiredBound {
		from := sit.BoundFrom
		if from == "" {
			from = "default settings"
		}
		held := ""
		if s.JobHeldBy != nil {
			held = " by " + *s.JobHeldBy
			if st, ok := sit.Holders[*s.JobHeldBy]; ok {
				held += " (" + st + ")"
			}
		}
		head := fmt.Sprintf("not in flight: fired %s under job %d, which River still marks running%s, beyond the crash-recovery bound (%s, %s): ",
			relative(*e.FiredAt, now), *s.JobID, held, sit.FiredBound, from)
		var who string
		switch {
		case sit.Dispatchers == 0:
			who = "no outboxd has reported in the last minute: start one (" + sit.say(ActDispatchers, "") + " lists them). It rescues the job within seconds and "
		case sit.Dispatchers > 0:
			who = fmt.Sprintf("the process that called the provider died mid-call; one of the %d running outboxd rescues the job (within a second; River's own rescuer within 30s) and ", sit.Dispatchers)
		default:
			who = "the worker died mid-call (is any outboxd running? " + sit.say(ActDispatchers, "") + "); an outboxd rescues the job and "
		}
		return head + who + fmt.Sprintf("re-fires it with the same key (at_least_once) or parks it for review (at_most_once). "+
			"To resolve it yourself: %s, then %s if done, or let it re-fire", lookUp(e, sit), sit.say(ActConfirm, ""))
	}
	if running && e.State == outboxtype.StateFired && e.FiredAt != nil {
		from := sit.BoundFrom
		if from == "" {
			from = "default settings"
		}
		rescue := fmt.Sprintf("River rescues the job once the crash-recovery bound passes, %s (%s, %s)",
			relative(e.FiredAt.Add(sit.FiredBound), now), sit.FiredBound, from)
		if sit.RescueAfter > UsualRescueAfter {
			rescue += fmt.Sprintf(" — WARNING: --rescue-after %s is far above its default 2m, so an effect of a dead process waits that long; "+
				"it must only exceed --job-timeout", sit.RescueAfter)
		}
		rescue += ". It then re-fires with the same key (at_least_once) or parks for review (at_most_once)"
		head := fmt.Sprintf("attempt %d fired %s under job %d", e.Attempts, relative(*e.FiredAt, now), *s.JobID)
		if s.JobHeldBy != nil {
			if st, ok := sit.Holders[*s.JobHeldBy]; ok && st != "running" {
				return fmt.Sprintf("not in flight: %s by %s, which is %s: the call ended with its process. %s. "+
					"To resolve it sooner: %s, then %s if done", head, *s.JobHeldBy, st, rescue, lookUp(e, sit), sit.say(ActConfirm, ""))
			}
		}
		if t := sit.CallTimeouts[e.Provider]; t > 0 && now.Sub(*e.FiredAt) > t+RiverRescuerInterval {
			return fmt.Sprintf("not in flight: %s, but %s calls time out after %s, so no call lasts this long: its worker died or hangs. %s. "+
				"To resolve it sooner: %s, then %s if done", head, e.Provider, t, rescue, lookUp(e, sit), sit.say(ActConfirm, ""))
		}
		return fmt.Sprintf("in flight: %s; if its worker died, %s", head, rescue)
	}
	if s.JobScheduledAt != nil && s.JobScheduledAt.Before(now) {
		return fmt.Sprintf("waiting for a worker: job %d %s since %s; is an outboxd serving queue %q?",
			*s.JobID, *s.JobState, relative(*s.JobScheduledAt, now), e.Provider)
	}
	return fmt.Sprintf("job %d %s", *s.JobID, *s.JobState)
}

// destination is e's destination host[:port] as its payload writes it,
// lower case ("" for a provider whose profile names none).
func destination(e *outboxtype.Effect, sit Situation) string {
	return sit.profile(e.Provider).Host(e.Payload)
}

// profile is provider's profile among the situation's.
func (sit Situation) profile(provider string) providers.Profile {
	ps := sit.Profiles
	if ps == nil {
		ps = bundled.Profiles()
	}
	p, _ := ps.Of(provider)
	return p
}

// lookUp says how to find out, at e's provider, whether its key was acted
// on: each provider offers something else (its profile's LookUp).
func lookUp(e *outboxtype.Effect, sit Situation) string {
	return sit.profile(e.Provider).LookUp(e.IdempotencyKey, sit.say(ActReconcile, ""))
}

// WhatNow says what an effect's state means and what to do, for its page
// and outboxctl show: for a live or failed effect the diagnosis of stuck
// (from its newest live River job among jobs, and the effect it waits
// behind, if any); for an ended one, how it ended.
//
// audit is the effect's audit trail, oldest first: an ended effect says
// who ended it (an operator's confirmation is not the provider's answer).
func WhatNow(e *outboxtype.Effect, jobs []outboxtype.Job, audit []outboxtype.AuditEntry, blockedBehind *uuid.UUID, sit Situation) string {
	var last *outboxtype.AuditEntry
	for i := len(audit) - 1; i >= 0; i-- {
		if audit[i].ToState == string(e.State) && audit[i].FromState != audit[i].ToState {
			last = &audit[i]
			break
		}
	}
	switch e.State {
	case outboxtype.StateConfirmed:
		if last != nil && last.Action == outboxtype.ActionConfirm {
			s := fmt.Sprintf("Confirmed by %s %s, not by the provider's answer: an operator recorded that the provider did it (%s)",
				last.Actor, relative(last.CreatedAt, sit.Now), last.Reason)
			if e.ProviderRef != nil {
				s += ", reference " + *e.ProviderRef
			}
			return s + ". Nothing to do; if that was wrong, check the provider."
		}
		s := "Done: the provider acknowledged it"
		if last != nil && last.Action == outboxtype.ActionEventConfirm {
			s = "Done: the provider's event (" + last.Actor + ") confirmed it"
		}
		if e.ConfirmedAt != nil {
			s += " at " + e.ConfirmedAt.UTC().Format(time.RFC3339)
		}
		if e.ProviderRef != nil {
			s += ", reference " + *e.ProviderRef
		}
		return s + ". Nothing to do; a late River job finds it confirmed and does nothing."
	case outboxtype.StateCancelled:
		by := ""
		if last != nil {
			by = fmt.Sprintf(" by %s %s (%s)", last.Actor, relative(last.CreatedAt, sit.Now), last.Reason)
		}
		return "Cancelled" + by + ": no worker fires it again. " + sit.say(ActRetry, "") + " sends it after all (same key)."
	}
	st := outboxtype.StuckEffect{Effect: e, BlockedBehind: blockedBehind}
	for i := len(jobs) - 1; i >= 0 && st.JobID == nil; i-- {
		switch jobs[i].State {
		case "available", "pending", "retryable", "running", "scheduled":
			j := jobs[i]
			st.JobID, st.JobState, st.JobScheduledAt, st.JobHeldBy = &j.ID, &j.State, &j.ScheduledAt, j.HeldBy
		}
	}
	return Explain(st, sit)
}

// failedAdvice says, per failure class, which actions are safe for a
// failed effect and which one could cause a second real-world effect.
func failedAdvice(e *outboxtype.Effect, lastErr string, sit Situation) string {
	retry, cancel, confirm := sit.say(ActRetry, ""), sit.say(ActCancel, ""), sit.say(ActConfirm, "")
	switch {
	case e.AcknowledgedAt != nil:
		return fmt.Sprintf("Acknowledged %s: an operator reviewed it and keeps it failed; nothing to do. %s sends it after all (same key).",
			relative(*e.AcknowledgedAt, sit.Now), retry)
	case strings.HasPrefix(lastErr, outboxtype.ReasonUnqueueable):
		return "Fix the row's provider, then " + retry + "; or " + cancel + "."
	case strings.HasPrefix(lastErr, providers.RefusedPrefix):
		return "outboxd refused it before making any request: no provider saw it, so nothing was done and its key was never used. " +
			"Its payload must change: whoever enqueued it fixes the field named above and enqueues it again, or " + sit.say(ActEditPayload, "") +
			" (audited, same key); if it should not happen, " + cancel + "."
	case strings.HasPrefix(lastErr, outboxtype.ReasonInDoubt) || e.InDoubt && !strings.HasPrefix(lastErr, outboxtype.ReasonKeyWindow):
		events := ""
		if sit.profile(e.Provider).Events {
			events = " (with provider events on, outboxd confirms it by itself when the provider's event arrives)"
		}
		return fmt.Sprintf("An earlier request may have been delivered: %s%s. "+
			"Done: %s. Not done: %s (for at_most_once kinds %s: "+
			"a second delivery if it was done after all). Not wanted: %s.", lookUp(e, sit), events, confirm, retry, sit.say(ActRetryAllowDuplicate, ""), cancel)
	case strings.HasPrefix(lastErr, outboxtype.ReasonKeyWindow):
		return fmt.Sprintf("The provider may have forgotten key %s, so a re-fire could act twice: check at the provider. "+
			"Done: %s. Not done: %s (a new key window). Not wanted: %s.", e.IdempotencyKey, confirm, sit.say(ActRetryForce, ""), cancel)
	case strings.HasPrefix(lastErr, "retries exhausted"):
		return "The provider never acted (each failure proved it): " + retry + " once the cause is fixed (same key, no duplicate), or " + cancel + "."
	default:
		return "The provider refused it (permanent): " + cancel + " if it should not happen, or fix the cause and " + retry + " (same key)."
	}
}

func relative(t, now time.Time) string {
	d := now.Sub(t).Round(time.Second)
	if d >= 0 {
		return d.String() + " ago"
	}
	return "in " + (-d).String()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
