package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/outboxd/outboxd/providers"
)

// Payload is the JSON object a webhook effect carries:
//
//	{
//	  "url": "https://hooks.example.com/orders",
//	  "body": {"type": "order.paid", "order_id": "ord_42"},
//	  "headers": {"X-Tenant": "acme"}
//	}
//
// body is sent verbatim (any JSON value but null); headers is optional and
// may not set the signing, idempotency or content headers.
type Payload struct {
	URL     string            `json:"url"`
	Body    json.RawMessage   `json:"body"`
	Headers map[string]string `json:"headers,omitempty"`
}

// MaxURLLength bounds the url field.
const MaxURLLength = 2048

// reservedHeaders are set by the provider and may not be overridden.
var reservedHeaders = map[string]bool{
	"Webhook-Id": true, "Webhook-Timestamp": true, "Webhook-Signature": true,
	"Idempotency-Key": true, "Content-Type": true, "Content-Length": true,
	"Host": true, "Transfer-Encoding": true, "Connection": true,
}

// parsePayload decodes and validates a webhook payload. allowed lists the
// networks an IP-literal URL may point into besides public addresses.
func parsePayload(raw json.RawMessage, allowed []netip.Prefix) (Payload, *url.URL, error) {
	var p Payload
	if err := providers.DecodeStrict(raw, &p); err != nil {
		return p, nil, fmt.Errorf("payload: %w (want {\"url\": ..., \"body\": ..., \"headers\": {...}})", err)
	}
	if p.URL == "" {
		return p, nil, errors.New("payload.url: required: the https URL to POST to")
	}
	if len(p.URL) > MaxURLLength {
		return p, nil, fmt.Errorf("payload.url: %d characters, over the limit of %d", len(p.URL), MaxURLLength)
	}
	u, err := url.Parse(p.URL)
	if err != nil {
		return p, nil, fmt.Errorf("payload.url: %w", err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return p, nil, fmt.Errorf("payload.url: scheme %q not allowed: use https (or http)", u.Scheme)
	}
	if u.Hostname() == "" {
		return p, nil, errors.New("payload.url: no host")
	}
	if u.User != nil {
		return p, nil, errors.New("payload.url: credentials in the URL are not allowed: the request is authenticated by its signature")
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
		if reason := blockedReason(ip.Unmap(), allowed); reason != "" {
			return p, nil, fmt.Errorf("payload.url: %s is a %s address: allow it with OUTBOXD_WEBHOOK_ALLOW_CIDRS if intended", ip, reason)
		}
	}
	if len(bytes.TrimSpace(p.Body)) == 0 || bytes.Equal(bytes.TrimSpace(p.Body), []byte("null")) {
		return p, nil, errors.New("payload.body: required: the JSON value to POST")
	}
	for name, v := range p.Headers {
		canon := http.CanonicalHeaderKey(name)
		if reservedHeaders[canon] {
			return p, nil, fmt.Errorf("payload.headers.%s: set by outboxd, cannot be overridden", name)
		}
		if strings.ContainsAny(name+v, "\r\n\x00") || name == "" || strings.ContainsAny(name, " :") {
			return p, nil, fmt.Errorf("payload.headers.%s: invalid header name or value", name)
		}
	}
	return p, u, nil
}
