package kafkaschema

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
		RefExample: "the topic, partition and offset the broker acknowledged, for example orders/3/1042",
		LookUp: func(key, _ string) string {
			return fmt.Sprintf("look in the topic for a record with header %s: %s (Kafka keeps no index of it: a consumer that deduplicates by it, as the inbox package does, has it in its own table)", HeaderKey, key)
		},
		Answers: providers.AnswersNothing,
		RefusedWithoutActing: func(text string) bool {
			return strings.Contains(text, "kafka refused the record")
		},
	}
}
