package outbox

import (
	"encoding/json"

	"github.com/google/uuid"
)

// eventNamespace roots the UUIDv5 ids EventID derives.
var eventNamespace = uuid.MustParse("0b5f8f3e-9d1a-5c2e-8f47-3a6b1c9d2e70")

// EventID derives a deterministic event id (UUIDv5) from a scope, such as
// "order.paid", and the natural key of the command, such as an order id and
// a payment attempt number. The same inputs always give the same id, so a
// retried command replays its event rather than creating another. Parts are
// encoded unambiguously: ("a:b") and ("a", "b") give different ids.
func EventID(scope string, parts ...string) uuid.UUID {
	name, _ := json.Marshal(append([]string{scope}, parts...)) // strings always marshal
	return uuid.NewSHA1(eventNamespace, name)
}
