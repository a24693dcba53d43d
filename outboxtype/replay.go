package outboxtype

import (
	"strings"
	"time"

	"github.com/google/uuid"
)

// ReplaySpec selects the failed effects a paced replay retries and says how
// fast: those that failed (and were not acknowledged) from FailedSince until
// the replay starts, of Kind, Provider and Host where set, at Pace effects
// a second.
type ReplaySpec struct {
	FailedSince time.Time `json:"failed_since"`
	Kind        string    `json:"kind,omitempty"`
	Provider    string    `json:"provider,omitempty"`
	// Host is a destination host as the attempts recorded it (a webhook
	// receiver's host): effects whose failed attempts went there.
	Host string `json:"host,omitempty"`
	// Tenant is a tenant's effects only (Effect.Tenant).
	Tenant string  `json:"tenant,omitempty"`
	Pace   float64 `json:"pace"`
	// AllowDuplicate re-sends at_most_once effects in doubt, as retry
	// --allow-duplicate does; without it they are skipped.
	AllowDuplicate bool `json:"allow_duplicate,omitempty"`
}

// The states of a replay.
const (
	ReplayRunning   = "running"
	ReplayDone      = "done"
	ReplayCancelled = "cancelled"
)

// Replay is a paced replay and how far it has come.
type Replay struct {
	ID           int64      `json:"id"`
	State        string     `json:"state"`
	Actor        string     `json:"actor"`
	Reason       string     `json:"reason"`
	Spec         ReplaySpec `json:"spec"`
	FailedBefore time.Time  `json:"failed_before"`
	// Selected is how many effects matched when it started; Retried and
	// Skipped how many it has retried and skipped (its skips say why);
	// Again how many were refused for a reason that passes by itself (a
	// River job still running for the effect) and are looked at again
	// once the rest is done.
	Selected    int        `json:"selected"`
	Retried     int        `json:"retried"`
	Skipped     int        `json:"skipped"`
	Again       int        `json:"again"`
	LastError   string     `json:"last_error,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	CancelledBy string     `json:"cancelled_by,omitempty"`
	// Job is the River job that runs it (0: none live, see Resume).
	Job int64 `json:"job"`
}

// Selects says which failed effects r selects, for people: "failed since
// 2026-11-26T02:00:00Z, provider webhook".
func (r Replay) Selects() string {
	parts := []string{"failed since " + r.Spec.FailedSince.UTC().Format(time.RFC3339)}
	for _, f := range []struct{ name, v string }{{"kind", r.Spec.Kind}, {"provider", r.Spec.Provider}, {"host", r.Spec.Host}, {"tenant", r.Spec.Tenant}} {
		if f.v != "" {
			parts = append(parts, f.name+" "+f.v)
		}
	}
	return strings.Join(parts, ", ")
}

// Left is how many of the selected effects it has not looked at yet.
func (r Replay) Left() int { return max(0, r.Selected-r.Retried-r.Skipped) }

// ReplayPace is one change of a running replay's pace: to Pace from
// Previous (effects a second), by Actor for Reason.
type ReplayPace struct {
	Pace     float64   `json:"pace"`
	Previous float64   `json:"previous"`
	Actor    string    `json:"actor"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
}

// ReplaySkip is an effect a replay did not retry, and why.
type ReplaySkip struct {
	EffectID uuid.UUID `json:"effect_id"`
	Kind     string    `json:"kind"`
	Reason   string    `json:"reason"`
	// Transient: the replay looks at it again.
	Transient bool      `json:"transient,omitempty"`
	At        time.Time `json:"at"`
}

// TenantReport is one tenant's queue at one provider (fair shares): its
// effects waiting for a place in its window (due now, and scheduled for
// later), the oldest due one, and those given a job and not ended.
type TenantReport struct {
	Provider     string     `json:"provider"`
	Tenant       string     `json:"tenant"`
	Queued       int64      `json:"queued"`
	Scheduled    int64      `json:"scheduled"`
	OldestQueued *time.Time `json:"oldest_queued,omitempty"`
	InFlight     int64      `json:"in_flight"`
}

// TenantTotal is every tenant's queue at one provider together: how many
// tenants have due effects waiting for a place in their window, how many
// effects that is, and since when the oldest has waited.
type TenantTotal struct {
	Provider     string     `json:"provider"`
	Tenants      int64      `json:"tenants"`
	Queued       int64      `json:"queued"`
	OldestQueued *time.Time `json:"oldest_queued,omitempty"`
}
