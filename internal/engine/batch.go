package engine

import (
	"context"
	"sync"
	"time"
)

// bookkeepingTimeout bounds the SQL that records an attempt's outcome. It
// runs on a context detached from the job's, so a shutdown that cancels a
// finished provider call still records the confirmation.
const bookkeepingTimeout = 10 * time.Second

// maxBatch bounds how many requests share one statement.
const maxBatch = 256

// batchRunners is how many batches of one kind may run at once: while one
// waits for its commit to be flushed, the next forms and executes.
var batchRunners = 2

// batcher runs one statement for every request waiting when it is free, so
// that under load claims (or confirmations) of many effects share one round
// trip and one commit, while a lone request pays a single round trip: there
// is no timer, nothing waits for a batch to fill.
type batcher[Req, Res any] struct {
	ch  chan batchItem[Req, Res]
	run func(ctx context.Context, reqs []Req) ([]Res, error)

	startOnce sync.Once
	stop      context.CancelFunc
	wg        sync.WaitGroup
	done      chan struct{}
}

type batchItem[Req, Res any] struct {
	req   Req
	reply chan batchReply[Res]
}

type batchReply[Res any] struct {
	res Res
	err error
}

func newBatcher[Req, Res any](run func(ctx context.Context, reqs []Req) ([]Res, error)) *batcher[Req, Res] {
	return &batcher[Req, Res]{ch: make(chan batchItem[Req, Res]), run: run, done: make(chan struct{})}
}

// start runs the batching loop until stopBatcher.
func (b *batcher[Req, Res]) start() {
	b.startOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		b.stop = cancel
		b.wg.Add(batchRunners)
		for range batchRunners {
			go b.loop(ctx)
		}
		go func() { b.wg.Wait(); close(b.done) }()
	})
}

func (b *batcher[Req, Res]) stopBatcher() {
	if b.stop != nil {
		b.stop()
		<-b.done
	}
}

// do submits req and waits for its result. Once submitted, a request is
// always run to completion, whatever happens to ctx: a claim committed for a
// worker that stopped waiting would leave an effect fired that was never
// sent.
func (b *batcher[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	reply := make(chan batchReply[Res], 1)
	select {
	case b.ch <- batchItem[Req, Res]{req: req, reply: reply}:
	case <-ctx.Done():
		var zero Res
		return zero, ctx.Err()
	}
	r := <-reply
	return r.res, r.err
}

func (b *batcher[Req, Res]) loop(ctx context.Context) {
	defer b.wg.Done()
	for {
		var batch []batchItem[Req, Res]
		select {
		case it := <-b.ch:
			batch = append(batch, it)
		case <-ctx.Done():
			return
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case it := <-b.ch:
				batch = append(batch, it)
			default:
				break drain
			}
		}
		reqs := make([]Req, len(batch))
		for i, it := range batch {
			reqs[i] = it.req
		}
		rctx, cancel := context.WithTimeout(context.Background(), bookkeepingTimeout)
		res, err := b.run(rctx, reqs)
		cancel()
		for i, it := range batch {
			var r batchReply[Res]
			if err != nil {
				r.err = err
			} else {
				r.res = res[i]
			}
			it.reply <- r
		}
	}
}
