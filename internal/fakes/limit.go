package fakes

import (
	"math"
	"sync"

	"golang.org/x/time/rate"
)

// limit is a provider's own rate limit as the fakes enforce it: a token
// bucket of perSecond that holds burst (a fifth of a second unless set:
// a partner's API that tolerates a short burst). The zero value allows
// everything.
type limit struct {
	mu sync.Mutex
	l  *rate.Limiter
}

func (l *limit) set(perSecond float64) {
	l.setBurst(perSecond, perSecond/5)
}

// setBurst sets the rate and how many requests the bucket holds.
func (l *limit) setBurst(perSecond, burst float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if perSecond <= 0 {
		l.l = nil
		return
	}
	l.l = rate.NewLimiter(rate.Limit(perSecond), int(math.Max(1, math.Ceil(burst))))
}

// allow says whether a request arriving now is within the limit.
func (l *limit) allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.l == nil || l.l.Allow()
}
