package webhook_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

func newProvider(t *testing.T, cfg webhook.Config) *webhook.Provider {
	t.Helper()
	if cfg.Secret == "" {
		cfg.Secret = secret
	}
	p, err := webhook.New(cfg)
	require.NoError(t, err)
	return p
}

func request(url, body string) providers.Request {
	return providers.Request{
		EffectID: "7d0c2a52-1111-4d6b-9c34-2b9d2d0b7a11",
		Kind:     "webhook.order_paid",
		Key:      "5c96150ae10100a82a508e4697e4efc7b3bbe1afbb9a526cf0b924bd0c44657e",
		Payload:  json.RawMessage(`{"url": "` + url + `", "body": ` + body + `, "headers": {"X-Tenant": "acme"}}`),
		Attempt:  1,
	}
}

func TestSendIsSignedPerStandardWebhooks(t *testing.T) {
	t.Parallel()
	verifier, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	var got http.Header
	var gotBody []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotBody, _ = io.ReadAll(r.Body)
		got = r.Header.Clone()
		if err := verifier.Verify(gotBody, r.Header); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	p := newProvider(t, webhook.Config{AllowedNetworks: loopback})
	req := request(srv.URL+"/hook", `{"type": "order.paid", "order": "ord_42"}`)
	_, err = p.Send(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, req.Key, got.Get("webhook-id"))
	require.Equal(t, req.Key, got.Get("Idempotency-Key"))
	require.Equal(t, "acme", got.Get("X-Tenant"))
	require.Equal(t, "application/json", got.Get("Content-Type"))
	require.True(t, strings.HasPrefix(got.Get("webhook-signature"), "v1,"))
	require.JSONEq(t, `{"type": "order.paid", "order": "ord_42"}`, string(gotBody))
}

func TestSendClassifiesResponses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		handler    http.HandlerFunc
		class      providers.Class
		retryAfter time.Duration
		overloaded bool // the receiver's limit key slows down
	}{
		{"410 is permanent", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) }, providers.ClassPermanent, 0, false},
		{"500 is in doubt: the receiver may have acted", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }, providers.ClassInDoubt, 0, false},
		{"503 with Retry-After", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(503)
		}, providers.ClassInDoubt, 7 * time.Second, true},
		{"502 says nothing about load", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(502) }, providers.ClassInDoubt, 0, false},
		{"429 with Retry-After", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		}, providers.ClassRetryable, 120 * time.Second, false},
		{"redirect is not followed", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://elsewhere.example/", http.StatusFound)
		}, providers.ClassPermanent, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var hits int
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits++
				tc.handler(w, r)
			}))
			defer srv.Close()
			p := newProvider(t, webhook.Config{AllowedNetworks: loopback})
			_, err := p.Send(context.Background(), request(srv.URL, `{}`))
			require.Error(t, err)
			class, after := providers.Classify(err)
			require.Equal(t, tc.class, class, "error: %v", err)
			require.Equal(t, tc.retryAfter, after)
			require.Equal(t, tc.overloaded, providers.IsOverloaded(err))
			require.Equal(t, 1, hits, "exactly one request per attempt")
		})
	}
}

func TestSendTransportFailures(t *testing.T) {
	t.Parallel()

	t.Run("refused connection was not sent: retryable", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close())
		p := newProvider(t, webhook.Config{AllowedNetworks: loopback})
		_, err = p.Send(context.Background(), request("http://"+addr, `{}`))
		class, _ := providers.Classify(err)
		require.Equal(t, providers.ClassRetryable, class, "error: %v", err)
	})

	t.Run("timeout after sending is in doubt", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(release)
		p := newProvider(t, webhook.Config{AllowedNetworks: loopback, Timeout: 200 * time.Millisecond})
		_, err := p.Send(context.Background(), request(srv.URL, `{}`))
		class, _ := providers.Classify(err)
		require.Equal(t, providers.ClassInDoubt, class, "error: %v", err)
	})
}

func TestDialGuard(t *testing.T) {
	t.Parallel()
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits++ }))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	// "localhost" passes every check on the URL string; only the dial-time
	// check sees that it resolves to 127.0.0.1.
	byName := request("http://localhost:"+port, `{}`)

	t.Run("loopback refused by default", func(t *testing.T) {
		p := newProvider(t, webhook.Config{})
		_, err := p.Send(context.Background(), byName)
		var blocked *webhook.BlockedError
		require.ErrorAs(t, err, &blocked)
		require.Equal(t, "loopback", blocked.Reason)
		class, _ := providers.Classify(err)
		require.Equal(t, providers.ClassPermanent, class)
		require.Zero(t, hits, "nothing reached the receiver")
	})

	t.Run("loopback delivered when allowed", func(t *testing.T) {
		p := newProvider(t, webhook.Config{AllowedNetworks: loopback})
		_, err := p.Send(context.Background(), byName)
		require.NoError(t, err)
		require.Equal(t, 1, hits)
	})
}

