package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/outbox/idempotency"
)

// A request of a three-phase endpoint hangs holding its key: the operator
// finds it, sees its state and lock, and releases it with a reason; the
// client's retry then runs.
func TestKeysFindAndReleaseAStuckClaim(t *testing.T) {
	t.Parallel()
	k := newStuckKey(t, "POST /refunds", "refund-ord_7", `{"order": "ord_7"}`)
	b, id, post := k.b, k.id, k.post

	resp := post()
	resp.Body.Close()
	require.Equal(t, http.StatusConflict, resp.StatusCode, "still held")

	out, err := b.run(t, "", "keys", "show", id)
	require.NoError(t, err, out)
	require.Contains(t, out, "POST /refunds")
	require.Contains(t, out, "its request may still be running")

	out, err = b.run(t, "", "keys", "release", id)
	require.Equal(t, 1, cli.ExitCode(err), out)
	require.ErrorContains(t, err, "a reason is required")
	out, err = b.run(t, "", "keys", "release", id, "--reason", "refund API call hung; checked: no refund made")
	require.Equal(t, 1, cli.ExitCode(err), out)
	require.ErrorContains(t, err, "pass --force")
	out, err = b.run(t, "", "keys", "release", id, "--force", "--reason", "refund API call hung; checked: no refund made")
	require.NoError(t, err, out)
	require.Contains(t, out, "in_progress -> failed")

	out, err = b.run(t, "", "keys", "show", id)
	require.NoError(t, err, out)
	require.Contains(t, out, "release by oncall@example.com (in_progress -> failed): refund API call hung")

	resp = post()
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, "the retry runs")
	out, err = b.run(t, "", "keys", "list", "--key", "refund-ord_7", "--json")
	require.NoError(t, err, out)
	require.Contains(t, out, `"state": "completed"`)

	_, err = b.run(t, "", "keys", "list", "--state", "done")
	require.ErrorContains(t, err, "use one of in_progress, completed, failed")
	_, err = b.run(t, "", "keys", "show", "refund-ord_7")
	require.ErrorContains(t, err, "pass a key's id")
}

// A payout request made the payout, then its response was never stored
// (the handler's call hangs past every deadline): the operator checks the
// payout was made and records the response; the client's retry receives it
// and the handler does not run again. The route reads as the mux wrote it.
func TestKeysCompleteRecordsTheResponseRetriesGet(t *testing.T) {
	t.Parallel()
	k := newStuckKey(t, "POST /payouts", "payout-7", `{"amount": 500}`)
	b, id, list, post, runs := k.b, k.id, k.list, k.post, k.runs
	require.Contains(t, list, "POST /payouts")
	require.NotContains(t, list, "POST POST", "the method once")

	_, err := b.run(t, "", "keys", "complete", id, "--status", "201", "--body", `{"id": "po_42"}`)
	require.ErrorContains(t, err, "a reason is required")
	_, err = b.run(t, "", "keys", "complete", id, "--status", "502", "--body", `{}`, "--reason", "r", "--force")
	require.ErrorContains(t, err, "a 5xx is never stored")
	out, err := b.run(t, "", "keys", "complete", id, "--status", "201", "--body", `{"id": "po_42"}`, "--reason", "po_42 seen at the bank", "--dry-run")
	require.NoError(t, err, out)
	require.Contains(t, out, "dry run: key "+id+" (POST /payouts) is in_progress; would record HTTP 201")
	_, err = b.run(t, "", "keys", "complete", id, "--status", "201", "--body", `{"id": "po_42"}`, "--reason", "po_42 seen at the bank")
	require.ErrorContains(t, err, "pass --force", "its lock has not passed")
	out, err = b.run(t, "", "keys", "complete", id, "--status", "201", "--body", `{"id": "po_42"}`, "--reason", "po_42 seen at the bank", "--force")
	require.NoError(t, err, out)
	require.Contains(t, out, "completed key "+id+" (POST /payouts) with HTTP 201")

	resp := post()
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.JSONEq(t, `{"id": "po_42"}`, string(body))
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, "true", resp.Header.Get(idempotency.ReplayedHeader))
	require.EqualValues(t, 1, runs.Load(), "the handler did not run again")

	out, err = b.run(t, "", "keys", "show", id)
	require.NoError(t, err, out)
	require.Contains(t, out, "complete by oncall@example.com (in_progress -> completed): po_42 seen at the bank")
	_, err = b.run(t, "", "keys", "complete", id, "--status", "201", "--reason", "again")
	require.ErrorContains(t, err, "completed already")
}

