package sendgrid_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fakes"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/sendgrid"
)

// TestEventDeliveriesAreCheckedForAge: a signed delivery is accepted within
// SendGrid's retry window and refused when its signed timestamp is older,
// in the future, or not a time.
func TestEventDeliveriesAreCheckedForAge(t *testing.T) {
	signer, err := fakes.NewSendGridEventSigner()
	require.NoError(t, err)
	v, err := sendgrid.EventVerifier(signer.PublicKey())
	require.NoError(t, err)
	body, err := json.Marshal([]any{fakes.SendGridEvent("sg_1", "delivered", "key", "msg_1", time.Now())})
	require.NoError(t, err)
	at := func(d time.Duration) string { return strconv.FormatInt(time.Now().Add(d).Unix(), 10) }

	for _, ok := range []time.Duration{0, -23 * time.Hour, time.Minute} {
		msgs, err := v.Verify(signer.HeadersAt(body, at(ok)), body)
		require.NoError(t, err, "signed %s ago", -ok)
		require.Len(t, msgs, 1)
	}
	for name, ts := range map[string]string{
		"in 2020":          "1577836800",
		"two days ago":     at(-48 * time.Hour),
		"an hour from now": at(time.Hour),
		"not a time":       "not-a-time",
	} {
		_, err := v.Verify(signer.HeadersAt(body, ts), body)
		require.Error(t, err, name)
	}
}

// TestOnlySendGridsEventTypesProveAcceptance: the documented event types
// about a mail prove SendGrid accepted it; any other value proves nothing.
func TestOnlySendGridsEventTypesProveAcceptance(t *testing.T) {
	for event, want := range map[string]providers.EventOutcome{
		"processed": providers.EventDone, "delivered": providers.EventDone, "dropped": providers.EventDone,
		"open": providers.EventDone, "bounce": providers.EventDone,
		"anything": providers.EventInformational, "": providers.EventInformational,
	} {
		raw, err := json.Marshal(fakes.SendGridEvent("sg_1", event, "key", "msg_1", time.Now()))
		require.NoError(t, err)
		r, err := sendgrid.ParseEvent(raw)
		require.NoError(t, err)
		require.Equal(t, want, r.Outcome, "event %q", event)
	}
}
