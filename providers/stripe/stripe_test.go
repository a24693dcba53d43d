package stripe_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/stripe"
)

const key = "902594f92ce5e6b4941d38d60c0700a2a33fef1d96936490e6dd135dd01497d8"

func newProvider(t *testing.T, base string, timeout time.Duration) *stripe.Provider {
	t.Helper()
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_123", APIBase: base, Timeout: timeout})
	require.NoError(t, err)
	return p
}

func req(payload string) providers.Request {
	return providers.Request{EffectID: "e", Kind: "stripe.refund", Key: key, Payload: json.RawMessage(payload), Attempt: 1}
}

// Every documented operation, as stripe-mock (Stripe's OpenAPI spec)
// accepts it.
var operationPayloads = map[string]struct {
	payload, refPrefix string
}{
	"payment_intent.create":  {`{"operation": "payment_intent.create", "params": {"amount": 4200, "currency": "eur", "customer": "cus_123", "payment_method": "pm_card_visa", "confirm": true, "capture_method": "manual", "description": "order ord_42", "metadata": {"order": "ord_42"}}}`, "pi_"},
	"payment_intent.capture": {`{"operation": "payment_intent.capture", "params": {"id": "pi_123", "amount_to_capture": 4000}}`, "pi_"},
	"payment_intent.cancel":  {`{"operation": "payment_intent.cancel", "params": {"id": "pi_123", "cancellation_reason": "requested_by_customer"}}`, "pi_"},
	"refund.create":          {`{"operation": "refund.create", "params": {"payment_intent": "pi_123", "amount": 500, "reason": "requested_by_customer", "metadata": {"ticket": "T-9"}}}`, "re_"},
	"customer.create":        {`{"operation": "customer.create", "params": {"email": "ada@example.com", "name": "Ada", "metadata": {"user": "42"}}}`, "cus_"},
	"transfer.create":        {`{"operation": "transfer.create", "params": {"amount": 1000, "currency": "eur", "destination": "acct_123", "transfer_group": "ord_42"}}`, "tr_"},
}

func TestOperationsAgainstStripeMock(t *testing.T) {
	t.Parallel()
	base := startStripeMock(t)
	p := newProvider(t, base, 10*time.Second)
	require.Len(t, operationPayloads, len(stripe.Operations()), "every operation is exercised")
	for op, tc := range operationPayloads {
		t.Run(op, func(t *testing.T) {
			require.NoError(t, p.ValidatePayload("k", json.RawMessage(tc.payload)))
			res, err := p.Send(context.Background(), req(tc.payload))
			require.NoError(t, err, "stripe-mock rejected the request shape")
			require.True(t, strings.HasPrefix(res.Ref, tc.refPrefix), "ref %q", res.Ref)
		})
	}
}

func TestKeyAndMetadataOnEveryRequest(t *testing.T) {
	t.Parallel()
	f := fakes.NewFakeStripe()
	defer f.Close()
	p := newProvider(t, f.URL, 5*time.Second)
	r := req(operationPayloads["refund.create"].payload)
	f.Respond("/v1/refunds", fakes.StripeError(500, "api_error", ""))
	_, err := p.Send(context.Background(), r)
	require.Error(t, err)
	_, err = p.Send(context.Background(), r)
	require.NoError(t, err)
	reqs := f.Requests()
	require.Len(t, reqs, 2, "stripe-go's own retries are off: one request per attempt")
	for _, rq := range reqs {
		require.Equal(t, key, rq.IdempotencyKey)
		require.Equal(t, key, rq.Form.Get("metadata["+stripe.MetadataKey+"]"))
		require.Equal(t, "pi_123", rq.Form.Get("payment_intent"))
	}
}

func TestReplayIsRecorded(t *testing.T) {
	t.Parallel()
	f := fakes.NewFakeStripe()
	defer f.Close()
	p := newProvider(t, f.URL, 5*time.Second)
	f.Respond("/v1/refunds", fakes.StripeObject("re_1"), fakes.StripeObject("re_1", "Idempotent-Replayed", "true"))
	r := req(operationPayloads["refund.create"].payload)
	first, err := p.Send(context.Background(), r)
	require.NoError(t, err)
	require.Equal(t, providers.Result{Ref: "re_1"}, first)
	second, err := p.Send(context.Background(), r)
	require.NoError(t, err)
	require.Equal(t, providers.Result{Ref: "re_1", Replayed: true}, second)
}

