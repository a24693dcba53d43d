package webui_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/cmd/internal/webui"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/sideeffects"
)

// TestOneWebViewForEveryShard: the overview has a row per shard, each
// shard's pages and actions live under its own path and say which shard
// they are, and a shard that cannot be read is shown as such.
func TestOneWebViewForEveryShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	enqueue := func(db *testdb.DB, n int) []uuid.UUID {
		ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
		require.NoError(t, err)
		var ids []uuid.UUID
		for range n {
			require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"},
					outbox.Effect{Kind: "webhook.order_paid", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://hooks.example.com/o", "body": {}}`)})
				if err == nil {
					ids = append(ids, res.Effects[0].ID)
				}
				return err
			}))
		}
		return ids
	}
	eu, us := testdb.New(t), testdb.New(t)
	enqueue(eu, 2)
	usIDs := enqueue(us, 2)
	_, err := us.Pool.Exec(ctx, `UPDATE `+us.Schema+`.side_effects SET state = 'failed', last_error = 'permanent: HTTP 410' WHERE id = $1`, usIDs[0])
	require.NoError(t, err)

	shard := func(name string, pool *pgxpool.Pool, schema string) webui.FleetShard {
		op, err := sideeffects.NewOperator(pool, sideeffects.OperatorConfig{Schema: schema})
		require.NoError(t, err)
		return webui.FleetShard{Name: name, Config: webui.Config{Schema: schema, Operator: op, AdminToken: adminToken, Logger: quiet}}
	}
	down, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(down.Close)
	h, err := webui.NewFleet("", []webui.FleetShard{shard("eu-1", eu.Pool, eu.Schema), shard("us-1", us.Pool, us.Schema), shard("ap-1", down, "outboxd")})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	br := b{t, browser(t)}
	br.do(chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#shards")))
	require.Equal(t, 3, br.count("#shards tr.shard"))
	require.Equal(t, "2", br.text(`tr[data-shard="eu-1"] td.pending`))
	require.Equal(t, "1", br.text(`tr[data-shard="us-1"] td.failed`))
	require.Contains(t, br.text(`tr[data-shard="ap-1"]`), "could not be read")
	br.shot("fleet-overview")

	// A shard's own overview, from its row.
	br.do(chromedp.Click(chromedp.CSS(`tr[data-shard="us-1"] td a`)), chromedp.WaitVisible(chromedp.CSS("#shard")))
	require.Equal(t, "us-1", br.text("#shard"))
	loc, err := chromedp.Run(br.ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, srv.URL+"/ui/shards/us-1/", loc)
	br.do(chromedp.Navigate(srv.URL+"/ui/shards/us-1/effects/"+usIDs[0].String()), chromedp.WaitVisible(chromedp.CSS("#shard")))
	require.Equal(t, "us-1", br.text("#shard"))
	br.do(chromedp.Click(chromedp.CSS("#fleet")), chromedp.WaitVisible(chromedp.CSS("#shards")))

	// An action addresses the shard whose path it is posted to.
	cancel := func(shard string, id uuid.UUID) int {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/ui/shards/"+shard+"/effects/"+id.String()+"/actions/cancel",
			strings.NewReader(url.Values{"reason": {"refunded by hand"}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusNotFound, cancel("eu-1", usIDs[0]), "not an effect of eu-1")
	require.Equal(t, http.StatusOK, cancel("us-1", usIDs[0]))
	op, err := sideeffects.NewOperator(us.Pool, sideeffects.OperatorConfig{Schema: us.Schema})
	require.NoError(t, err)
	e, err := op.Get(ctx, usIDs[0])
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateCancelled, e.State)
}
