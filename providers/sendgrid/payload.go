package sendgrid

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"sort"
	"strings"

	sgmail "github.com/sendgrid/sendgrid-go/helpers/mail"

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

func parsePayload(raw json.RawMessage) (Payload, error) {
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

// message builds sendgrid-go's mail object.
func (p Payload) message() *sgmail.SGMailV3 {
	m := sgmail.NewV3Mail()
	m.SetFrom(sgmail.NewEmail(p.From.Name, p.From.Email))
	m.Subject = p.Subject
	per := sgmail.NewPersonalization()
	for _, a := range p.To {
		per.AddTos(sgmail.NewEmail(a.Name, a.Email))
	}
	for _, a := range p.CC {
		per.AddCCs(sgmail.NewEmail(a.Name, a.Email))
	}
	for _, a := range p.BCC {
		per.AddBCCs(sgmail.NewEmail(a.Name, a.Email))
	}
	for k, v := range p.DynamicTemplateData {
		per.SetDynamicTemplateData(k, v)
	}
	m.AddPersonalizations(per)
	if p.ReplyTo != nil {
		m.SetReplyTo(sgmail.NewEmail(p.ReplyTo.Name, p.ReplyTo.Email))
	}
	// SendGrid requires text/plain before text/html.
	if p.Text != "" {
		m.AddContent(sgmail.NewContent("text/plain", p.Text))
	}
	if p.HTML != "" {
		m.AddContent(sgmail.NewContent("text/html", p.HTML))
	}
	if p.TemplateID != "" {
		m.SetTemplateID(p.TemplateID)
	}
	if len(p.Categories) > 0 {
		m.AddCategories(p.Categories...)
	}
	return m
}
