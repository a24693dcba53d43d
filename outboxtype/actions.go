package outboxtype

import "encoding/json"

// Change is what an action did, or would do, to one effect.
type Change struct {
	Effect *Effect `json:"effect"`
	From   State   `json:"from"`
	To     State   `json:"to"`
	// Applied is true when the transition was (or, in a dry run, would be)
	// made; Skipped says why not otherwise.
	Applied bool   `json:"applied"`
	Skipped string `json:"skipped,omitempty"`
	// Transient is true when the refusal may pass by itself (a River job
	// still running for the effect, a concurrent change): look again
	// later.
	Transient bool `json:"transient,omitempty"`
	// Override, on a refusal, is the option of ActionOpts that lets the
	// action go ahead once the operator checked what Skipped says ("" when
	// none does). Each surface names it its own way (outboxctl's flag, the
	// web view's box).
	Override Override `json:"override,omitempty"`
	// Warning is something the operator must know about an applied change.
	Warning string `json:"warning,omitempty"`
	// JobInserted is true when retry inserted a new River job (false when a
	// live job existed already).
	JobInserted bool `json:"job_inserted,omitempty"`
	// ClearsDoubt is true when retry re-sends an at_most_once effect in
	// doubt (AllowDuplicate); RestartsKeyWindow when a forced retry starts a
	// new key window.
	ClearsDoubt       bool `json:"clears_doubt,omitempty"`
	RestartsKeyWindow bool `json:"restarts_key_window,omitempty"`
	// PayloadBefore and PayloadAfter are an edited payload as it was and
	// as it is (EditPayload); the audit row keeps both.
	PayloadBefore json.RawMessage `json:"payload_before,omitempty"`
	PayloadAfter  json.RawMessage `json:"payload_after,omitempty"`
}

// Override names an option of ActionOpts that lets a refused action go
// ahead.
type Override string

// The options a refusal may name.
const (
	// OverrideForce is ActionOpts.Force.
	OverrideForce Override = "force"
	// OverrideAllowDuplicate is ActionOpts.AllowDuplicate.
	OverrideAllowDuplicate Override = "allow_duplicate"
)

// ActionOpts describe who acts and why.
type ActionOpts struct {
	Actor  string
	Reason string
	// DryRun reports what would change and changes nothing.
	DryRun bool
	// Force lets retry move a fired effect back to pending, and retry an
	// effect whose key window has (nearly) passed, after the operator
	// checked the provider; the re-fire then starts a new key window.
	Force bool
	// AllowDuplicate lets retry re-send an at_most_once effect whose last
	// request may have been delivered: the operator accepts that the
	// recipient may get it twice.
	AllowDuplicate bool
	// Ref is the provider's reference, for confirm.
	Ref string
	// Replay is the paced replay a retry is part of (set by outboxd's
	// replay worker; 0 for an operator's own retry): the effect's
	// requests then keep the replay's pace, its retries included.
	Replay int64
}

// Operator actions recorded in side_effect_audit.action.
const (
	ActionRetry   = "retry"
	ActionCancel  = "cancel"
	ActionConfirm = "confirm"
	ActionRequeue = "requeue"
	// ActionAcknowledge marks a failed effect as reviewed.
	ActionAcknowledge = "acknowledge"
	// ActionRelease lets the effects after one on its ordering key go on,
	// whatever becomes of it.
	ActionRelease = "release"
	// ActionLateAck records a provider's acknowledgement that arrived after
	// an operator's action.
	ActionLateAck = "late_ack"
	// ActionEditPayload corrects the payload of an effect no provider saw
	// and sends it back to pending.
	ActionEditPayload = "edit_payload"
)
