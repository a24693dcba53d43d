package oncall

import (
	"fmt"

	"github.com/outboxd/outboxd/outboxtype"
)

// Act is an operator action that advice names. Advice is written once
// (Explain, WhatNow) and says each action the way the surface it is shown
// on offers it: a command for outboxctl, a button or page for the web
// view (Situation.Say).
type Act string

// The actions advice names.
const (
	// ActConfirm: record that the provider did it, with its reference.
	ActConfirm Act = "confirm"
	// ActConfirmLogged: confirm only the webhooks a receiver's own log
	// shows processed, by the webhook-ids it logged.
	ActConfirmLogged Act = "confirm-logged"
	// ActRetry: back to pending, same key.
	ActRetry Act = "retry"
	// ActRetryAllowDuplicate: retry an at_most_once effect in doubt.
	ActRetryAllowDuplicate Act = "retry-allow-duplicate"
	// ActRetryForce: retry past a closing key window (a new window).
	ActRetryForce Act = "retry-force"
	// ActCancel: never fire it.
	ActCancel Act = "cancel"
	// ActRelease: let the effects after the named one on its ordering key
	// go on.
	ActRelease Act = "release"
	// ActRequeue: give a live effect with no River job a new job.
	ActRequeue Act = "requeue"
	// ActReconcile: ask the provider what it did with the effect's key.
	ActReconcile Act = "reconcile"
	// ActLimits: the rate limit keys, their rate and pause.
	ActLimits Act = "limits"
	// ActTenants: each tenant's queue.
	ActTenants Act = "tenants"
	// ActDispatchers: the running outboxd processes.
	ActDispatchers Act = "dispatchers"
	// ActEditPayload: correct the payload of an effect no provider saw,
	// and retry it.
	ActEditPayload Act = "edit"
)

// Action is one action as advice names it: what, on which effect (""
// for the effect at hand) and, for a confirmation, with which reference
// when it is known.
type Action struct {
	Act Act
	ID  string
	Ref string
}

// Surface says an action as the place the advice is shown offers it.
type Surface func(Action) string

// CLI says actions as outboxctl commands.
func CLI(x Action) string {
	a, arg := x.Act, ""
	if x.ID != "" {
		arg = " " + x.ID
	}
	switch a {
	case ActConfirm:
		return "`outboxctl confirm" + arg + " --ref " + cmpOr(x.Ref, "…") + "`"
	case ActConfirmLogged:
		return "`outboxctl confirm <webhook-id> … --reason …`"
	case ActRetry:
		return "`outboxctl retry" + arg + "`"
	case ActRetryAllowDuplicate:
		return "`outboxctl retry" + arg + " --allow-duplicate`"
	case ActRetryForce:
		return "`outboxctl retry" + arg + " --force`"
	case ActCancel:
		return "`outboxctl cancel" + arg + "`"
	case ActRelease:
		return "`outboxctl release" + arg + "`"
	case ActRequeue:
		return "`outboxctl requeue" + arg + "`"
	case ActReconcile:
		return "`outboxctl reconcile" + arg + "`"
	case ActLimits:
		return "`outboxctl limits` (and `outboxctl limits set`)"
	case ActTenants:
		return "`outboxctl tenants`"
	case ActDispatchers:
		return "`outboxctl dispatchers`"
	case ActEditPayload:
		return "`outboxctl edit" + arg + " --payload … --reason …`"
	}
	return fmt.Sprintf("`outboxctl %s%s`", a, arg)
}

// Web says actions as the web view offers them: the effect page's buttons
// and the pages in its header.
func Web(x Action) string {
	a, on := x.Act, ""
	if x.ID != "" {
		on = " on " + x.ID
	}
	switch a {
	case ActConfirm:
		if x.Ref != "" {
			return "Confirm" + on + " with reference " + x.Ref
		}
		return "Confirm" + on + " (with the provider's reference)"
	case ActConfirmLogged:
		return "Search with the webhook-ids the receiver logged pasted in, tick the effects found and Confirm them"
	case ActRetry:
		return "Retry" + on
	case ActRetryAllowDuplicate:
		return "Retry" + on + " with \"allow a duplicate\" ticked"
	case ActRetryForce:
		return "Retry" + on + " with \"force\" ticked"
	case ActCancel:
		return "Cancel" + on
	case ActRelease:
		return "Release" + on
	case ActRequeue:
		return "Requeue" + on
	case ActReconcile:
		return "Ask the provider" + on
	case ActLimits:
		return "the Limits page (it sets a key's rate)"
	case ActTenants:
		return "the Limits page's tenants"
	case ActDispatchers:
		return "the Dispatchers page"
	case ActEditPayload:
		return "Edit payload" + on
	}
	return string(a) + on
}

// say is the situation's surface, outboxctl's by default.
func (sit Situation) say(a Act, id string) string {
	if sit.Say != nil {
		return sit.Say(Action{Act: a, ID: id})
	}
	return CLI(Action{Act: a, ID: id})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Refusal is why an action was not applied to ch's effect (ch.Skipped),
// with, when an option lets it go ahead once the operator checked what
// the refusal says, that option as surface offers it.
func Refusal(ch outboxtype.Change, surface Surface) string {
	var act Act
	switch ch.Override {
	case outboxtype.OverrideForce:
		act = ActRetryForce
	case outboxtype.OverrideAllowDuplicate:
		act = ActRetryAllowDuplicate
	default:
		return ch.Skipped
	}
	id := ""
	if ch.Effect != nil {
		id = ch.Effect.ID.String()
	}
	return ch.Skipped + " (" + surface(Action{Act: act, ID: id}) + ")"
}
