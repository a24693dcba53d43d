package stripeschema

import (
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/providers"
)

// Profile implements providers.Profiler: what operators are told about
// the provider, and the rules their actions follow for its effects.
func (Schema) Profile() providers.Profile {
	return providers.Profile{
		Name:       Name,
		Refs:       true,
		RefExample: "re_…, pi_…, cus_…, tr_…: asking Stripe (reconcile) finds it",
		LookUp: func(key, ask string) string {
			if ask == "" {
				return fmt.Sprintf("ask Stripe for the objects carrying key %s", key)
			}
			return fmt.Sprintf("%s asks Stripe for the objects carrying key %s", ask, key)
		},
		Events:  true,
		Answers: providers.AnswersObjects,
		// Stripe's invalid_request_error with HTTP 400 refused the
		// parameters before acting, and keeps no result for the key.
		RefusedWithoutActing: func(text string) bool {
			return strings.Contains(text, "invalid_request_error") && strings.Contains(text, "(HTTP 400)")
		},
	}
}