// TestAnIPv4MappedNetworkIsRefused: addresses are checked in their IPv4
// form, so an allowed network of IPv4-mapped IPv6 addresses would match
// nothing while reading as if it allowed something; it is refused with
// its IPv4 form.
func TestAnIPv4MappedNetworkIsRefused(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"::ffff:0:0/96": "0.0.0.0/0", "::ffff:10.0.0.0/104": "10.0.0.0/8", "::ffff:10.0.0.1/128": "10.0.0.1/32"} {
		_, err := webhook.New(webhook.Config{Secret: secret, AllowedNetworks: []netip.Prefix{netip.MustParsePrefix(in)}})
		require.ErrorContains(t, err, "write it as "+want, in)
	}
	_, err := webhook.New(webhook.Config{Secret: secret, AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("10.0.0.0/8")}})
	require.NoError(t, err, "IPv6 and IPv4 networks as written")
}

func TestValidatePayload(t *testing.T) {
	t.Parallel()
	s := webhook.Schema{}
	good := `{"url": "https://hooks.example.com/x", "body": {"a": 1}}`
	require.NoError(t, s.ValidatePayload("k", json.RawMessage(good)))
	bad := map[string]string{
		"missing url":         `{"body": {}}`,
		"non-http scheme":     `{"url": "ftp://hooks.example.com", "body": {}}`,
		"credentials":         `{"url": "https://user:pw@hooks.example.com", "body": {}}`,
		"no host":             `{"url": "https:///path", "body": {}}`,
		"missing body":        `{"url": "https://hooks.example.com"}`,
		"null body":           `{"url": "https://hooks.example.com", "body": null}`,
		"private IP literal":  `{"url": "http://10.0.0.5/hook", "body": {}}`,
		"metadata IP literal": `{"url": "http://169.254.169.254/latest", "body": {}}`,
		"unknown field":       `{"url": "https://hooks.example.com", "body": {}, "method": "GET"}`,
		"reserved header":     `{"url": "https://hooks.example.com", "body": {}, "headers": {"webhook-id": "x"}}`,
		"header injection":    `{"url": "https://hooks.example.com", "body": {}, "headers": {"X-A": "1\r\nX-B: 2"}}`,
		"URL too long":        `{"url": "https://hooks.example.com/` + strings.Repeat("a", webhook.MaxURLLength) + `", "body": {}}`,
	}
	for name, payload := range bad {
		err := s.ValidatePayload("k", json.RawMessage(payload))
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "payload", name)
	}
	// An allowlisted private literal is accepted.
	require.NoError(t, webhook.Schema{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}.
		ValidatePayload("k", json.RawMessage(`{"url": "http://10.0.0.5/hook", "body": {}}`)))
}

func TestNewRejectsBadSecrets(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", "whsec_!!!not-base64"} {
		_, err := webhook.New(webhook.Config{Secret: s})
		require.Error(t, err, s)
		require.Contains(t, err.Error(), "Config.Secret")
	}
}

// TestSecretRotationSignsWithBoth: during a rotation every request carries
// a signature by the new secret and one by each secret being retired, so a
// receiver verifying with either accepts it; errors never show either.
func TestSecretRotationSignsWithBoth(t *testing.T) {
	t.Parallel()
	const newSecret = "whsec_bmV3IHNlY3JldCBmb3Igb3V0Ym94ZCByb3RhdGlvbg=="
	var got http.Header
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		body, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	p := newProvider(t, webhook.Config{Secret: newSecret, PreviousSecrets: []string{secret}, AllowedNetworks: loopback})
	_, err := p.Send(context.Background(), request(srv.URL, `{"n": 1}`))
	require.NoError(t, err)
	require.Len(t, strings.Fields(got.Get("webhook-signature")), 2, "one signature per secret")
	for _, s := range []string{newSecret, secret} {
		v, err := standardwebhooks.NewWebhook(s)
		require.NoError(t, err)
		require.NoError(t, v.Verify(body, got), "a receiver verifying with %s…", s[:12])
	}
	other, err := standardwebhooks.NewWebhook("whsec_b3RoZXIgc2VjcmV0IG5vdCBpbiB0aGUgcm90YXRpb24=")
	require.NoError(t, err)
	require.Error(t, other.Verify(body, got))
	require.Contains(t, p.Secrets(), secret, "retired secrets are redacted too")

	_, err = webhook.New(webhook.Config{Secret: newSecret, PreviousSecrets: []string{"not-a-secret"}})
	require.ErrorContains(t, err, "PreviousSecrets[0]")
	_, err = webhook.New(webhook.Config{Secret: newSecret, PreviousSecrets: []string{newSecret}})
	require.ErrorContains(t, err, "is the current Secret")
}
