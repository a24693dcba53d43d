package sendgrid

import (
	sgmail "github.com/sendgrid/sendgrid-go/helpers/mail"

	"github.com/outboxd/outboxd/providers/sendgrid/sendgridschema"
)

// Payload is the JSON object a SendGrid effect carries.
type Payload = sendgridschema.Payload

// Address is one sender or recipient.
type Address = sendgridschema.Address

// parsePayload decodes and validates a SendGrid payload.
func parsePayload(raw []byte) (Payload, error) { return sendgridschema.Parse(raw) }

// message builds sendgrid-go's mail object.
func message(p Payload) *sgmail.SGMailV3 {
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
