package providers

import (
	"context"
	"fmt"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
)

// WatchWrites returns a context that notes whether any byte of an HTTP
// request made with it was written to a connection, and a func that reports
// it. Providers use it to tell "provably not sent" from "in doubt".
func WatchWrites(ctx context.Context) (context.Context, func() bool) {
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaderField: func(string, []string) { wrote.Store(true) },
	})
	return ctx, wrote.Load
}

// TransportError classifies the error of an HTTP call that got no response:
// retryable when nothing was written (DNS, refused connection, TLS), in
// doubt otherwise (timeout or reset after the request may have arrived).
func TransportError(err error, wrote bool) error {
	if !wrote {
		return Retryable(fmt.Errorf("not sent: %w", err), 0)
	}
	return InDoubt(fmt.Errorf("no response: %w", err))
}

// BaseURL returns raw (or def when empty) without a trailing slash, or an
// error naming setting when it is not an http(s) URL.
func BaseURL(raw, def, setting string) (string, error) {
	if raw == "" {
		raw = def
	}
	if !strings.HasPrefix(raw, "http://") && !strings.HasPrefix(raw, "https://") {
		return "", fmt.Errorf("%q must be an http(s) URL (%s)", raw, setting)
	}
	return strings.TrimRight(raw, "/"), nil
}
