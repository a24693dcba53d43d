package inbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// StandardWebhooks verifies deliveries signed per Standard Webhooks (Svix,
// outboxd's own webhook provider, and many others): the signature over
// webhook-id, webhook-timestamp (within 5 minutes) and the body. The
// message id is the webhook-id header; the type, the body's "type" field
// when it has one.
func StandardWebhooks(secret string, retryWindow time.Duration) (Verifier, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, fmt.Errorf("inbox: Standard Webhooks secret: %w (want whsec_<base64>)", err)
	}
	if retryWindow <= 0 {
		return nil, errors.New("inbox: give the sender's retry window (Svix retries for about 5 days)")
	}
	return &swVerifier{wh: wh, window: retryWindow}, nil
}

type swVerifier struct {
	wh     *standardwebhooks.Webhook
	window time.Duration
}

func (v *swVerifier) RetryWindow() time.Duration { return v.window }

func (v *swVerifier) Verify(h http.Header, body []byte) ([]Message, error) {
	if err := v.wh.Verify(body, h); err != nil {
		return nil, err
	}
	var typed struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &typed) // a body without a type is fine
	return []Message{{ID: h.Get("webhook-id"), Type: typed.Type, Body: body}}, nil
}
