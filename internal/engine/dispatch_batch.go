package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// batchWorker works batch jobs. River's cost is paid once per batch: its
// insert, fetch and completion. Each effect of the batch goes through the
// same steps as a job of its own (limits, claim, call, confirmation, the
// claims and confirmations shared with other workers), at once, up to the
// provider's concurrency over all batches. A batch makes first attempts
// only: an effect that must wait (a limit, a destination's line, a 429),
// is retried, or was not due its first attempt is handed to a job of its
// own, scheduled for when it is due, and is never touched by the batch
// again. A batch River runs a second time (its process died, or it could
// not hand an effect over) fires nothing: it hands every effect of it that
// has not ended to a job of its own, where a re-fire applies the in-doubt
// policy as any rescue does.
type batchWorker struct {
	river.WorkerDefaults[BatchArgs]
	w *Worker
	// slots bound, per provider, the effects of batches being worked at
	// once to the provider's concurrency.
	slots map[string]chan struct{}
}

// handOff is an effect a batch gives a job of its own, due at.
type handOff struct {
	id uuid.UUID
	at time.Time
}

// Work implements river.Worker.
func (b *batchWorker) Work(ctx context.Context, job *river.Job[BatchArgs]) error {
	if job.Attempt > 1 {
		return b.handOverUnended(ctx, job.Args.EffectIDs)
	}
	slots := b.slots[job.Queue]
	var (
		mu   sync.Mutex
		outs []handOff
		wg   sync.WaitGroup
	)
	add := func(h handOff) {
		mu.Lock()
		outs = append(outs, h)
		mu.Unlock()
	}
	for _, id := range job.Args.EffectIDs {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			// Stopping: not claimed, so nothing to undo.
			add(handOff{id: id, at: time.Now()})
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			if h, ok := b.one(ctx, job, id); ok {
				add(h)
			}
		}()
	}
	wg.Wait()
	if len(outs) == 0 {
		return nil
	}
	// Recorded even when the job's context ended: the effects' outcomes
	// are, and a handed-off effect must get its job.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
	defer cancel()
	return b.insertOwnJobs(hctx, job.Queue, outs)
}

// one works effect id of job as a job of its own would, and says whether
// (and when) it must go on in a job of its own.
func (b *batchWorker) one(ctx context.Context, job *river.Job[BatchArgs], id uuid.UUID) (h handOff, out bool) {
	defer func() {
		if r := recover(); r != nil {
			// A job of its own would have been retried by River.
			b.w.logger.Error("dispatch of a batch's effect panicked: handed to a job of its own", "effect_id", id, "panic", fmt.Sprint(r))
			h, out = handOff{id: id, at: b.w.retryTime(id)}, true
		}
	}()
	err := b.w.work(ctx, &river.Job[DispatchArgs]{JobRow: job.JobRow, Args: DispatchArgs{EffectID: id}}, true)
	var snooze *rivertype.JobSnoozeError
	var cancelled *rivertype.JobCancelError
	switch {
	case err == nil, errors.As(err, &cancelled):
		// Done with: confirmed, failed (recorded), or nothing to do.
		b.w.retryAt.Delete(id)
		return handOff{}, false
	case errors.As(err, &snooze):
		return handOff{id: id, at: time.Now().Add(snooze.Duration)}, true
	case errors.Is(err, errNotFirst):
		return handOff{id: id, at: time.Now()}, true
	default:
		if !errors.Is(err, context.Canceled) {
			b.w.logger.Debug("a batch's effect goes on in a job of its own", "effect_id", id, "error", err)
		}
		return handOff{id: id, at: b.w.retryTime(id)}, true
	}
}

// insertOwnJobs gives each handed-off effect a job of its own in queue,
// scheduled for when it is due. Jobs are unique per effect while live: an
// effect that has one keeps it.
func (b *batchWorker) insertOwnJobs(ctx context.Context, queue string, outs []handOff) error {
	params := make([]river.InsertManyParams, len(outs))
	for i, h := range outs {
		at := h.at
		params[i] = JobParams(h.id, queue, &at)
	}
	return pgx.BeginFunc(ctx, b.w.pool, func(tx pgx.Tx) error {
		if _, err := b.w.client.InsertManyTx(ctx, tx, params); err != nil {
			return fmt.Errorf("batch: hand %d effects to jobs of their own: %w", len(outs), err)
		}
		return nil
	})
}

// handOverUnended gives every effect of ids that has not ended a job of
// its own, due now.
func (b *batchWorker) handOverUnended(ctx context.Context, ids []uuid.UUID) error {
	return pgx.BeginFunc(ctx, b.w.pool, func(tx pgx.Tx) error {
		unended, err := b.w.store.Unended(ctx, tx, ids)
		if err != nil {
			return fmt.Errorf("batch: %w", err)
		}
		var params []river.InsertManyParams
		for _, x := range unended {
			params = append(params, JobParams(x.ID, x.Provider, x.NotBefore))
		}
		if len(params) == 0 {
			return nil
		}
		if _, err := b.w.client.InsertManyTx(ctx, tx, params); err != nil {
			return fmt.Errorf("batch: hand %d effects to jobs of their own: %w", len(params), err)
		}
		return nil
	})
}

// NextRetry implements river.Worker: a batch River runs again is run at
// once (it hands its effects over; see batchWorker).
func (b *batchWorker) NextRetry(*river.Job[BatchArgs]) time.Time { return time.Now() }
