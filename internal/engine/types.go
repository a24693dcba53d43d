package engine

import "github.com/outboxd/outboxd/outboxtype"

// The effect, its states and what the reads return are value types of
// package outboxtype, shared with the public faces.
type (
	State            = outboxtype.State
	Effect           = outboxtype.Effect
	ActionOpts       = outboxtype.ActionOpts
	Attempt          = outboxtype.Attempt
	AttemptsBucket   = outboxtype.AttemptsBucket
	AuditEntry       = outboxtype.AuditEntry
	Change           = outboxtype.Change
	Delivery         = outboxtype.Delivery
	DispatcherRecord = outboxtype.DispatcherRecord
	DriftFilter      = outboxtype.DriftFilter
	DriftRecord      = outboxtype.DriftRecord
	Event            = outboxtype.Event
	EventEffect      = outboxtype.EventEffect
	EventEffects     = outboxtype.EventEffects
	EventFilter      = outboxtype.EventFilter
	EventResult      = outboxtype.EventResult
	Filter           = outboxtype.Filter
	Job              = outboxtype.Job
	MinuteCount      = outboxtype.MinuteCount
	PurgeResult      = outboxtype.PurgeResult
	PurgeOptions     = outboxtype.PurgeOptions
	ReasonCount      = outboxtype.ReasonCount
	StateGauge       = outboxtype.StateGauge
	StateKindCount   = outboxtype.StateKindCount
	Stats            = outboxtype.Stats
	StuckEffect      = outboxtype.StuckEffect
	RetryPolicy      = outboxtype.RetryPolicy
	Observer         = outboxtype.Observer
	Tracer           = outboxtype.Tracer
	RunningJobs      = outboxtype.RunningJobs
	StuckGroup       = outboxtype.StuckGroup
)

// The states of side_effects.state.
const (
	StatePending   = outboxtype.StatePending
	StateFired     = outboxtype.StateFired
	StateConfirmed = outboxtype.StateConfirmed
	StateFailed    = outboxtype.StateFailed
	StateCancelled = outboxtype.StateCancelled
)

// Defaults for RetryPolicy's zero values.
const (
	DefaultMaxAttempts = outboxtype.DefaultMaxAttempts
	DefaultBaseDelay   = outboxtype.DefaultBaseDelay
	DefaultMaxDelay    = outboxtype.DefaultMaxDelay
)

// Failure reasons, audit actions and drift reasons.
const (
	ReasonUnqueueable        = outboxtype.ReasonUnqueueable
	DriftUnknownKey          = outboxtype.DriftUnknownKey
	DriftActedWhileFailed    = outboxtype.DriftActedWhileFailed
	DriftActedWhileCancelled = outboxtype.DriftActedWhileCancelled
	DriftTwoObjects          = outboxtype.DriftTwoObjects
	DriftUndone              = outboxtype.DriftUndone
	DriftOtherProvider       = outboxtype.DriftOtherProvider
	DriftOtherOperation      = outboxtype.DriftOtherOperation
	DriftOtherObject         = outboxtype.DriftOtherObject
	ActionRetry              = outboxtype.ActionRetry
	ActionCancel             = outboxtype.ActionCancel
	ActionConfirm            = outboxtype.ActionConfirm
	ActionRequeue            = outboxtype.ActionRequeue
	ActionAcknowledge        = outboxtype.ActionAcknowledge
	ActionRelease            = outboxtype.ActionRelease
	ActionLateAck            = outboxtype.ActionLateAck
	ActionEditPayload        = outboxtype.ActionEditPayload
	ReasonKeyWindow          = outboxtype.ReasonKeyWindow
	ReasonInDoubt            = outboxtype.ReasonInDoubt
	ActionEventConfirm       = outboxtype.ActionEventConfirm
)
