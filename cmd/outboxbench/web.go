package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/cmd/internal/webui"
	"github.com/outboxd/outboxd/sideeffects"
)

// webResult is the time one web view page takes to answer, in-process,
// with the admin phase's effects in the table.
type webResult struct {
	Page   string        `json:"page"`
	Rows   int           `json:"rows"`
	Median time.Duration `json:"median_ns"`
	Max    time.Duration `json:"max_ns"`
}

// webPages times the web view's pages against the seeded table: the
// overview, searches by key, by aggregate, by state and kind, and an
// effect's page. Target: each under 100ms.
func (b *bench) webPages(ctx context.Context, rows int) ([]webResult, error) {
	op, err := sideeffects.NewOperator(b.pool, sideeffects.OperatorConfig{Schema: b.schema})
	if err != nil {
		return nil, err
	}
	h, err := webui.New(webui.Config{Schema: b.schema, Operator: op, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	var id uuid.UUID
	var key string
	if err := b.pool.QueryRow(ctx, `UPDATE `+b.schema+`.outbox_events SET aggregate_type = 'order', aggregate_id = 'ord_bench'
		WHERE id = (SELECT source_id FROM `+b.schema+`.side_effects WHERE state = 'failed' LIMIT 1)
		RETURNING (SELECT id FROM `+b.schema+`.side_effects WHERE source_id = outbox_events.id LIMIT 1),
			(SELECT `+b.schema+`.outboxd_idempotency_key(source_id, kind) FROM `+b.schema+`.side_effects WHERE source_id = outbox_events.id LIMIT 1)`).Scan(&id, &key); err != nil {
		return nil, fmt.Errorf("pick an effect: %w", err)
	}
	pages := []struct{ name, path string }{
		{"overview", "/ui/"},
		{"search by key", "/ui/effects?q=" + key},
		{"search by aggregate", "/ui/effects?aggregate_type=order&aggregate_id=ord_bench"},
		{"search failed webhook.order_paid", "/ui/effects?state=failed&kind=webhook.order_paid"},
		{"search all, first page", "/ui/effects?state="},
		{"effect page", "/ui/effects/" + id.String()},
	}
	var out []webResult
	for _, p := range pages {
		var ds []time.Duration
		for range 9 {
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, p.path, nil)
			rec := httptest.NewRecorder()
			t0 := time.Now()
			h.ServeHTTP(rec, req)
			ds = append(ds, time.Since(t0))
			if rec.Code != http.StatusOK {
				return nil, fmt.Errorf("%s: HTTP %d: %s", p.path, rec.Code, rec.Body)
			}
		}
		slices.Sort(ds)
		out = append(out, webResult{Page: p.name, Rows: rows, Median: ds[len(ds)/2], Max: ds[len(ds)-1]})
	}
	return out, nil
}
