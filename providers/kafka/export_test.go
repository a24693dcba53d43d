package kafka

// Connections reports p's connections open now and ever opened.
func Connections(p *Provider) (open, ever int64) { return p.health.connections() }

// ForgetDialFailure clears p's record of a failed dial, as it is for a
// produce that begins before any dial has failed (concurrent produces as
// the brokers go away).
func ForgetDialFailure(p *Provider) { p.health.failed.Store(false) }
