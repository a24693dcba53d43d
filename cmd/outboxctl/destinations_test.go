package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
	"github.com/outboxd/outboxd/sideeffects/sideeffectstest"
)

// TestAHangingPartnerIsNamed: a partner that stops answering opens its
// circuit breaker in the running outboxd; within seconds dispatchers names
// the destination and its breaker, and stuck explains its effects by it
// instead of blaming a dead worker.
func TestAHangingPartnerIsNamed(t *testing.T) {
	t.Parallel()
	r := newRunbook(t)
	r.recv.Respond("/hang", func(w http.ResponseWriter, req *http.Request) int {
		<-req.Context().Done()
		return 0
	})
	for range 20 {
		r.recv.Respond("/hang", func(w http.ResponseWriter, req *http.Request) int {
			<-req.Context().Done()
			return 0
		})
	}
	wh, err := webhook.New(webhook.Config{Secret: runbookSecret, AllowedNetworks: loopback, Timeout: 300 * time.Millisecond, MaxPerHost: 4})
	require.NoError(t, err)
	sideeffectstest.Start(t, r.db.Pool, sideeffects.Config{Schema: r.db.Schema, Providers: []providers.Provider{wh}, Retry: outboxtype.RetryPolicy{MaxAttempts: 20}, Settings: map[string]any{"rescue_after": "2m0s"}})
	ctx := context.Background()
	var ids []uuid.UUID
	for i := range 10 {
		require.NoError(t, pgx.BeginFunc(ctx, r.db.Pool, func(tx pgx.Tx) error {
			res, err := r.ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"},
				outbox.Effect{Kind: "webhook.partner_acme", Provider: "webhook",
					Payload: json.RawMessage(`{"url": "` + r.recv.URL + `/hang", "body": {"n": ` + string(rune('0'+i)) + `}}`)})
			if err == nil {
				ids = append(ids, res.Effects[0].ID)
			}
			return err
		}))
	}
	var out string
	require.Eventually(t, func() bool {
		out, err = r.run(t, "", "dispatchers")
		return err == nil && strings.Contains(out, "not answering: its circuit breaker is open")
	}, 30*time.Second, 100*time.Millisecond, "dispatchers names the open breaker")
	host := strings.TrimPrefix(r.recv.URL, "http://")
	require.Contains(t, out, "destination "+host)

	out, err = r.run(t, "", "stuck", "--older-than", "0s", "--json")
	require.NoError(t, err)
	var rows []struct {
		ID        uuid.UUID `json:"id"`
		Diagnosis string    `json:"diagnosis"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	var named int
	for _, row := range rows {
		if strings.Contains(row.Diagnosis, "destination "+host+": not answering: its circuit breaker is open") {
			named++
			require.NotContains(t, row.Diagnosis, "died")
		}
	}
	require.Positive(t, named, "stuck explains the partner's effects by its breaker: %s", out)
}
