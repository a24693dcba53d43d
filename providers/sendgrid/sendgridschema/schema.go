// Package sendgridschema parses and validates the payloads of SendGrid
// effects without sendgrid-go, so that enqueueing (package outbox) does not
// compile it. The provider in package sendgrid builds the mail from what
// Parse returns.
package sendgridschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"sort"
	"strings"

	"github.com/outboxd/outboxd/providers"
)

// Address is a mailbox.
type Address struct {
	Email string `json:"email"`
	Name  string `json:"name,omitempty"`
}

// Payload is the JSON object a SendGrid effect carries:
//
//	{
//	  "from": {"email": "shop@example.com", "name": "Shop"},
//	  "to": [{"email": "ada@example.com", "name": "Ada"}],
//	  "subject": "Your receipt",
//	  "text": "Thanks for your order.",
//	  "html": "<p>Thanks for your order.</p>",
//	  "categories": ["receipt"]
//	}
//
// or, with a dynamic template, "template_id" and "dynamic_template_data"
// instead of subject and content. cc, bcc and reply_to are optional.
type Payload struct {
	From                Address        `json:"from"`
	To                  []Address      `json:"to"`
	CC                  []Address      `json:"cc,omitempty"`
	BCC                 []Address      `json:"bcc,omitempty"`
	ReplyTo             *Address       `json:"reply_to,omitempty"`
	Subject             string         `json:"subject,omitempty"`
	Text                string         `json:"text,omitempty"`
	HTML                string         `json:"html,omitempty"`
	TemplateID          string         `json:"template_id,omitempty"`
	DynamicTemplateData map[string]any `json:"dynamic_template_data,omitempty"`
	Categories          []string       `json:"categories,omitempty"`
}

// SendGrid's documented limits.
const (
	maxRecipients = 1000
	maxCategories = 10
)

func Parse(raw json.RawMessage) (Payload, error) {
	var p Payload
	if err := providers.DecodeStrict(raw, &p); err != nil {
		return p, fmt.Errorf("payload: %w", err)
	}
	var errs []string
	fail := func(field, format string, args ...any) {
		errs = append(errs, "payload."+field+": "+fmt.Sprintf(format, args...))
	}
	checkAddr := func(field string, a Address) string {
		if a.Email == "" {
			fail(field+".email", "required")
			return ""
		}
		parsed, err := mail.ParseAddress(a.Email)
		if err != nil || parsed.Address != a.Email {
			fail(field+".email", "%q is not an email address", a.Email)
			return ""
		}
		if strings.ContainsAny(a.Name, "\r\n;,") {
			fail(field+".name", "may not contain line breaks, ';' or ','")
		}
		return strings.ToLower(a.Email)
	}
	checkAddr("from", p.From)
	if p.ReplyTo != nil {
		checkAddr("reply_to", *p.ReplyTo)
	}
	if len(p.To) == 0 {
		fail("to", "required: at least one recipient")
	}
	if n := len(p.To) + len(p.CC) + len(p.BCC); n > maxRecipients {
		fail("to", "%d recipients in to, cc and bcc, over SendGrid's limit of %d", n, maxRecipients)
	}
	seen := map[string]string{}
	for _, list := range []struct {
		name  string
		addrs []Address
	}{{"to", p.To}, {"cc", p.CC}, {"bcc", p.BCC}} {
		for i, a := range list.addrs {
			field := fmt.Sprintf("%s[%d]", list.name, i)
			if e := checkAddr(field, a); e != "" {
				if prev, dup := seen[e]; dup {
					fail(field+".email", "%q already appears as %s: SendGrid rejects duplicates", a.Email, prev)
				}
				seen[e] = field
			}
		}
	}
	if p.TemplateID == "" {
		if p.Subject == "" {
			fail("subject", "required unless template_id is set")
		}
		if p.Text == "" && p.HTML == "" {
			fail("text", "give text, html or both (or a template_id)")
		}
		if len(p.DynamicTemplateData) > 0 {
			fail("dynamic_template_data", "needs template_id")
		}
	}
	if len(p.Categories) > maxCategories {
		fail("categories", "%d categories, over SendGrid's limit of %d", len(p.Categories), maxCategories)
	}
	for i, c := range p.Categories {
		if c == "" || len(c) > 255 {
			fail(fmt.Sprintf("categories[%d]", i), "1 to 255 characters")
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return p, errors.New(strings.Join(errs, "; "))
	}
	return p, nil
}

// Name is the provider name used in side_effects.provider and as River queue.
const Name = "sendgrid"

// Schema validates SendGrid payloads; it is what the enqueue side needs.
type Schema struct{}

// Name implements providers.Validator.
func (Schema) Name() string { return Name }

// ValidatePayload implements providers.Validator.
func (Schema) ValidatePayload(_ string, payload json.RawMessage) error {
	_, err := Parse(payload)
	return err
}

// ProviderName implements providers.Payload: a Payload is a typed mail for
// outbox.EffectOf.
func (Payload) ProviderName() string { return Name }

// EffectPayload implements providers.Payload.
func (p Payload) EffectPayload() (json.RawMessage, error) { return json.Marshal(p) }
