package oncall

import (
	"fmt"
	"time"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
)

// Suggest says what to do about the effect given what the provider holds
// (p: its provider's profile, Operator.Profile; window: the provider's key
// window minus margin, 0 for none), in the
// words of the surface it is shown on, and which action it suggests: a
// confirmation with the one object found (Ref), a retry, or none.
func Suggest(r *outboxtype.Reconciliation, p providers.Profile, window time.Duration, say Surface, now time.Time) (string, Action) {
	e := r.Effect
	id := e.ID.String()
	none := Action{}
	switch n := len(r.Found); {
	case p.Answers == providers.AnswersNothing:
		return p.LookUp(e.IdempotencyKey, "") + "; if it acted: " + say(Action{Act: ActConfirm, ID: id}), none
	case n > 1:
		return fmt.Sprintf("%d objects carry the key: the request was applied more than once; check them and undo the extra ones; do not retry", n), none
	case n == 1 && e.State == outboxtype.StateConfirmed:
		if e.ProviderRef != nil && *e.ProviderRef != "" && r.Found[0].ID != "" && *e.ProviderRef != r.Found[0].ID {
			return fmt.Sprintf("confirmed with ref %s, but the provider holds %s: check both", *e.ProviderRef, r.Found[0].ID), none
		}
		return "confirmed, and the provider agrees: nothing to do", none
	case n == 1 && e.State == outboxtype.StateCancelled:
		return fmt.Sprintf("cancelled, but the provider acted (%s): undo it there if it must not stand", r.Found[0].ID), none
	case n == 1 && r.Found[0].ID != "":
		act := Action{Act: ActConfirm, ID: id, Ref: r.Found[0].ID}
		return "the provider acted: " + say(act), act
	case p.Answers == providers.AnswersEvents:
		return "no event of " + e.Provider + " recorded for it: " + p.LookUp(e.IdempotencyKey, "") + "; " +
			"found: " + say(Action{Act: ActConfirm, ID: id}) + "; not found: " + say(Action{Act: ActRetryAllowDuplicate, ID: id}) +
			" risks nothing only if it was truly not sent", none
	case e.State == outboxtype.StateConfirmed:
		return "confirmed, but the provider holds no object for the key: check the provider by hand", none
	case e.State == outboxtype.StatePending || e.State == outboxtype.StateCancelled:
		return "nothing at the provider, as expected", none
	}
	if window > 0 && e.KeyWindowFrom != nil && now.Sub(*e.KeyWindowFrom) > window {
		act := Action{Act: ActRetryForce, ID: id}
		return "nothing at the provider, but the key window has passed: a re-fire is a new request; " + say(act) + " after making sure", act
	}
	act := Action{Act: ActRetry, ID: id}
	return "nothing at the provider: a retry is safe within the key window (" + say(act) + "; for at_most_once kinds " +
		say(Action{Act: ActRetryAllowDuplicate, ID: id}) + ")", act
}