// TestKeysCompleteRefusesAKeyPastItsRetention: completing a key whose
// retention has passed would not stop the next retry from running the
// handler (the key is removed at the next cleanup): refused unless renewed,
// and the output says how long the response is kept. Headers every replay
// would set (cookies, hop-by-hop, security policy) are refused.
func TestKeysCompleteRefusesAKeyPastItsRetention(t *testing.T) {
	t.Parallel()
	k := newStuckKey(t, "POST /payouts", "payout-9", `{"amount": 500}`)
	b, id := k.b, k.id
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE `+b.db.Schema+`.idempotency_keys SET expires_at = now() - interval '1 hour' WHERE id = $1`, id)
	require.NoError(t, err)
	args := []string{"keys", "complete", id, "--status", "201", "--body", `{"id": "po_9"}`, "--reason", "po_9 seen at the bank", "--force"}
	_, err = b.run(t, "", args...)
	require.ErrorContains(t, err, "past its retention")
	require.ErrorContains(t, err, "--renew-for")
	_, err = b.run(t, "", append(args, "--renew-for", "24h", "--header", "Set-Cookie: session=x")...)
	require.ErrorContains(t, err, "header Set-Cookie: a stored response may not set it")
	out, err := b.run(t, "", append(args, "--renew-for", "24h")...)
	require.NoError(t, err, out)
	require.Regexp(t, `kept until \S+, after which a retry runs the handler again`, out)
	var left time.Duration
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT extract(epoch FROM expires_at - now())::bigint * interval '1 second' FROM `+b.db.Schema+`.idempotency_keys WHERE id = $1`, id).Scan(&left))
	require.Greater(t, left, 23*time.Hour, "renewed")
}

// stuckKey is a three-phase endpoint whose first request hangs holding its
// key (its synchronous call never returns) until the test ends, found by
// `outboxctl keys list`.
type stuckKey struct {
	b        *testBundle
	runs     *atomic.Int32
	id, list string
	post     func() *http.Response // a client's retry with the same key
}

func newStuckKey(t *testing.T, route, key, body string) *stuckKey {
	t.Helper()
	k := &stuckKey{b: newTestBundle(t), runs: &atomic.Int32{}}
	db := k.b.db
	mw, err := idempotency.New(db.Pool, idempotency.Config{Schema: db.Schema, Unscoped: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	hang := make(chan struct{})
	mux := http.NewServeMux()
	mux.Handle(route, mw.ThreePhase(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k.runs.Add(1) == 1 {
			<-hang
		}
		w.WriteHeader(http.StatusCreated)
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hang) }) // runs first: srv.Close waits for the hanging request
	_, path, _ := strings.Cut(route, " ")
	send := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		return http.DefaultClient.Do(req)
	}
	k.post = func() *http.Response {
		resp, err := send()
		require.NoError(t, err)
		return resp
	}
	go func() {
		if resp, err := send(); err == nil {
			resp.Body.Close()
		}
	}()
	require.Eventually(t, func() bool {
		out, err := k.b.run(t, "", "keys", "list", "--state", "in_progress")
		if err != nil || !strings.Contains(out, key) {
			return false
		}
		k.id, k.list = strings.Fields(strings.Split(out, "\n")[1])[0], out
		return true
	}, 10*time.Second, 10*time.Millisecond)
	return k
}
