package fakes

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"
)

// SendGridEventSigner signs Event Webhook deliveries as SendGrid does
// (ECDSA P-256 over timestamp + body), for tests and the demo.
type SendGridEventSigner struct{ key *ecdsa.PrivateKey }

// NewSendGridEventSigner makes a fresh key pair.
func NewSendGridEventSigner() (*SendGridEventSigner, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &SendGridEventSigner{key: k}, nil
}

// PublicKey is the verification key as SendGrid shows it (base64 PKIX).
func (s *SendGridEventSigner) PublicKey() string {
	der, _ := x509.MarshalPKIXPublicKey(&s.key.PublicKey)
	return base64.StdEncoding.EncodeToString(der)
}

// Headers signs body and returns the headers of the delivery.
func (s *SendGridEventSigner) Headers(body []byte) http.Header {
	return s.HeadersAt(body, strconv.FormatInt(time.Now().Unix(), 10))
}

// HeadersAt signs body with the timestamp ts, as SendGrid would have at
// that time (any text: the signature covers it).
func (s *SendGridEventSigner) HeadersAt(body []byte, ts string) http.Header {
	sum := sha256.Sum256(append([]byte(ts), body...))
	sig, _ := ecdsa.SignASN1(rand.Reader, s.key, sum[:])
	return http.Header{"X-Twilio-Email-Event-Webhook-Signature": {base64.StdEncoding.EncodeToString(sig)},
		"X-Twilio-Email-Event-Webhook-Timestamp": {ts}, "Content-Type": {"application/json"}}
}

// SendGridEvent is one Event Webhook event about a mail sent with an
// outboxd key in custom_args.
func SendGridEvent(id, event, key, messageID string, at time.Time) map[string]any {
	return map[string]any{"sg_event_id": id, "event": event, "email": "customer@example.com", "timestamp": at.Unix(),
		"sg_message_id": messageID + ".filterdrecv-5bd4d7cbf5-xk2lm-1-65A1", "outboxd_idempotency_key": key}
}

// StripeSignatureHeaders signs body as Stripe signs webhook events.
func StripeSignatureHeaders(secret string, body []byte) http.Header {
	now := time.Now()
	sig := webhook.ComputeSignature(now, body, secret)
	return http.Header{"Stripe-Signature": {fmt.Sprintf("t=%d,v1=%s", now.Unix(), hex.EncodeToString(sig))}, "Content-Type": {"application/json"}}
}
