package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/sendgrid/sendgridschema"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
	"github.com/outboxd/outboxd/providers/webhook"
)

// typedStripe is a typed value of every Stripe operation outboxd performs.
var typedStripe = map[string]providers.Payload{
	"payment_intent.create": stripeschema.PaymentIntentCreate{Amount: outbox.Ptr[int64](4200), Currency: "eur",
		Customer: "cus_123", PaymentMethod: "pm_card_visa", Confirm: outbox.Ptr(true), OffSession: outbox.Ptr(true)},
	"payment_intent.capture": stripeschema.PaymentIntentCapture{ID: "pi_123", AmountToCapture: outbox.Ptr[int64](4200)},
	"payment_intent.cancel":  stripeschema.PaymentIntentCancel{ID: "pi_123", CancellationReason: "abandoned"},
	"refund.create":          stripeschema.RefundCreate{PaymentIntent: "pi_123", Amount: outbox.Ptr[int64](500), Reason: "requested_by_customer"},
	"customer.create":        stripeschema.CustomerCreate{Email: "ada@example.com", Name: "Ada"},
	"transfer.create":        stripeschema.TransferCreate{Amount: outbox.Ptr[int64](1000), Currency: "eur", Destination: "acct_123"},
}

// TestTypedPayloadsCoverEveryBuiltInOperation: each typed value builds the
// effect Enqueue stores, and what the provider reads back from the row is
// the value the caller wrote.
func TestTypedPayloadsCoverEveryBuiltInOperation(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	require.ElementsMatch(t, stripeschema.Operations(), keys(typedStripe), "a typed value for every Stripe operation")

	effects := []outbox.Effect{
		outbox.EffectOf("webhook.order_paid", webhook.Payload{URL: "https://hooks.example.com/in", Body: json.RawMessage(`{"order": "ord_42"}`),
			Headers: map[string]string{"X-Tenant": "acme"}}),
		outbox.EffectOf("email.receipt", sendgridschema.Payload{From: sendgridschema.Address{Email: "shop@example.com"},
			To: []sendgridschema.Address{{Email: "ada@example.com", Name: "Ada"}}, Subject: "Receipt", Text: "Thanks"}),
	}
	for op, p := range typedStripe {
		effects = append(effects, outbox.EffectOf("stripe."+op, p))
	}
	ev := orderPaid(uuid.New(), "4200")
	res, err := b.enqueue(t, ev, effects...)
	require.NoError(t, err)
	require.Len(t, res.Effects, len(effects))

	stored := map[string]struct {
		provider string
		payload  json.RawMessage
	}{}
	rows, err := b.db.Pool.Query(ctx, `SELECT kind, provider, payload FROM `+b.db.Schema+`.side_effects WHERE source_id = $1`, ev.ID)
	require.NoError(t, err)
	for rows.Next() {
		var kind, provider string
		var payload json.RawMessage
		require.NoError(t, rows.Scan(&kind, &provider, &payload))
		stored[kind] = struct {
			provider string
			payload  json.RawMessage
		}{provider, payload}
	}
	require.NoError(t, rows.Err())
	require.Len(t, stored, len(effects))

	require.Equal(t, "webhook", stored["webhook.order_paid"].provider)
	var wh webhook.Payload
	require.NoError(t, json.Unmarshal(stored["webhook.order_paid"].payload, &wh))
	require.Equal(t, "https://hooks.example.com/in", wh.URL)
	require.JSONEq(t, `{"order": "ord_42"}`, string(wh.Body))
	require.Equal(t, "acme", wh.Headers["X-Tenant"])

	require.Equal(t, "sendgrid", stored["email.receipt"].provider)
	mail, err := sendgridschema.Parse(stored["email.receipt"].payload)
	require.NoError(t, err)
	require.Equal(t, "Ada", mail.To[0].Name)
	require.Equal(t, "Receipt", mail.Subject)

	for op, p := range typedStripe {
		row := stored["stripe."+op]
		require.Equal(t, "stripe", row.provider, op)
		var env stripeschema.Payload
		require.NoError(t, json.Unmarshal(row.payload, &env))
		require.Equal(t, op, env.Operation)
		params, err := stripeschema.Parse(row.payload)
		require.NoError(t, err, op)
		// Parse returns a pointer to the operation's params type: the
		// value read back is the one written.
		require.Equal(t, p, deref(t, params), op)
		require.NotContains(t, string(row.payload), `""`, "%s: unset fields are left out of the stored JSON", op)
	}
}

