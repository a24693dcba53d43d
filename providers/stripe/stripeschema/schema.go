// Package stripeschema parses and validates the payloads of Stripe effects
// without the Stripe SDK, so that enqueueing (package outbox) does not
// compile it. The provider in package stripe turns what Parse returns into
// stripe-go calls.
package stripeschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/outboxd/outboxd/providers"
)

// Name is the provider name used in side_effects.provider and as River queue.
const Name = "stripe"

// Schema validates Stripe payloads; it is what the enqueue side needs.
type Schema struct{}

// Name implements providers.Validator.
func (Schema) Name() string { return Name }

// ValidatePayload implements providers.Validator.
func (Schema) ValidatePayload(_ string, payload json.RawMessage) error {
	_, err := Parse(payload)
	return err
}

// MetadataKey is the metadata entry that carries the effect's idempotency
// key on the objects outboxd creates.
const MetadataKey = "outboxd_idempotency_key"

// Payload is the JSON object a Stripe effect carries: an operation from the
// documented set and its parameters, named as in Stripe's API reference.
//
//	{"operation": "refund.create", "params": {"payment_intent": "pi_123", "amount": 500}}
type Payload struct {
	Operation string          `json:"operation"`
	Params    json.RawMessage `json:"params"`
}

// operation is one supported Stripe call.
type operation struct {
	// parse decodes and validates params into one of the params types.
	parse func(params json.RawMessage) (any, error)
}

