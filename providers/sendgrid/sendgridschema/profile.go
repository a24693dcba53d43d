package sendgridschema

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
		RefExample: "the X-Message-Id SendGrid returned, as in its Email Activity",
		LookUp: func(key, ask string) string {
			find := fmt.Sprintf("find the message with custom argument outboxd_idempotency_key=%s in SendGrid's Email Activity", key)
			if ask == "" {
				return find
			}
			return find + " (" + ask + " shows what SendGrid's events told outboxd)"
		},
		Events:  true,
		Answers: providers.AnswersEvents,
		RefusedWithoutActing: func(text string) bool {
			return strings.Contains(text, "HTTP 400") || strings.Contains(text, "HTTP 422")
		},
	}
}
