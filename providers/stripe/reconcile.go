package stripe

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	stripego "github.com/stripe/stripe-go/v79"

	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
)

var _ providers.Reconciler = (*Provider)(nil)

// lookupLimit bounds the objects read per lookup.
const lookupLimit = 100

// Lookup implements providers.Reconciler: the objects carrying the effect's
// key in their metadata (payment intents and customers through the Search
// API; refunds listed by their payment intent or charge, transfers by their
// destination, matched on metadata), or, for a capture or a cancel, the
// payment intent's status.
func (p *Provider) Lookup(ctx context.Context, payload json.RawMessage, key string) ([]providers.Found, string, error) {
	params, err := stripeschema.Parse(payload)
	if err != nil {
		return nil, "", err
	}
	query := fmt.Sprintf("metadata['%s']:'%s'", MetadataKey, key)
	limit := stripego.Int64(lookupLimit)
	var out []providers.Found
	add := func(id, object, status string, created int64) {
		out = append(out, providers.Found{ID: id, Object: object, Status: status, Created: time.Unix(created, 0)})
	}
	switch x := params.(type) {
	case *stripeschema.PaymentIntentCreate:
		it := p.api.PaymentIntents.Search(&stripego.PaymentIntentSearchParams{SearchParams: stripego.SearchParams{Context: ctx, Query: query, Limit: limit}})
		for it.Next() {
			pi := it.PaymentIntent()
			add(pi.ID, "payment_intent", string(pi.Status), pi.Created)
		}
		return out, "searched payment intents for " + query, it.Err()
	case *stripeschema.CustomerCreate:
		it := p.api.Customers.Search(&stripego.CustomerSearchParams{SearchParams: stripego.SearchParams{Context: ctx, Query: query, Limit: limit}})
		for it.Next() {
			c := it.Customer()
			add(c.ID, "customer", "", c.Created)
		}
		return out, "searched customers for " + query, it.Err()
	case *stripeschema.RefundCreate:
		lp := &stripego.RefundListParams{ListParams: stripego.ListParams{Context: ctx, Limit: limit}}
		how := "listed refunds of "
		if x.PaymentIntent != "" {
			lp.PaymentIntent, how = stripego.String(x.PaymentIntent), how+"payment intent "+x.PaymentIntent
		} else {
			lp.Charge, how = stripego.String(x.Charge), how+"charge "+x.Charge
		}
		it := p.api.Refunds.List(lp)
		for it.Next() {
			if r := it.Refund(); r.Metadata[MetadataKey] == key {
				add(r.ID, "refund", string(r.Status), r.Created)
			}
		}
		return out, how + " with metadata " + MetadataKey + " = the key", it.Err()
	case *stripeschema.TransferCreate:
		it := p.api.Transfers.List(&stripego.TransferListParams{ListParams: stripego.ListParams{Context: ctx, Limit: limit}, Destination: stripego.String(x.Destination)})
		for it.Next() {
			if t := it.Transfer(); t.Metadata[MetadataKey] == key {
				status := ""
				if t.Reversed {
					status = "reversed"
				}
				add(t.ID, "transfer", status, t.Created)
			}
		}
		return out, "listed transfers to " + x.Destination + " with metadata " + MetadataKey + " = the key", it.Err()
	case *stripeschema.PaymentIntentCapture:
		pi, err := p.api.PaymentIntents.Get(x.ID, &stripego.PaymentIntentParams{Params: stripego.Params{Context: ctx}})
		if err != nil {
			return nil, "", err
		}
		if pi.Status == stripego.PaymentIntentStatusSucceeded || pi.Status == stripego.PaymentIntentStatusProcessing {
			add(pi.ID, "payment_intent", string(pi.Status), pi.Created)
		}
		return out, fmt.Sprintf("read payment intent %s: %s (captured when succeeded or processing)", pi.ID, pi.Status), nil
	case *stripeschema.PaymentIntentCancel:
		pi, err := p.api.PaymentIntents.Get(x.ID, &stripego.PaymentIntentParams{Params: stripego.Params{Context: ctx}})
		if err != nil {
			return nil, "", err
		}
		if pi.Status == stripego.PaymentIntentStatusCanceled {
			add(pi.ID, "payment_intent", string(pi.Status), pi.Created)
		}
		return out, fmt.Sprintf("read payment intent %s: %s (done when canceled)", pi.ID, pi.Status), nil
	}
	return nil, "", fmt.Errorf("stripe: no lookup for %T", params)
}
