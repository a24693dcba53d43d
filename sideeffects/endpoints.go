package sideeffects

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers/endpoint"
)

// MaxHeldDeliveries bounds the held deliveries one EnableEndpoint acts on.
const MaxHeldDeliveries = 10000

// EndpointEnabled is what EnableEndpoint did.
type EndpointEnabled struct {
	// Held is how many deliveries the endpoint held (pending or fired).
	Held int `json:"held"`
	// Dropped is how many of them were cancelled (drop), Delivering how
	// many were made due at once (the others go at the time they were
	// given, within endpoint.HeldRecheck).
	Dropped    int `json:"dropped"`
	Delivering int `json:"delivering"`
}

// EnableEndpoint enables endpoint id in reg, the operator's choice made
// for what it held while disabled: delivered at once, with their keys, or,
// with drop, cancelled first (each audited with reason), so only new
// events reach it. actor and reason are required.
func (o *Operator) EnableEndpoint(ctx context.Context, reg *endpoint.Registry, id uuid.UUID, drop bool, actor, reason string) (EndpointEnabled, error) {
	pool := o.pool
	held, err := reg.Deliveries(ctx, pool, id, MaxHeldDeliveries)
	if err != nil {
		return EndpointEnabled{}, err
	}
	res := EndpointEnabled{Held: len(held)}
	by := endpoint.Change{Actor: actor, Reason: reason}
	if drop && len(held) > 0 {
		// Checked first: a refusal cancels nothing.
		if _, err := reg.Get(ctx, pool, id); err != nil {
			return res, err
		}
		if reason == "" {
			return res, &endpoint.ValidationError{Field: "reason", Problem: "required: why its held deliveries are dropped"}
		}
		changes, err := o.Cancel(ctx, held, outboxtype.ActionOpts{Actor: actor, Reason: reason})
		if err != nil {
			return res, fmt.Errorf("drop held deliveries: %w", err)
		}
		for _, c := range changes {
			if c.Applied {
				res.Dropped++
			}
		}
	}
	if err := reg.Enable(ctx, pool, id, by); err != nil {
		return res, err
	}
	if res.Delivering, err = o.ResumeLimit(ctx, endpoint.LimitKey(id), actor, reason); err != nil {
		return res, fmt.Errorf("endpoint %s enabled; its held deliveries go within %s: %w", id, endpoint.HeldRecheck, err)
	}
	return res, nil
}
