package providers

import (
	"encoding/json"
	"fmt"
)

// Profile is what outboxd tells operators about a provider, and the rules
// their actions follow for its effects: read by the operator API,
// outboxctl and the web view by the provider's name, so that none of them
// names a provider. A provider (or its schema) returns its own (Profiler);
// one with none gets the cautious defaults of Profiles.Of.
type Profile struct {
	// Name is the provider's name, as stored in side_effects.provider.
	Name string
	// Refs says its acknowledgement carries the provider's id for what it
	// did (a Stripe object id, a SendGrid message id): confirming one of its
	// effects by hand then takes that reference, which RefExample
	// describes. False for a provider that has none (webhooks: a confirmed
	// webhook is recorded with its webhook-id).
	Refs       bool
	RefExample string
	// LookUp says where an operator finds out whether the provider acted
	// on key; ask is how the surface showing it names outboxd's own ask of
	// the provider (reconcile), for the providers that can answer.
	LookUp func(key, ask string) string
	// Events says the provider's events confirm its effects by themselves
	// when outboxd receives them (outboxd run --events-addr).
	Events bool
	// Answers is what asking the provider about a key can find.
	Answers Answers
	// RefusedWithoutActing reports whether a permanent answer's text says
	// the provider refused the request's fields without acting and keeps
	// no result for its key: the rule an operator's payload edit follows.
	RefusedWithoutActing func(text string) bool
	// Host is the destination host a payload names, as written and in
	// lower case ("" for none): stuck effects are grouped by it.
	Host func(payload json.RawMessage) string
}

// Answers is what asking a provider about a key can find.
type Answers int

const (
	// AnswersNothing: the provider keeps no record outboxd can read (a
	// webhook's receiver's log is the only one).
	AnswersNothing Answers = iota
	// AnswersEvents: outboxd reads the events the provider sent it for the
	// key (SendGrid).
	AnswersEvents
	// AnswersObjects: the provider lists the objects that carry the key
	// (Stripe), with a Reconciler.
	AnswersObjects
)

// Profiler is implemented by a provider, or its payload schema, that
// describes itself to operators.
type Profiler interface {
	Profile() Profile
}

// Profiles are the profiles of a program's providers, by name.
type Profiles map[string]Profile

// ProfilesOf collects the profiles of xs that have one (Profiler): the
// built-in schemas (bundled.Profiles), and an application's providers. A
// later profile of a name replaces an earlier one.
func ProfilesOf(xs ...any) Profiles {
	out := Profiles{}
	for _, x := range xs {
		if p, ok := x.(Profiler); ok {
			if pr := p.Profile(); pr.Name != "" {
				out[pr.Name] = pr
			}
		}
	}
	return out
}

// Of returns the profile of provider name, and false when there is none.
// The cautious defaults fill what a profile leaves out (and a missing
// one): a confirmation takes a reference, nothing can be asked, no
// failure proves that nothing was done.
func (ps Profiles) Of(name string) (Profile, bool) {
	p, ok := ps[name]
	if !ok {
		p = Profile{Name: name, Refs: true}
	}
	if p.RefExample == "" {
		p.RefExample = "as the provider names it"
	}
	if p.LookUp == nil {
		p.LookUp = func(key, _ string) string { return fmt.Sprintf("look up key %s at the provider", key) }
	}
	if p.RefusedWithoutActing == nil {
		p.RefusedWithoutActing = func(string) bool { return false }
	}
	if p.Host == nil {
		p.Host = func(json.RawMessage) string { return "" }
	}
	return p, ok
}
