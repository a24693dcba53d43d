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
	handOffs := b.startHandOffs(ctx, job.Queue)
	var wg sync.WaitGroup
	for _, id := range job.Args.EffectIDs {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			// Stopping: not claimed, so nothing to undo.
			handOffs.add(handOff{id: id, at: time.Now()})
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			if h, ok := b.one(ctx, job, id); ok {
				handOffs.add(h)
			}
		}()
	}
	wg.Wait()
	return handOffs.finish()
}

// handOffs gives a batch's handed-off effects their jobs as they come,
// not when the batch's slowest effect ends: an effect that must wait for
// a limit, or be retried, is due on its own schedule, whatever call is
// still in flight elsewhere in its batch. Effects handed off while an
// insert runs go together in the next one.
type handOffs struct {
	mu      sync.Mutex
	waiting []handOff
	err     error // the first failed insert; the rest then wait for finish
	wake    chan struct{}
	done    chan struct{}
	flushed chan struct{}
}

// startHandOffs starts giving effects handed off in queue their jobs. The
// inserts are recorded even when the job's context ends: the effects'
// outcomes are, and a handed-off effect must get its job.
func (b *batchWorker) startHandOffs(ctx context.Context, queue string) *handOffs {
	h := &handOffs{wake: make(chan struct{}, 1), done: make(chan struct{}), flushed: make(chan struct{})}
	go func() {
		defer close(h.flushed)
		for {
			var last bool
			select {
			case <-h.wake:
			case <-h.done:
				last = true
			}
			h.mu.Lock()
			outs, failed := h.waiting, h.err != nil
			if !failed || last {
				h.waiting = nil
			}
			h.mu.Unlock()
			if len(outs) > 0 && (!failed || last) {
				hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookkeepingTimeout)
				err := b.insertOwnJobs(hctx, queue, outs)
				cancel()
				if err != nil {
					h.mu.Lock()
					if h.err == nil {
						h.err = err
					}
					if !last {
						h.waiting = append(outs, h.waiting...)
					}
					h.mu.Unlock()
				}
			}
			if last {
				return
			}
		}
	}()
	return h
}

// add hands x off.
func (h *handOffs) add(x handOff) {
	h.mu.Lock()
	h.waiting = append(h.waiting, x)
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// finish gives what is still waiting its jobs and returns the first
// insert that failed: River then runs the batch again, which hands every
// effect of it that has not ended to a job of its own.
func (h *handOffs) finish() error {
	close(h.done)
	<-h.flushed
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
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
