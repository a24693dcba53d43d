package providers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/providers"
)

// Stripe and webhook answers are read this one way, HTTP-date form included.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	h := http.Header{}
	require.Zero(t, providers.RetryAfter(h, now))
	h.Set("Retry-After", "30")
	require.Equal(t, 30*time.Second, providers.RetryAfter(h, now))
	h.Set("Retry-After", now.Add(90*time.Second).Format(http.TimeFormat))
	require.Equal(t, 90*time.Second, providers.RetryAfter(h, now))
	h.Set("Retry-After", "soon")
	require.Zero(t, providers.RetryAfter(h, now))
}
