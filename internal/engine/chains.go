package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/outboxd/outboxd/internal/store"
)

// nextInChains gives the first effect of each of keys that has not ended,
// if it is pending, a dispatch job, and takes the keys' wakes (see
// wakeChains).
func nextInChains(ctx context.Context, st *store.Store, tx pgx.Tx, client *river.Client[pgx.Tx], keys []string) error {
	heads, err := st.NextInChains(ctx, tx, keys)
	if err != nil {
		return err
	}
	return insertChainJobs(ctx, tx, client, heads)
}

// wakeChains takes up to limit keys whose chain may have moved (an effect
// of the key was inserted, ended or released) and gives the first effect of
// each that has not ended, if it is pending, a dispatch job. It returns
// how many keys it took.
func wakeChains(ctx context.Context, st *store.Store, tx pgx.Tx, client *river.Client[pgx.Tx], limit int) (int, error) {
	heads, err := st.TakeWakes(ctx, tx, limit)
	if err != nil {
		return 0, err
	}
	if err := insertChainJobs(ctx, tx, client, heads); err != nil {
		return 0, err
	}
	var held []string
	for _, h := range heads {
		if h.HeldKey != nil {
			held = append(held, *h.HeldKey)
		}
	}
	if len(held) > 0 {
		// Their first effect is being changed by a transaction that may
		// not see what was enqueued behind it: look again once it ends.
		if err := st.WakeAgain(ctx, tx, held); err != nil {
			return 0, err
		}
	}
	return len(heads), nil
}

// insertChainJobs gives each pending head a dispatch job. The heads due
// now share batch jobs, by provider (a batch claims an effect only while
// it is first in its chain, and only for its first attempt); the others
// get jobs of their own, which are unique per effect while live: an effect
// that has one keeps it, and a job waiting behind its predecessor (see
// Worker) is made available now.
func insertChainJobs(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], heads []store.ChainHead) error {
	var params []river.InsertManyParams
	var due dueNow
	now := time.Now()
	for _, h := range heads {
		switch {
		case h.ID == nil:
		case h.NotBefore != nil && h.NotBefore.After(now):
			params = append(params, JobParams(*h.ID, *h.Provider, h.NotBefore))
		default:
			due.add(*h.Provider, *h.ID)
		}
	}
	var batches []river.InsertManyParams
	for _, jp := range due.params() {
		if _, ok := jp.Args.(BatchArgs); ok {
			batches = append(batches, jp)
		} else {
			params = append(params, jp)
		}
	}
	if len(batches) > 0 {
		if _, err := client.InsertManyTx(ctx, tx, batches); err != nil {
			return fmt.Errorf("wake chains: insert batch jobs: %w", err)
		}
	}
	if len(params) == 0 {
		return nil
	}
	res, err := client.InsertManyTx(ctx, tx, params)
	if err != nil {
		return fmt.Errorf("wake chains: insert jobs: %w", err)
	}
	for i, r := range res {
		st := r.Job.State
		if !r.UniqueSkippedAsDuplicate {
			continue
		}
		// A job that found its effect blocked snoozed (River keeps a short
		// snooze available, a longer one scheduled): wake it now, unless
		// the effect itself must still wait.
		if (st == rivertype.JobStateScheduled || st == rivertype.JobStateAvailable) && r.Job.ScheduledAt.After(now) {
			if nb := params[i].InsertOpts.ScheduledAt; !nb.IsZero() && nb.After(now) {
				continue
			}
			if _, err := client.JobRetryTx(ctx, tx, r.Job.ID); err != nil {
				return fmt.Errorf("wake chains: make job %d available: %w", r.Job.ID, err)
			}
		}
	}
	return nil
}