func TestErrorClasses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		resp       fakes.Response
		class      providers.Class
		retryAfter time.Duration
	}{
		{"409 key in use", fakes.StripeError(409, "idempotency_error", "idempotency_key_in_use"), providers.ClassRetryable, 0},
		{"429 rate limited", fakes.StripeError(429, "invalid_request_error", "rate_limit", "Retry-After", "3"), providers.ClassRetryable, 3 * time.Second},
		{"429 rate limited, no Retry-After", fakes.StripeError(429, "invalid_request_error", "rate_limit"), providers.ClassRetryable, 0},
		{"429 lock_timeout: one object, not the account", fakes.StripeError(429, "invalid_request_error", "lock_timeout"), providers.ClassRetryable, 0},
		{"500: Stripe may have acted", fakes.StripeError(500, "api_error", ""), providers.ClassInDoubt, 0},
		{"503 Should-Retry true stays in doubt", fakes.StripeError(503, "api_error", "", "Stripe-Should-Retry", "true", "Retry-After", "2"), providers.ClassInDoubt, 2 * time.Second},
		{"500 Should-Retry false", fakes.StripeError(500, "api_error", "", "Stripe-Should-Retry", "false"), providers.ClassPermanent, 0},
		{"400 Should-Retry true", fakes.StripeError(400, "invalid_request_error", "", "Stripe-Should-Retry", "true"), providers.ClassRetryable, 0},
		{"idempotency_error", fakes.StripeError(400, "idempotency_error", "idempotency_key_reused"), providers.ClassPermanent, 0},
		{"card_error", fakes.StripeError(402, "card_error", "card_declined"), providers.ClassPermanent, 0},
		{"invalid_request_error", fakes.StripeError(400, "invalid_request_error", "resource_missing"), providers.ClassPermanent, 0},
		{"401", fakes.StripeError(401, "invalid_request_error", ""), providers.ClassPermanent, 0},
		{"403", fakes.StripeError(403, "invalid_request_error", ""), providers.ClassPermanent, 0},
		{"502 from a proxy, not JSON", func(w http.ResponseWriter, _ *http.Request) int {
			w.WriteHeader(502)
			_, _ = w.Write([]byte("<html>bad gateway</html>"))
			return 502
		}, providers.ClassInDoubt, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fakes.NewFakeStripe()
			defer f.Close()
			f.Respond("/v1/refunds", tc.resp)
			p := newProvider(t, f.URL, 5*time.Second)
			_, err := p.Send(context.Background(), req(operationPayloads["refund.create"].payload))
			require.Error(t, err)
			class, after := providers.Classify(err)
			require.Equal(t, tc.class, class, "error: %v", err)
			require.Equal(t, tc.retryAfter, after)
			require.Equal(t, strings.HasPrefix(tc.name, "429 rate limited"), providers.IsThrottled(err),
				"only Stripe's rate limiter slows the account's limit key")
			require.Len(t, f.Requests(), 1)
		})
	}
}

func TestTimeoutThenRetryWithSameKey(t *testing.T) {
	t.Parallel()
	f := fakes.NewFakeStripe()
	defer f.Close()
	f.Respond("/v1/refunds", func(w http.ResponseWriter, r *http.Request) int {
		<-r.Context().Done() // Stripe acted, but the answer never arrives
		return 0
	})
	p := newProvider(t, f.URL, time.Second)
	r := req(operationPayloads["refund.create"].payload)
	_, err := p.Send(context.Background(), r)
	class, _ := providers.Classify(err)
	require.Equal(t, providers.ClassInDoubt, class, "error: %v", err)
	res, err := p.Send(context.Background(), r)
	require.NoError(t, err)
	require.NotEmpty(t, res.Ref)
	reqs := f.Requests()
	require.Len(t, reqs, 2)
	require.Equal(t, reqs[0].IdempotencyKey, reqs[1].IdempotencyKey)
}

