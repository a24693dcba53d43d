package natsschema

import (
	"fmt"
	"strings"

	"github.com/outboxd/outboxd/providers"
)

func init() {
	providers.Register(providers.Profile{
		Name:       Name,
		Refs:       true,
		RefExample: "the stream and sequence JetStream acknowledged, for example ORDERS/42",
		LookUp: func(key, _ string) string {
			return fmt.Sprintf("look in the stream for the message with header %s: %s (within the stream's duplicate window a publish with that id is answered as a duplicate, with the stored sequence)", HeaderMsgID, key)
		},
		Answers: providers.AnswersNothing,
		RefusedWithoutActing: func(text string) bool {
			return strings.Contains(text, "JetStream refused the message")
		},
	})
}
