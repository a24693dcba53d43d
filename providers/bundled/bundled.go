// Package bundled is the one list of outboxd's built-in providers' schemas:
// what package outbox validates payloads with, what an operator's payload
// edit is checked against, and, through each schema's Profile, what
// operators are told about the built-in providers (Profiles).
//
// A new built-in provider adds its schema here; nothing else outside its
// own package lists it.
package bundled

import (
	"net/netip"

	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/endpoint/endpointschema"
	"github.com/outboxd/outboxd/providers/kafka/kafkaschema"
	"github.com/outboxd/outboxd/providers/nats/natsschema"
	"github.com/outboxd/outboxd/providers/sendgrid/sendgridschema"
	"github.com/outboxd/outboxd/providers/stripe/stripeschema"
	"github.com/outboxd/outboxd/providers/webhook"
)

// Schemas returns the built-in providers' payload schemas; networks are
// the non-public networks webhook effects may point at.
func Schemas(networks []netip.Prefix) []providers.Validator {
	return []providers.Validator{
		webhook.Schema{AllowedNetworks: networks},
		stripeschema.Schema{},
		sendgridschema.Schema{},
		natsschema.Schema{},
		kafkaschema.Schema{},
		endpointschema.Schema{},
	}
}

// Profiles returns the built-in providers' profiles (each schema's
// providers.Profiler).
func Profiles() providers.Profiles {
	schemas := Schemas(nil)
	xs := make([]any, len(schemas))
	for i, s := range schemas {
		xs[i] = s
	}
	return providers.ProfilesOf(xs...)
}
