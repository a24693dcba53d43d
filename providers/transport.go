package providers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
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
		return Retryable(fmt.Errorf("not sent: %w", noResponse{err}), 0)
	}
	return InDoubt(fmt.Errorf("no response: %w", noResponse{err}))
}

// ErrNoResponse matches (errors.Is) every error of a call that got no
// response at all.
var ErrNoResponse = errors.New("no response")

type noResponse struct{ err error }

func (e noResponse) Error() string        { return e.err.Error() }
func (e noResponse) Unwrap() error        { return e.err }
func (e noResponse) Is(target error) bool { return target == ErrNoResponse }

// HostOf is the host (and port) of an http(s) base URL, as the attempt
// history shows it.
func HostOf(baseURL string) string {
	return strings.TrimPrefix(strings.TrimPrefix(baseURL, "https://"), "http://")
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

// MaxResponseBytes bounds what is read of one provider response body. A
// Stripe object or a SendGrid answer is a few kilobytes; a server that sends
// more is misbehaving, and reading it whole would cost memory.
const MaxResponseBytes = 1 << 20

// LimitBodies wraps base (nil: http.DefaultTransport) so that reading more
// than max bytes of a response body fails with an error instead of
// buffering it: SDKs that read bodies whole (stripe-go, sendgrid's rest)
// cannot be made to stop otherwise.
func LimitBodies(base http.RoundTripper, max int64) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return limitTransport{base: base, max: max}
}

type limitTransport struct {
	base http.RoundTripper
	max  int64
}

func (t limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.max, max: t.max}
	return resp, nil
}

// ErrResponseTooLarge is returned by a response body read past its limit.
var ErrResponseTooLarge = errors.New("response body over the size limit")

type limitedBody struct {
	rc   io.ReadCloser
	left int64
	max  int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells "exactly max" from "more than max".
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("%w (%d bytes)", ErrResponseTooLarge, b.max)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// RetryAfter parses a Retry-After header, in seconds or as an HTTP date,
// as every HTTP provider honours it.
// It returns zero when the header is absent or malformed.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