func TestValidatePayloadRejectsBadInput(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"unknown operation":        `{"operation": "charge.create", "params": {}}`,
		"missing params":           `{"operation": "refund.create"}`,
		"unknown field":            `{"operation": "refund.create", "params": {"payment_intent": "pi_1", "amout": 5}}`,
		"refund without target":    `{"operation": "refund.create", "params": {"amount": 5}}`,
		"refund with both targets": `{"operation": "refund.create", "params": {"payment_intent": "pi_1", "charge": "ch_1"}}`,
		"negative amount":          `{"operation": "refund.create", "params": {"payment_intent": "pi_1", "amount": -5}}`,
		"bad reason":               `{"operation": "refund.create", "params": {"payment_intent": "pi_1", "reason": "because"}}`,
		"pi without amount":        `{"operation": "payment_intent.create", "params": {"currency": "eur"}}`,
		"pi bad currency":          `{"operation": "payment_intent.create", "params": {"amount": 5, "currency": "EURO"}}`,
		"pi amount as string":      `{"operation": "payment_intent.create", "params": {"amount": "5", "currency": "eur"}}`,
		"capture without id":       `{"operation": "payment_intent.capture", "params": {}}`,
		"capture wrong id":         `{"operation": "payment_intent.capture", "params": {"id": "ch_1"}}`,
		"cancel bad reason":        `{"operation": "payment_intent.cancel", "params": {"id": "pi_1", "cancellation_reason": "meh"}}`,
		"customer bad email":       `{"operation": "customer.create", "params": {"email": "nope"}}`,
		"transfer no destination":  `{"operation": "transfer.create", "params": {"amount": 5, "currency": "eur"}}`,
		"metadata too long":        `{"operation": "customer.create", "params": {"metadata": {"k": "` + strings.Repeat("v", 501) + `"}}}`,
		"reserved metadata key":    `{"operation": "payment_intent.create", "params": {"amount": 5, "currency": "eur", "metadata": {"outboxd_idempotency_key": "x"}}}`,
	}
	for name, payload := range bad {
		err := stripe.Schema{}.ValidatePayload("k", json.RawMessage(payload))
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "payload", name)
	}
	err := stripe.Schema{}.ValidatePayload("k", json.RawMessage(bad["reserved metadata key"]))
	require.ErrorContains(t, err, "payload.params.metadata.outboxd_idempotency_key: reserved")
}

func TestAccountLimit(t *testing.T) {
	t.Parallel()
	live := stripe.AccountLimit("sk_live_51Habcdefghijklmn9Xy2")
	require.Equal(t, providers.Limit{Key: "stripe:live-9Xy2", Rate: stripe.LiveRate}, live)
	test := stripe.AccountLimit("rk_test_51Habcdefghijklmn4321")
	require.Equal(t, providers.Limit{Key: "stripe:test-4321", Rate: stripe.TestRate}, test)
	require.NotContains(t, live.Key, "51Habcdefghijklmn", "a limit key never holds the API key")
}

func TestNewRequiresKey(t *testing.T) {
	t.Parallel()
	_, err := stripe.New(stripe.Config{})
	require.ErrorContains(t, err, "Config.APIKey")
	_, err = stripe.New(stripe.Config{APIKey: "sk_test_1", APIBase: "ftp://x"})
	require.ErrorContains(t, err, "Config.APIBase")
}

func TestAPIKeyNeverInErrors(t *testing.T) {
	t.Parallel()
	f := fakes.NewFakeStripe()
	defer f.Close()
	f.Respond("/v1/refunds", func(w http.ResponseWriter, r *http.Request) int {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(401)
		_, _ = w.Write([]byte(`{"error": {"type": "invalid_request_error", "message": "Invalid API Key provided: ` +
			strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") + `"}}`))
		return 401
	})
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_supersecret", APIBase: f.URL})
	require.NoError(t, err)
	_, err = p.Send(context.Background(), req(operationPayloads["refund.create"].payload))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "sk_test_supersecret")
	require.Contains(t, err.Error(), "[redacted]")
}

func TestOversizedResponseIsCutOff(t *testing.T) {
	t.Parallel()
	f := fakes.NewFakeStripe()
	defer f.Close()
	f.Respond("/v1/refunds", func(w http.ResponseWriter, _ *http.Request) int {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		_, _ = w.Write([]byte(`{"id": "re_1", "padding": "` + strings.Repeat("x", 4*providers.MaxResponseBytes) + `"}`))
		return 200
	})
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_1", APIBase: f.URL})
	require.NoError(t, err)
	_, err = p.Send(context.Background(), req(operationPayloads["refund.create"].payload))
	require.Error(t, err)
	require.Contains(t, err.Error(), "over the size limit")
	class, _ := providers.Classify(err)
	require.Equal(t, providers.ClassInDoubt, class, "Stripe acted: a re-send with the same key returns the object")
}

// StartStripeMock runs stripe-mock for the test and returns its base URL.
// Without the binary the test is skipped, except in CI (CI set), where
// .ci/run installs it and its absence is a failure.
func startStripeMock(t testing.TB) string {
	t.Helper()
	bin, err := fakes.FindStripeMock()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	url, stop, err := fakes.RunStripeMock(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}
