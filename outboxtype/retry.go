package outboxtype

import (
	"math/rand/v2"
	"time"
)

// RetryPolicy is the schedule of attempts after a retryable or in-doubt
// failure: exponential from BaseDelay, capped at MaxDelay, with jitter, for at
// most MaxAttempts fires. Independently of it, no effect is fired later than
// its provider's key window (minus margin) after its first fire.
type RetryPolicy struct {
	// MaxAttempts is the number of fires after which the effect fails.
	// Default 20.
	MaxAttempts int
	// BaseDelay is the delay after the first failed attempt. Default 1s.
	BaseDelay time.Duration
	// MaxDelay caps a single delay. Default 30m.
	MaxDelay time.Duration
}

// Defaults for RetryPolicy's zero values. With them, 20 attempts span three
// to five hours (jitter), well inside Stripe's 24h key window.
const (
	DefaultMaxAttempts = 20
	DefaultBaseDelay   = time.Second
	DefaultMaxDelay    = 30 * time.Minute
)

// WithDefaults fills in the zero fields with the defaults above.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = DefaultBaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultMaxDelay
	}
	return p
}

// Delay returns the wait after failed attempt number attempt (from 1): a
// random duration in [d/2, d] where d = min(MaxDelay, BaseDelay*2^(attempt-1)).
// The jitter keeps many effects failing together from retrying in lockstep.
func (p RetryPolicy) Delay(attempt int) time.Duration {
	p = p.WithDefaults()
	d := p.MaxDelay
	if shift := attempt - 1; shift >= 0 && shift < 40 {
		if exp := p.BaseDelay << shift; exp > 0 && exp < d {
			d = exp
		}
	}
	half := d / 2
	return half + rand.N(d-half+1)
}
