package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"

	"golang.org/x/net/http/httpguts"

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
// networks an IP-literal URL may point into besides public addresses. With
// names set, host names are checked too (at enqueue); at dispatch the
// dial-time guard checks the addresses they actually resolve to.
func parsePayload(raw json.RawMessage, allowed []netip.Prefix, names bool) (Payload, *url.URL, error) {
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
	if err := checkHost(u.Hostname(), allowed, names); err != nil {
		return p, nil, fmt.Errorf("payload.url: %w", err)
	}
	if len(bytes.TrimSpace(p.Body)) == 0 || bytes.Equal(bytes.TrimSpace(p.Body), []byte("null")) {
		return p, nil, errors.New("payload.body: required: the JSON value to POST")
	}
	for name, v := range p.Headers {
		canon := http.CanonicalHeaderKey(name)
		if reservedHeaders[canon] {
			return p, nil, fmt.Errorf("payload.headers.%s: set by outboxd, cannot be overridden", name)
		}
		if !httpguts.ValidHeaderFieldName(name) {
			return p, nil, fmt.Errorf("payload.headers.%q: not a valid HTTP header name (letters, digits and !#$%%&'*+-.^_`|~ only)", name)
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return p, nil, fmt.Errorf("payload.headers.%s: value holds a control character HTTP does not allow", name)
		}
	}
	return p, u, nil
}

// checkHost refuses at enqueue what the dial-time guard would refuse at
// dispatch, as far as it can be known without resolving names: IP literals
// in non-public ranges (also with a trailing dot), numeric host forms that
// resolvers read as IPv4 addresses (127.1, 2130706433, 0x7f000001, 0177.1),
// and names that resolve on the local machine or network (localhost,
// *.localhost, *.local, *.internal, *.home.arpa, single-label names) unless
// allowed lists a non-public network.
func checkHost(host string, allowed []netip.Prefix, names bool) error {
	name := strings.TrimSuffix(host, ".")
	if ip, err := netip.ParseAddr(name); err == nil {
		ip = ip.Unmap()
		if reason := blockedReason(ip, allowed); reason != "" {
			return fmt.Errorf("%s is a %s address: to reach it, allow its network (outboxd and outboxctl: --webhook-allow-cidrs, OUTBOXD_WEBHOOK_ALLOW_CIDRS; in Go, webhook.Schema.AllowedNetworks at enqueue and the provider's AllowedNetworks at dispatch)", ip, reason)
		}
		return nil
	}
	if !names {
		return nil
	}
	if len(name) > 253 {
		return fmt.Errorf("host %q: over 253 characters", host)
	}
	labels := strings.Split(strings.ToLower(name), ".")
	for _, l := range labels {
		if !hostLabel.MatchString(l) {
			return fmt.Errorf("host %q: not an IP address in standard form nor a DNS name (letters, digits and - in labels of 1 to 63)", host)
		}
	}
	last := labels[len(labels)-1]
	if numericLabel.MatchString(last) {
		return fmt.Errorf("host %q: a numeric form that resolvers may read as an IP address: write the address in standard form (e.g. 203.0.113.7) or use a DNS name", host)
	}
	if loopbackAllowed := blockedReason(netip.AddrFrom4([4]byte{127, 0, 0, 1}), allowed) == ""; !loopbackAllowed &&
		(last == "localhost") {
		return fmt.Errorf("host %q resolves to a loopback address: to reach it, allow 127.0.0.0/8 (--webhook-allow-cidrs, OUTBOXD_WEBHOOK_ALLOW_CIDRS; in Go, webhook.Schema.AllowedNetworks)", host)
	}
	if len(allowed) == 0 {
		if len(labels) == 1 {
			return fmt.Errorf("host %q: a single-label name resolves on the local network: use a public DNS name, or allow the private network it is on (--webhook-allow-cidrs, OUTBOXD_WEBHOOK_ALLOW_CIDRS; in Go, webhook.Schema.AllowedNetworks)", host)
		}
		for _, suffix := range localSuffixes {
			if name == suffix || strings.HasSuffix(strings.ToLower(name), "."+suffix) {
				return fmt.Errorf("host %q: names under .%s resolve on the local network: use a public DNS name, or allow the private network it is on (--webhook-allow-cidrs, OUTBOXD_WEBHOOK_ALLOW_CIDRS; in Go, webhook.Schema.AllowedNetworks)", host, suffix)
			}
		}
	}
	return nil
}

var (
	hostLabel    = regexp.MustCompile(`^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$`)
	numericLabel = regexp.MustCompile(`^(0x[0-9a-f]*|[0-9]+)$`)
	// localSuffixes are special-use and private-use names (RFC 6761,
	// 6762, 8375, ICANN's .internal) that never resolve publicly.
	localSuffixes = []string{"local", "internal", "home.arpa", "localdomain", "lan"}
)

// ProviderName implements providers.Payload: a Payload is a typed webhook
// call for outbox.EffectOf.
func (Payload) ProviderName() string { return Name }

// EffectPayload implements providers.Payload.
func (p Payload) EffectPayload() (json.RawMessage, error) { return json.Marshal(p) }
