package engine_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/sendgrid"
	"github.com/outboxd/outboxd/providers/sendgrid/sendgridschema"
	"github.com/outboxd/outboxd/providers/stripe"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
)

func refundEffect() outbox.Effect {
	return outbox.EffectOf("stripe.refund", stripeschema.RefundCreate{PaymentIntent: "pi_123", Amount: outbox.Ptr[int64](500)})
}

func emailEffect(kind string) outbox.Effect {
	return outbox.EffectOf(kind, sendgridschema.Payload{From: sendgridschema.Address{Email: "shop@example.com"},
		To: []sendgridschema.Address{{Email: "ada@example.com"}}, Subject: "Receipt", Text: "Thanks"})
}

// useFakeStripe makes a recording fake Stripe, answering /v1/refunds with
// responses first, the bundle's only provider.
func (b *workerBundle) useFakeStripe(t *testing.T, responses ...fakes.Response) *fakes.FakeStripe {
	t.Helper()
	f := fakes.NewFakeStripe()
	t.Cleanup(f.Close)
	f.Respond("/v1/refunds", responses...)
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_1", APIBase: f.URL, Timeout: time.Second})
	require.NoError(t, err)
	b.cfg.Providers = []providers.Provider{p}
	return f
}

// useFakeSendGrid makes a recording fake SendGrid, answering with responses
// first, the bundle's only provider.
func (b *workerBundle) useFakeSendGrid(t *testing.T, responses ...fakes.Response) *fakes.FakeSendGrid {
	t.Helper()
	f := fakes.NewFakeSendGrid()
	t.Cleanup(f.Close)
	f.Respond(responses...)
	p, err := sendgrid.New(sendgrid.Config{APIKey: "SG.x", APIHost: f.URL, Timeout: time.Second})
	require.NoError(t, err)
	b.cfg.Providers = []providers.Provider{p}
	return f
}

func TestStripeEffectRetriedWithSameKeyAndReplayRecorded(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	f := b.useFakeStripe(t,
		fakes.StripeError(409, "idempotency_error", "idempotency_key_in_use"),
		func(w http.ResponseWriter, r *http.Request) int { <-r.Context().Done(); return 0 }, // times out: in doubt
		fakes.StripeObject("re_1", "Idempotent-Replayed", "true"))
	b.start(t)

	e := b.enqueueEffect(t, refundEffect())
	got := b.waitFor(t, e.ID, outboxtype.StateConfirmed)
	require.Equal(t, 3, got.Attempts)
	require.Equal(t, "re_1", deref(got.ProviderRef))
	require.True(t, got.Replayed, "Stripe's Idempotent-Replayed is recorded")
	reqs := f.Requests()
	require.Len(t, reqs, 3)
	for _, r := range reqs {
		require.Equal(t, e.Key, r.IdempotencyKey, "every attempt carries the effect's key")
	}
}

func TestStripeCardErrorFails(t *testing.T) {
	t.Parallel()
	b := setupWorker(t, workerOpts{})
	f := b.useFakeStripe(t, fakes.StripeError(402, "card_error", "card_declined"))
	b.start(t)
	e := b.enqueueEffect(t, refundEffect())
	got := b.waitFor(t, e.ID, outboxtype.StateFailed)
	require.Contains(t, deref(got.LastError), "card_error")
	require.Len(t, f.Requests(), 1)
}

func TestSendGridInDoubtPolicies(t *testing.T) {
	t.Parallel()
	hang := func(w http.ResponseWriter, r *http.Request) int { <-r.Context().Done(); return 0 }

	t.Run("at_most_once parks the effect and never re-sends", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t, workerOpts{})
		f := b.useFakeSendGrid(t, hang)
		b.start(t)
		e := b.enqueueEffect(t, emailEffect("email.receipt"))
		got := b.waitFor(t, e.ID, outboxtype.StateFailed)
		require.True(t, strings.HasPrefix(deref(got.LastError), outboxtype.ReasonInDoubt), deref(got.LastError))
		b.waitForJob(t, e.ID, "cancelled")
		require.Len(t, f.Requests(), 1, "an email in doubt is never sent again")
	})

	t.Run("at_least_once re-sends with the same key", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t, workerOpts{})
		f := b.useFakeSendGrid(t, hang)
		b.cfg.InDoubt = map[string]providers.InDoubtPolicy{"email.digest": providers.AtLeastOnce}
		b.start(t)
		e := b.enqueueEffect(t, emailEffect("email.digest"))
		got := b.waitFor(t, e.ID, outboxtype.StateConfirmed)
		require.Equal(t, 2, got.Attempts)
		require.Equal(t, "msg_2", deref(got.ProviderRef))
		reqs := f.Requests()
		require.Len(t, reqs, 2)
		require.Equal(t, e.Key, reqs[0].Key)
		require.Equal(t, e.Key, reqs[1].Key)
	})

	t.Run("429 then accepted", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t, workerOpts{})
		f := b.useFakeSendGrid(t, fakes.Status(429))
		b.start(t)
		e := b.enqueueEffect(t, emailEffect("email.receipt"))
		got := b.waitFor(t, e.ID, outboxtype.StateConfirmed)
		require.Equal(t, 1, got.Attempts, "a 429 proves SendGrid refused the mail: re-sent, and not counted as an attempt")
		require.Equal(t, 2, got.TotalAttempts)
		require.Equal(t, "msg_2", deref(got.ProviderRef))
		for _, r := range f.Requests() {
			require.Equal(t, e.Key, r.Key)
		}
	})

	// A server (or proxy) that accepted the mail and then answered 500: the
	// 500 proves nothing, so at_most_once parks the effect instead of
	// sending the mail a second time.
	t.Run("a 5xx is in doubt: at_most_once does not re-send", func(t *testing.T) {
		t.Parallel()
		b := setupWorker(t, workerOpts{})
		f := b.useFakeSendGrid(t, fakes.Status(500))
		b.start(t)
		e := b.enqueueEffect(t, emailEffect("email.receipt"))
		got := b.waitFor(t, e.ID, outboxtype.StateFailed)
		require.True(t, strings.HasPrefix(deref(got.LastError), outboxtype.ReasonInDoubt), deref(got.LastError))
		require.True(t, got.InDoubt)
		require.NotContains(t, deref(got.LastError), "in_doubt:", "the reason names the class once")
		b.waitForJob(t, e.ID, "cancelled")
		require.Len(t, f.Requests(), 1, "sent once")
	})
}