// TestTypedPayloadErrorsNameTheEffect: a typed value that breaks its
// provider's rules, or cannot be encoded, is refused at Enqueue naming the
// effect and the field, and nothing is written.
func TestTypedPayloadErrorsNameTheEffect(t *testing.T) {
	b := setup(t)
	_, err := b.enqueue(t, orderPaid(uuid.New(), "1"),
		outbox.EffectOf("stripe.refund", stripeschema.RefundCreate{PaymentIntent: "pi_123"}),
		outbox.EffectOf("stripe.capture", stripeschema.PaymentIntentCapture{ID: "ch_wrong"}))
	var ve *outbox.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "effects[1].payload", ve.Field)
	require.Contains(t, ve.Problem, `payload.params.id: "ch_wrong" is not a Stripe id starting with "pi_"`)

	_, err = b.enqueue(t, orderPaid(uuid.New(), "1"), outbox.EffectOf("custom.thing", brokenPayload{}))
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "effects[0].payload", ve.Field)
	require.Contains(t, ve.Problem, "cannot encode")

	_, err = b.enqueue(t, orderPaid(uuid.New(), "1"), outbox.EffectOf("custom.nil", nil))
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "effects[0].payload", ve.Field)

	events, effects, jobs := b.counts(t)
	require.Zero(t, events+effects+jobs, "a refused enqueue writes nothing")
}

type brokenPayload struct{}

func (brokenPayload) ProviderName() string { return "webhook" }
func (brokenPayload) EffectPayload() (json.RawMessage, error) {
	return nil, errors.New("cannot encode: the value holds a channel")
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// deref returns the value a *T that stripeschema.Parse returned points to.
func deref(t *testing.T, params any) any {
	t.Helper()
	switch p := params.(type) {
	case *stripeschema.PaymentIntentCreate:
		return *p
	case *stripeschema.PaymentIntentCapture:
		return *p
	case *stripeschema.PaymentIntentCancel:
		return *p
	case *stripeschema.RefundCreate:
		return *p
	case *stripeschema.CustomerCreate:
		return *p
	case *stripeschema.TransferCreate:
		return *p
	}
	t.Fatalf("unexpected params type %T", params)
	return nil
}

// TestNewRefusesASchemaTheOthersRefuse: outbox.New checks the schema with
// the rule every other package applies (pgschema), naming the field.
func TestNewRefusesASchemaTheOthersRefuse(t *testing.T) {
	_, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: "Orders; DROP TABLE orders"})
	require.ErrorContains(t, err, "outbox: Config.Schema: schema \"Orders; DROP TABLE orders\": use one lowercase name")
}

// TestNotBeforeIsPartOfTheEffect: a replay with the same NotBefore is a
// replay; another time for the same effect is a conflict, with nothing
// written; the time is stored with the effect.
func TestNotBeforeIsPartOfTheEffect(t *testing.T) {
	b := setup(t)
	at := time.Now().Add(24 * time.Hour)
	ev := orderPaid(uuid.New(), "1")
	e := webhookEffect("reminder.unpaid", `{}`)
	e.NotBefore = at
	res, err := b.enqueue(t, ev, e)
	require.NoError(t, err)
	var stored time.Time
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT not_before FROM `+b.db.Schema+`.side_effects WHERE id = $1`,
		res.Effects[0].ID).Scan(&stored))
	require.WithinDuration(t, at, stored, time.Microsecond)

	res, err = b.enqueue(t, ev, e)
	require.NoError(t, err)
	require.True(t, res.Replay(), "the same time replays")

	e.NotBefore = at.Add(time.Hour)
	_, err = b.enqueue(t, ev, e)
	require.ErrorIs(t, err, outbox.ErrConflict, "another time for the same effect conflicts")
}
