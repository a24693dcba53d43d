package outbox

import "github.com/outboxd/outboxd/internal/engine"

// IntakeChannel is the notification channel on which Enqueue wakes the
// dispatchers (NotifyDispatchers); the payload is the schema.
const IntakeChannelForTests = engine.IntakeChannel
