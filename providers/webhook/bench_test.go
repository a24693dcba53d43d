package webhook_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
)

// BenchmarkSendToOneReceiver is the webhook provider alone, without
// Postgres or a dispatcher: signed requests to one local receiver through
// the per-host gate, from 64 callers, as a burn-down's workers make them.
// It is the ceiling of the dispatch phase's webhook rows on the same
// machine (docs/performance.md):
//
//	go test ./providers/webhook -run '^$' -bench SendToOneReceiver
func BenchmarkSendToOneReceiver(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	payload := []byte(`{"url": "` + srv.URL + `/hook", "body": {"type": "order.paid", "order": "ord_42"}}`)
	for _, perHost := range []int{webhook.DefaultMaxPerHost, 64} {
		b.Run("max_per_host="+strconv.Itoa(perHost), func(b *testing.B) {
			p, err := webhook.New(webhook.Config{Secret: secret, AllowedNetworks: loopback, MaxPerHost: perHost})
			if err != nil {
				b.Fatal(err)
			}
			var seq atomic.Int64
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					for {
						release, _, ok := p.Admit(context.Background(), payload)
						if !ok {
							continue
						}
						n := seq.Add(1)
						_, err := p.Send(context.Background(), providers.Request{EffectID: fmt.Sprint(n), Kind: "bench.effect",
							Key: fmt.Sprintf("key-%d", n), Payload: payload, Attempt: 1})
						release(err)
						if err != nil {
							b.Error(err)
						}
						break
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "sends/s")
		})
	}
}
