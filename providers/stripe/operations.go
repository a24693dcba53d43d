package stripe

import (
	"fmt"

	stripego "github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
)

// MetadataKey is the metadata entry that carries the effect's idempotency
// key on the objects outboxd creates.
const MetadataKey = stripeschema.MetadataKey

// call performs the request with the shared params (key, context) and
// returns the object id and Stripe's response.
type call func(api *client.API, base stripego.Params) (id string, resp *stripego.APIResponse, err error)

// callFor turns parsed params (stripeschema.Parse) into a stripe-go call.
func callFor(params any) (call, error) {
	switch p := params.(type) {
	case *stripeschema.PaymentIntentCreate:
		return func(api *client.API, base stripego.Params) (string, *stripego.APIResponse, error) {
			params := &stripego.PaymentIntentParams{
				Params:               base,
				Amount:               p.Amount,
				Currency:             str(p.Currency),
				Customer:             str(p.Customer),
				PaymentMethod:        str(p.PaymentMethod),
				PaymentMethodTypes:   stripego.StringSlice(p.PaymentMethodTypes),
				Confirm:              p.Confirm,
				OffSession:           p.OffSession,
				CaptureMethod:        str(p.CaptureMethod),
				SetupFutureUsage:     str(p.SetupFutureUsage),
				Description:          str(p.Description),
				ReceiptEmail:         str(p.ReceiptEmail),
				StatementDescriptor:  str(p.StatementDescriptor),
				ReturnURL:            str(p.ReturnURL),
				TransferGroup:        str(p.TransferGroup),
				OnBehalfOf:           str(p.OnBehalfOf),
				ApplicationFeeAmount: p.ApplicationFeeAmount,
				Metadata:             withKey(p.Metadata, base),
			}
			if len(p.PaymentMethodTypes) == 0 {
				params.PaymentMethodTypes = nil
			}
			pi, err := api.PaymentIntents.New(params)
			if err != nil {
				return "", nil, err
			}
			return pi.ID, pi.LastResponse, nil
		}, nil
	case *stripeschema.PaymentIntentCapture:
		return func(api *client.API, base stripego.Params) (string, *stripego.APIResponse, error) {
			params := &stripego.PaymentIntentCaptureParams{Params: base, AmountToCapture: p.AmountToCapture}
			if len(p.Metadata) > 0 {
				params.Metadata = p.Metadata
			}
			pi, err := api.PaymentIntents.Capture(p.ID, params)
			if err != nil {
				return "", nil, err
			}
			return pi.ID, pi.LastResponse, nil
		}, nil
	case *stripeschema.PaymentIntentCancel:
		return func(api *client.API, base stripego.Params) (string, *stripego.APIResponse, error) {
			pi, err := api.PaymentIntents.Cancel(p.ID, &stripego.PaymentIntentCancelParams{
				Params: base, CancellationReason: str(p.CancellationReason),
			})
			if err != nil {
				return "", nil, err
			}
			return pi.ID, pi.LastResponse, nil
		}, nil
	case *stripeschema.RefundCreate:
		return func(api *client.API, base stripego.Params) (string, *stripego.APIResponse, error) {
			r, err := api.Refunds.New(&stripego.RefundParams{
				Params:               base,
				PaymentIntent:        str(p.PaymentIntent),
				Charge:               str(p.Charge),
				Amount:               p.Amount,
				Reason:               str(p.Reason),
				RefundApplicationFee: p.RefundApplicationFee,
				ReverseTransfer:      p.ReverseTransfer,
				Metadata:             withKey(p.Metadata, base),
			})
			if err != nil {
				return "", nil, err
			}
			return r.ID, r.LastResponse, nil
		}, nil
	case *stripeschema.CustomerCreate:
		return func(api *client.API, base stripego.Params) (string, *stripego.APIResponse, error) {
			cu, err := api.Customers.New(&stripego.CustomerParams{
				Params:        base,
				Email:         str(p.Email),
				Name:          str(p.Name),
				Phone:         str(p.Phone),
				Description:   str(p.Description),
				PaymentMethod: str(p.PaymentMethod),
				Metadata:      withKey(p.Metadata, base),
			})
			if err != nil {
				return "", nil, err
			}
			return cu.ID, cu.LastResponse, nil
		}, nil
	case *stripeschema.TransferCreate:
		return func(api *client.API, base stripego.Params) (string, *stripego.APIResponse, error) {
			t, err := api.Transfers.New(&stripego.TransferParams{
				Params:            base,
				Amount:            p.Amount,
				Currency:          str(p.Currency),
				Destination:       str(p.Destination),
				TransferGroup:     str(p.TransferGroup),
				SourceTransaction: str(p.SourceTransaction),
				Description:       str(p.Description),
				Metadata:          withKey(p.Metadata, base),
			})
			if err != nil {
				return "", nil, err
			}
			return t.ID, t.LastResponse, nil
		}, nil
	default:
		return nil, fmt.Errorf("stripe: no call for params %T", params)
	}
}

// parsePayload decodes and validates a Stripe payload into a call.
func parsePayload(raw []byte) (call, error) {
	params, err := stripeschema.Parse(raw)
	if err != nil {
		return nil, err
	}
	return callFor(params)
}

func str(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// withKey adds the idempotency key to metadata, so a person reconciling at
// Stripe can search for the effect.
func withKey(m map[string]string, base stripego.Params) map[string]string {
	out := make(map[string]string, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	if base.IdempotencyKey != nil {
		out[MetadataKey] = *base.IdempotencyKey
	}
	return out
}