// Operations lists the supported operations, sorted.
func Operations() []string {
	names := make([]string, 0, len(operations))
	for n := range operations {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

var operations = map[string]operation{
	"payment_intent.create":  {parse: parsePaymentIntentCreate},
	"payment_intent.capture": {parse: parsePaymentIntentCapture},
	"payment_intent.cancel":  {parse: parsePaymentIntentCancel},
	"refund.create":          {parse: parseRefundCreate},
	"customer.create":        {parse: parseCustomerCreate},
	"transfer.create":        {parse: parseTransferCreate},
}

// Parse decodes and validates a Stripe payload. It returns the operation's
// params: a *PaymentIntentCreate, *PaymentIntentCapture,
// *PaymentIntentCancel, *RefundCreate, *CustomerCreate or *TransferCreate.
func Parse(raw json.RawMessage) (any, error) {
	var p Payload
	if err := strictDecode(raw, &p); err != nil {
		return nil, fmt.Errorf("payload: %w (want {\"operation\": ..., \"params\": {...}})", err)
	}
	op, ok := operations[p.Operation]
	if !ok {
		return nil, fmt.Errorf("payload.operation: %q is not supported: use one of %s", p.Operation, strings.Join(Operations(), ", "))
	}
	if len(bytes.TrimSpace(p.Params)) == 0 || bytes.Equal(bytes.TrimSpace(p.Params), []byte("null")) {
		return nil, errors.New("payload.params: required: the operation's parameters as a JSON object")
	}
	c, err := op.parse(p.Params)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Target is the Stripe object a payload's operation acts on when it changes
// an existing one (the payment intent of a capture or a cancel), or "" when
// it creates one or the payload does not parse.
func Target(raw json.RawMessage) string {
	c, err := Parse(raw)
	if err != nil {
		return ""
	}
	switch p := c.(type) {
	case *PaymentIntentCapture:
		return p.ID
	case *PaymentIntentCancel:
		return p.ID
	}
	return ""
}

func strictDecode(raw json.RawMessage, v any) error { return providers.DecodeStrict(raw, v) }

// decodeParams decodes params strictly, naming the field at fault.
func decodeParams(raw json.RawMessage, v any) error {
	if err := strictDecode(raw, v); err != nil {
		return fmt.Errorf("payload.params: %w", err)
	}
	return nil
}

var (
	currencyRE = regexp.MustCompile(`^[a-z]{3}$`)
	idRE       = regexp.MustCompile(`^[A-Za-z0-9_]+$`)
)

type checker struct{ errs []string }

func (c *checker) fail(field, format string, args ...any) {
	c.errs = append(c.errs, "payload.params."+field+": "+fmt.Sprintf(format, args...))
}

func (c *checker) positive(field string, v *int64, required bool) {
	switch {
	case v == nil && required:
		c.fail(field, "required: a positive amount in the currency's smallest unit")
	case v != nil && *v <= 0:
		c.fail(field, "must be positive, got %d", *v)
	}
}

func (c *checker) currency(v string) {
	if !currencyRE.MatchString(v) {
		c.fail("currency", "%q: use a lowercase ISO code such as \"eur\"", v)
	}
}

func (c *checker) id(field, v, prefix string, required bool) {
	switch {
	case v == "" && required:
		c.fail(field, "required: a Stripe id starting with %q", prefix)
	case v != "" && (!strings.HasPrefix(v, prefix) || !idRE.MatchString(v)):
		c.fail(field, "%q is not a Stripe id starting with %q", v, prefix)
	}
}

func (c *checker) oneOf(field, v string, allowed ...string) {
	if v != "" && !slices.Contains(allowed, v) {
		c.fail(field, "%q: use one of %s", v, strings.Join(allowed, ", "))
	}
}

// metadata applies Stripe's documented limits.
func (c *checker) metadata(m map[string]string) {
	if len(m) > 50 {
		c.fail("metadata", "%d keys, over Stripe's limit of 50", len(m))
	}
	for k, v := range m {
		if k == MetadataKey {
			// outboxd sets it to the effect's key; taken from application
			// input, it would let another effect's events speak for this one.
			c.fail("metadata."+k, "reserved: outboxd sets it to the effect's idempotency key; remove it")
			continue
		}
		if len(k) > 40 || k == "" || strings.ContainsAny(k, "[]") {
			c.fail("metadata", "key %q: 1 to 40 characters, no square brackets", k)
		}
		if len(v) > 500 {
			c.fail("metadata."+k, "%d characters, over Stripe's limit of 500", len(v))
		}
	}
}

func (c *checker) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	sort.Strings(c.errs)
	return errors.New(strings.Join(c.errs, "; "))
}

// PaymentIntentCreate holds the params of payment_intent.create.
type PaymentIntentCreate struct {
	Amount               *int64            `json:"amount,omitempty"`
	Currency             string            `json:"currency,omitempty"`
	Customer             string            `json:"customer,omitempty"`
	PaymentMethod        string            `json:"payment_method,omitempty"`
	PaymentMethodTypes   []string          `json:"payment_method_types,omitempty"`
	Confirm              *bool             `json:"confirm,omitempty"`
	OffSession           *bool             `json:"off_session,omitempty"`
	CaptureMethod        string            `json:"capture_method,omitempty"`
	SetupFutureUsage     string            `json:"setup_future_usage,omitempty"`
	Description          string            `json:"description,omitempty"`
	ReceiptEmail         string            `json:"receipt_email,omitempty"`
	StatementDescriptor  string            `json:"statement_descriptor,omitempty"`
	ReturnURL            string            `json:"return_url,omitempty"`
	TransferGroup        string            `json:"transfer_group,omitempty"`
	OnBehalfOf           string            `json:"on_behalf_of,omitempty"`
	ApplicationFeeAmount *int64            `json:"application_fee_amount,omitempty"`
	Metadata             map[string]string `json:"metadata,omitempty"`
}

func parsePaymentIntentCreate(raw json.RawMessage) (any, error) {
	var p PaymentIntentCreate
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	var c checker
	c.positive("amount", p.Amount, true)
	c.currency(p.Currency)
	c.id("customer", p.Customer, "cus_", false)
	c.id("payment_method", p.PaymentMethod, "pm_", false)
	c.oneOf("capture_method", p.CaptureMethod, "automatic", "automatic_async", "manual")
	c.oneOf("setup_future_usage", p.SetupFutureUsage, "on_session", "off_session")
	c.positive("application_fee_amount", p.ApplicationFeeAmount, false)
	if len(p.StatementDescriptor) > 22 {
		c.fail("statement_descriptor", "%d characters, over Stripe's limit of 22", len(p.StatementDescriptor))
	}
	c.metadata(p.Metadata)
	if err := c.err(); err != nil {
		return nil, err
	}
	return &p, nil
}

// PaymentIntentCapture holds the params of payment_intent.capture.
type PaymentIntentCapture struct {
	ID              string            `json:"id,omitempty"`
	AmountToCapture *int64            `json:"amount_to_capture,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
}

func parsePaymentIntentCapture(raw json.RawMessage) (any, error) {
	var p PaymentIntentCapture
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	var c checker
	c.id("id", p.ID, "pi_", true)
	c.positive("amount_to_capture", p.AmountToCapture, false)
	c.metadata(p.Metadata)
	if err := c.err(); err != nil {
		return nil, err
	}
	return &p, nil
}

// PaymentIntentCancel holds the params of payment_intent.cancel.
type PaymentIntentCancel struct {
	ID                 string `json:"id,omitempty"`
	CancellationReason string `json:"cancellation_reason,omitempty"`
}

func parsePaymentIntentCancel(raw json.RawMessage) (any, error) {
	var p PaymentIntentCancel
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	var c checker
	c.id("id", p.ID, "pi_", true)
	c.oneOf("cancellation_reason", p.CancellationReason, "duplicate", "fraudulent", "requested_by_customer", "abandoned")
	if err := c.err(); err != nil {
		return nil, err
	}
	return &p, nil
}

// RefundCreate holds the params of refund.create.
type RefundCreate struct {
	PaymentIntent        string            `json:"payment_intent,omitempty"`
	Charge               string            `json:"charge,omitempty"`
	Amount               *int64            `json:"amount,omitempty"`
	Reason               string            `json:"reason,omitempty"`
	RefundApplicationFee *bool             `json:"refund_application_fee,omitempty"`
	ReverseTransfer      *bool             `json:"reverse_transfer,omitempty"`
	Metadata             map[string]string `json:"metadata,omitempty"`
}

func parseRefundCreate(raw json.RawMessage) (any, error) {
	var p RefundCreate
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	var c checker
	switch {
	case p.PaymentIntent == "" && p.Charge == "":
		c.fail("payment_intent", "required: the payment_intent (or charge) to refund")
	case p.PaymentIntent != "" && p.Charge != "":
		c.fail("charge", "give payment_intent or charge, not both")
	}
	c.id("payment_intent", p.PaymentIntent, "pi_", false)
	c.id("charge", p.Charge, "ch_", false)
	c.positive("amount", p.Amount, false)
	c.oneOf("reason", p.Reason, "duplicate", "fraudulent", "requested_by_customer")
	c.metadata(p.Metadata)
	if err := c.err(); err != nil {
		return nil, err
	}
	return &p, nil
}

// CustomerCreate holds the params of customer.create.
type CustomerCreate struct {
	Email         string            `json:"email,omitempty"`
	Name          string            `json:"name,omitempty"`
	Phone         string            `json:"phone,omitempty"`
	Description   string            `json:"description,omitempty"`
	PaymentMethod string            `json:"payment_method,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

func parseCustomerCreate(raw json.RawMessage) (any, error) {
	var p CustomerCreate
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	var c checker
	if p.Email != "" && (!strings.Contains(p.Email, "@") || len(p.Email) > 512) {
		c.fail("email", "%q is not an email address", p.Email)
	}
	c.id("payment_method", p.PaymentMethod, "pm_", false)
	c.metadata(p.Metadata)
	if err := c.err(); err != nil {
		return nil, err
	}
	return &p, nil
}

// TransferCreate holds the params of transfer.create.
type TransferCreate struct {
	Amount            *int64            `json:"amount,omitempty"`
	Currency          string            `json:"currency,omitempty"`
	Destination       string            `json:"destination,omitempty"`
	TransferGroup     string            `json:"transfer_group,omitempty"`
	SourceTransaction string            `json:"source_transaction,omitempty"`
	Description       string            `json:"description,omitempty"`
	Metadata          map[string]string `json:"metadata,omitempty"`
}

func parseTransferCreate(raw json.RawMessage) (any, error) {
	var p TransferCreate
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	var c checker
	c.positive("amount", p.Amount, true)
	c.currency(p.Currency)
	c.id("destination", p.Destination, "acct_", true)
	c.id("source_transaction", p.SourceTransaction, "ch_", false)
	c.metadata(p.Metadata)
	if err := c.err(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Each operation's params are a typed payload (providers.Payload): an
// effect built from one with outbox.EffectOf carries the operation's name
// and its params, as Parse reads them.

// ProviderName implements providers.Payload.
func (PaymentIntentCreate) ProviderName() string { return Name }

// EffectPayload implements providers.Payload: {"operation": "payment_intent.create", "params": …}.
func (p PaymentIntentCreate) EffectPayload() (json.RawMessage, error) {
	return effectPayload("payment_intent.create", p)
}

// ProviderName implements providers.Payload.
func (PaymentIntentCapture) ProviderName() string { return Name }

// EffectPayload implements providers.Payload: {"operation": "payment_intent.capture", "params": …}.
func (p PaymentIntentCapture) EffectPayload() (json.RawMessage, error) {
	return effectPayload("payment_intent.capture", p)
}

// ProviderName implements providers.Payload.
func (PaymentIntentCancel) ProviderName() string { return Name }

// EffectPayload implements providers.Payload: {"operation": "payment_intent.cancel", "params": …}.
func (p PaymentIntentCancel) EffectPayload() (json.RawMessage, error) {
	return effectPayload("payment_intent.cancel", p)
}

// ProviderName implements providers.Payload.
func (RefundCreate) ProviderName() string { return Name }

// EffectPayload implements providers.Payload: {"operation": "refund.create", "params": …}.
func (p RefundCreate) EffectPayload() (json.RawMessage, error) {
	return effectPayload("refund.create", p)
}

// ProviderName implements providers.Payload.
func (CustomerCreate) ProviderName() string { return Name }

// EffectPayload implements providers.Payload: {"operation": "customer.create", "params": …}.
func (p CustomerCreate) EffectPayload() (json.RawMessage, error) {
	return effectPayload("customer.create", p)
}

// ProviderName implements providers.Payload.
func (TransferCreate) ProviderName() string { return Name }

// EffectPayload implements providers.Payload: {"operation": "transfer.create", "params": …}.
func (p TransferCreate) EffectPayload() (json.RawMessage, error) {
	return effectPayload("transfer.create", p)
}

func effectPayload(operation string, params any) (json.RawMessage, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("payload.params: %w", err)
	}
	return json.Marshal(Payload{Operation: operation, Params: raw})
}
