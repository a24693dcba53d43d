package outboxtype

// Reconciliation is what asking the provider found for an effect's key,
// beside the effect: outboxctl reconcile and the web view's "Ask the
// provider" show it, and oncall.Suggest says what to do.
type Reconciliation struct {
	Effect *Effect `json:"effect"`
	// Asked says what was asked, and of whom.
	Asked string  `json:"asked"`
	Found []Found `json:"found"`
	// Delivery is what SendGrid's events told outboxd of a mail.
	Delivery *Delivery     `json:"delivery,omitempty"`
	Drift    []DriftRecord `json:"drift,omitempty"`
	// Suggestion is oncall.Suggest's text, for --json.
	Suggestion string  `json:"suggestion"`
	Applied    *Change `json:"applied,omitempty"`
}
