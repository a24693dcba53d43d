package sideeffects

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxd/outboxd/internal/engine"
)

// MaxResumeWakes bounds the jobs one ResumeLimit makes due at once; the
// rest come at the time they were given.
const MaxResumeWakes = 10000

// resumeMargin is how long past a limit refresh ResumeLimit waits before
// it wakes the effects waiting for the key it resumed.
const resumeMargin = 300 * time.Millisecond

// ResumeLimit ends the pause and the lowered rate of key (a 429's, or a
// destination that held its effects back, such as a disabled endpoint)
// for every replica, and makes the effects waiting for it due. Audited
// with actor and reason; it returns how many effects it woke.
func (o *Operator) ResumeLimit(ctx context.Context, key, actor, reason string) (int, error) {
	woken, err := o.ResumeLimits(ctx, []string{key}, actor, reason)
	return woken[key], err
}

// ResumeLimits is ResumeLimit for each of keys, each audited, and returns
// how many effects it woke for each.
func (o *Operator) ResumeLimits(ctx context.Context, keys []string, actor, reason string) (map[string]int, error) {
	for _, key := range keys {
		pool, st := o.limitsPlace(key)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return st.ResumeLimit(ctx, tx, key, actor, reason)
		})
		if err != nil {
			return nil, err
		}
	}
	return o.WakeWaiting(ctx, keys)
}

// WakeWaiting makes the effects waiting for each of keys due, once every
// replica has read the keys' rows again (engine.LimitRefresh, plus a margin): a
// replica that still remembered a pause just ended would send a woken
// effect away for the rest of it. Called after a pause ends or a rate is
// raised; it returns how many effects it woke for each key.
func (o *Operator) WakeWaiting(ctx context.Context, keys []string) (map[string]int, error) {
	select {
	case <-time.After(engine.LimitRefresh + resumeMargin):
	case <-ctx.Done():
		return nil, fmt.Errorf("limits %s changed; their waiting effects go at the time they were given: %w", strings.Join(keys, ", "), ctx.Err())
	}
	woken := map[string]int{}
	for _, key := range keys {
		err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
			jobs, err := o.store.JobsWaitingFor(ctx, tx, key, MaxResumeWakes)
			if err != nil {
				return err
			}
			for _, id := range jobs {
				if _, err := o.river.JobRetryTx(ctx, tx, id); err != nil {
					return fmt.Errorf("make job %d due: %w", id, err)
				}
			}
			woken[key] = len(jobs)
			return nil
		})
		if err != nil {
			return woken, fmt.Errorf("wake the effects waiting for limit %s: %w", key, err)
		}
	}
	return woken, nil
}
