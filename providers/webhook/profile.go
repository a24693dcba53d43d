package webhook

import (
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/providers"
)

// Profile implements providers.Profiler: what operators are told about
// the provider, and the rules their actions follow for its effects.
func (Schema) Profile() providers.Profile {
	return providers.Profile{
		Name: Name,
		// A receiver's 2xx carries no id of its own: a confirmed webhook is
		// recorded with its webhook-id.
		Refs: false,
		LookUp: func(key, _ string) string {
			return fmt.Sprintf("ask the receiver whether it processed webhook-id %s (its Idempotency-Key)", key)
		},
		Answers: providers.AnswersNothing,
		RefusedWithoutActing: func(text string) bool {
			return strings.Contains(text, "HTTP 400") || strings.Contains(text, "HTTP 422")
		},
		Host: hostOf,
	}
}
