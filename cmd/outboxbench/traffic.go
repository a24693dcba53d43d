package main

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/sideeffects"
)

// traffic offers effects at a steady rate, one per application
// transaction, to a running dispatcher with a no-op provider, and records
// when each committed and when its provider call came.
type traffic struct {
	mu        sync.Mutex
	committed map[uuid.UUID]time.Time
	calls     sync.Map // effect id (string) -> time.Time
	noop      *noopProvider
	start     time.Time
	err       error
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	stopped   bool
	stopD     func()
}

type trafficOpts struct {
	// rate is effects per second, one per transaction, enqueued as mode
	// says.
	rate int
	mode enqueueMode
	// retention runs outboxd's periodic purge in the dispatcher, as
	// outboxd run does; without it there is none.
	retention bool
	// limit stops offering after that many effects (0: at stop).
	limit int
}

func (b *bench) startTraffic(ctx context.Context, o trafficOpts) (*traffic, error) {
	t := &traffic{committed: map[uuid.UUID]time.Time{}}
	t.noop = &noopProvider{onSend: func(req providers.Request) { t.calls.LoadOrStore(req.EffectID, time.Now()) }}
	noop := t.noop
	cfg := o.mode.config(b.schema)
	cfg.Providers = []providers.Validator{noop}
	ob, err := outbox.New(cfg)
	if err != nil {
		return nil, err
	}
	dcfg := b.dispatcherConfig(noop)
	if !o.retention {
		dcfg.Retention = -1
	}
	d, err := sideeffects.NewDispatcher(b.pool, dcfg)
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	t.stopD = func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Stop(stopCtx)
	}
	ctx, t.cancel = context.WithCancel(ctx)
	rate := o.rate
	work := make(chan int64, rate)
	for range 32 {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			for n := range work {
				var id uuid.UUID
				err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
					res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("bench.traffic", strconv.FormatInt(n, 10)), Type: "bench"},
						outbox.Effect{Kind: "noop.effect", Provider: "noop", Payload: json.RawMessage(`{}`)})
					if err == nil {
						id = res.Effects[0].ID
					}
					return err
				})
				at := time.Now()
				if err == nil && o.mode.wake {
					// After the commit, in a statement of its own; the
					// effect counts from the commit, as the others do.
					err = ob.WakeDispatchers(ctx, b.pool)
				}
				t.mu.Lock()
				if err != nil && t.err == nil && ctx.Err() == nil {
					t.err = err
				}
				if err == nil {
					t.committed[id] = at
				}
				t.mu.Unlock()
			}
		}()
	}
	t.start = time.Now()
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer close(work)
		interval := time.Second / time.Duration(rate)
		start := t.start
		for i := int64(0); ctx.Err() == nil && (o.limit == 0 || i < int64(o.limit)); i++ {
			if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
				if sleepCtx(ctx, wait) != nil {
					return
				}
			}
			work <- b.seq.Add(1)
		}
	}()
	return t, nil
}

// called is how many provider calls the traffic's dispatcher made.
func (t *traffic) called() int { return int(t.noop.calls.Load()) }

// offered waits until a limited traffic has offered and committed all its
// effects, and returns the first error.
func (t *traffic) offered() error {
	t.wg.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// stop ends the traffic, waits for what was committed to be called (at
// most 30 s) and stops the dispatcher; it returns the first error.
func (t *traffic) stop() error {
	if t.stopped {
		return t.err
	}
	t.stopped = true
	t.cancel()
	t.wg.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		missing := 0
		t.mu.Lock()
		for id := range t.committed {
			if _, ok := t.calls.Load(id.String()); !ok {
				missing++
			}
		}
		t.mu.Unlock()
		if missing == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.stopD()
	return t.err
}

// window reports, for the effects committed between from and to, how many
// per second were called and the commit-to-call p99.
func (t *traffic) window(from, to time.Time) (perSecond float64, p99 time.Duration) {
	lat := t.latencies(from, to)
	return float64(len(lat)) / to.Sub(from).Seconds(), percentile(lat, 0.99)
}

// latencies are the commit-to-call times, sorted, of the effects committed
// between from and to that were called. A worker may pick a job up before
// the producer's Commit returns; that counts as zero.
func (t *traffic) latencies(from, to time.Time) []time.Duration {
	var lat []time.Duration
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, c := range t.committed {
		if c.Before(from) || c.After(to) {
			continue
		}
		if v, ok := t.calls.Load(id.String()); ok {
			lat = append(lat, max(0, v.(time.Time).Sub(c)))
		}
	}
	slices.Sort(lat)
	return lat
}
