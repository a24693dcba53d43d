package natsschema

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
		RefExample: "the stream and sequence JetStream acknowledged, for example ORDERS/42",
		LookUp: func(key, ask string) string {
			find := fmt.Sprintf("look in the stream for the message with header %s: %s (within the stream's duplicate window a publish with that id is answered as a duplicate, with the stored sequence)", HeaderMsgID, key)
			if ask == "" {
				return find
			}
			return ask + " reads the stream's messages within that window for it; or " + find
		},
		Answers: providers.AnswersObjects,
		RefusedWithoutActing: func(text string) bool {
			return strings.Contains(text, "JetStream refused the message")
		},
	}
}
