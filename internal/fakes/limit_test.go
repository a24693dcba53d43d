package fakes

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
)

// TestFakesRefuseWhatIsOverTheirRate: over its limit Stripe answers 429
// rate_limit with no Retry-After, a receiver 429 with the Retry-After it
// was given; both record every request with its status, and a lifted
// limit refuses nothing.
func TestFakesRefuseWhatIsOverTheirRate(t *testing.T) {
	stripe := NewFakeStripe()
	t.Cleanup(stripe.Close)
	stripe.Limit(2) // a burst of 2 (a second of them), then one every 500 ms
	var statuses []int
	for range 5 {
		resp, err := http.Post(stripe.URL+"/v1/refunds", "application/x-www-form-urlencoded", strings.NewReader("payment_intent=pi_1"))
		require.NoError(t, err)
		statuses = append(statuses, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests {
			require.Empty(t, resp.Header.Get("Retry-After"), "Stripe names no delay")
		}
		_ = resp.Body.Close()
	}
	require.Equal(t, []int{200, 200, 429, 429, 429}, statuses)
	require.Len(t, stripe.Requests(), 5)
	require.Equal(t, 429, stripe.Requests()[4].Status)
	stripe.Limit(0)
	resp, err := http.Post(stripe.URL+"/v1/refunds", "application/x-www-form-urlencoded", strings.NewReader("payment_intent=pi_2"))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	recv, err := NewReceiver(secret)
	require.NoError(t, err)
	t.Cleanup(recv.Close)
	signer, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	recv.Limit(5, "1") // a burst of 1
	statuses = nil
	for i := range 3 {
		id, at, body := fmt.Sprintf("msg_%d", i), time.Now(), []byte(`{}`)
		sig, err := signer.Sign(id, at, body)
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, recv.URL+"/hook", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		statuses = append(statuses, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests {
			require.Equal(t, "1", resp.Header.Get("Retry-After"))
		}
		_ = resp.Body.Close()
	}
	require.Equal(t, []int{204, 429, 429}, statuses)
	require.Equal(t, 429, recv.Deliveries()[2].Status)
}
