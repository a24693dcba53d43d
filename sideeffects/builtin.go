package sideeffects

// The built-in providers' profiles (providers.Profile), registered when
// their packages load: the operator's rules for their effects (a webhook
// is confirmed without a reference; which refusals prove nothing was
// done) never depend on what else a program imports.
import _ "github.com/outboxd/outboxd/providers/bundled"
