package webui_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/cmd/internal/webui"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/sideeffects"
)

// An effect its event still carries (outbox.EffectsByDispatcher) has no
// row until a dispatcher takes the event: looked up by id or by key, the
// web view says so, and what to check, instead of "no effect".
func TestAnEffectNoDispatcherTookYetIsExplained(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	op, err := sideeffects.NewOperator(db.Pool, sideeffects.OperatorConfig{Schema: db.Schema})
	require.NoError(t, err)
	h, err := webui.New(webui.Config{Schema: db.Schema, Operator: op, AdminToken: adminToken,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ob, err := outbox.New(outbox.Config{Jobs: outbox.EffectsByDispatcher, Schema: db.Schema})
	require.NoError(t, err)
	event := uuid.New()
	var res *outbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		res, err = ob.Enqueue(ctx, tx, outbox.Event{ID: event, Type: "order.paid"},
			outbox.Effect{Kind: "webhook.order_paid", Provider: "webhook", Payload: json.RawMessage(`{"url": "https://hooks.example.com/in", "body": {}}`)})
		return err
	}))
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + "/ui/" + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	status, body := get("effects/" + res.Effects[0].ID.String())
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, body, "is carried by event "+event.String())
	require.Contains(t, body, "no dispatcher has taken the event yet")
	_, body = get("effects?q=" + url.QueryEscape(res.Effects[0].Key))
	require.Contains(t, body, "is carried by event "+event.String())

	// The overview counts it as pending at once, and once it has waited a
	// minute its incidents name what holds it.
	_, body = get("")
	require.Regexp(t, `state-pending">pending</span></td><td>webhook.order_paid</td><td class="num"><a[^>]*>1</a>`, body)
	_, err = db.Pool.Exec(ctx, `UPDATE `+db.Schema+`.outbox_events SET created_at = now() - interval '2 minutes'`)
	require.NoError(t, err)
	status, body = get("")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "carried by its event, which no dispatcher has taken")

	// Anything else is still not found.
	status, body = get("effects/" + uuid.NewString())
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, body, "never, or purged after retention")
}
