package idempotency_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outbox/idempotency"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/pgschema"
)

// shop is an application with one endpoint, POST /orders, that writes an
// order and enqueues its webhook, behind the middleware, on a real HTTP
// server and real Postgres.
type shop struct {
	db   *testdb.DB
	srv  *httptest.Server
	mw   *idempotency.Middleware
	ob   *outbox.Outbox
	runs atomic.Int32
	obs  *observer
	// after, if set, runs after the domain writes; returning true means it
	// answered the request itself.
	after func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool
}

type observer struct {
	mu sync.Mutex
	n  map[idempotency.Outcome]int
}

func (o *observer) Observe(x outboxtype.Observation) {
	r, ok := x.(outboxtype.KeyRequest)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n[idempotency.Outcome(r.Outcome)]++
}

func (o *observer) count(x idempotency.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[x]
}

const threePhase = "three-phase"

func newShop(t *testing.T, cfg idempotency.Config, mode string) *shop {
	t.Helper()
	return newShopOn(t, cfg, mode, nil)
}

// newShopOn is newShop with the middleware on a pool of its own (nil: the
// shop's).
func newShopOn(t *testing.T, cfg idempotency.Config, mode string, pool func(*testdb.DB) *pgxpool.Pool) *shop {
	t.Helper()
	s := &shop{db: testdb.New(t), obs: &observer{n: map[idempotency.Outcome]int{}}}
	mwPool := s.db.Pool
	if pool != nil {
		mwPool = pool(s.db)
	}
	_, err := s.db.Pool.Exec(context.Background(), "CREATE TABLE "+s.db.Schema+".orders (id text PRIMARY KEY, amount int NOT NULL)")
	require.NoError(t, err)
	cfg.Schema = s.db.Schema
	if cfg.Scope == nil {
		cfg.Unscoped = true // one client in these tests
	}
	cfg.Observer = s.obs
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s.mw, err = idempotency.New(mwPool, cfg)
	require.NoError(t, err)
	s.ob, err = outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: s.db.Schema})
	require.NoError(t, err)
	mux := http.NewServeMux()
	if mode == threePhase {
		mux.Handle("POST /orders", s.mw.ThreePhase(http.HandlerFunc(s.orders)))
	} else {
		mux.Handle("POST /orders", s.mw.Transactional(http.HandlerFunc(s.orders)))
		mux.Handle("PUT /orders/{id}", s.mw.Transactional(http.HandlerFunc(s.orders)))
	}
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *shop) orders(w http.ResponseWriter, r *http.Request) {
	n := s.runs.Add(1)
	ctx := r.Context()
	var in struct {
		Order  string `json:"order"`
		Amount int    `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Order == "" {
		http.Error(w, `{"error": "order and amount required"}`, http.StatusUnprocessableEntity)
		return
	}
	tx, ok := idempotency.Tx(ctx)
	if !ok { // three-phase: the handler's own transaction
		var err error
		if tx, err = s.db.Pool.Begin(ctx); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer tx.Commit(ctx) //nolint:errcheck
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+s.db.Schema+".orders VALUES ($1, $2)", in.Order, in.Amount); err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	res, err := s.ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), AggregateType: "order", AggregateID: in.Order, Type: "order.created"},
		outbox.Effect{Kind: "webhook.order_created", Provider: "webhook",
			Payload: json.RawMessage(`{"url": "https://hooks.example.com/orders", "body": {"order": "` + in.Order + `"}}`)})
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	if s.after != nil && s.after(w, r, tx) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/"+in.Order)
	w.Header().Set("X-Not-Stored", "run "+fmt.Sprint(n))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"order": %q, "event": %q, "run": %d}`, in.Order, res.EventID, n)
}

// holdFirstRun makes the first run of the handler wait, after its domain
// writes and before its response, until release is called; reached is
// closed when it waits.
func (s *shop) holdFirstRun() (reached <-chan struct{}, release func()) {
	r, rel := make(chan struct{}), make(chan struct{})
	s.after = func(http.ResponseWriter, *http.Request, pgx.Tx) bool {
		if s.runs.Load() == 1 {
			close(r)
			<-rel
		}
		return false
	}
	return r, func() { close(rel) }
}

type answer struct {
	status int
	header http.Header
	body   []byte
	code   string // the middleware's error code, if any
}

func (s *shop) post(t *testing.T, key, body string, headers ...string) answer {
	t.Helper()
	return s.do(t, http.MethodPost, "/orders", key, body, headers...)
}

func (s *shop) do(t *testing.T, method, path, key, body string, headers ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, s.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	a := answer{status: resp.StatusCode, header: resp.Header, body: b}
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil {
		a.code = e.Error.Code
	}
	return a
}

func (s *shop) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, s.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+s.db.Schema+"."+table).Scan(&n))
	return n
}

// requireRows checks orders, events, effects, dispatch jobs and stored keys.
func (s *shop) requireRows(t *testing.T, n int, keys int) {
	t.Helper()
	for _, table := range []string{"orders", "outbox_events", "side_effects", "river_job"} {
		require.Equal(t, n, s.count(t, table), table)
	}
	require.Equal(t, keys, s.count(t, "idempotency_keys"), "stored keys")
}

const order = `{"order": "ord_1", "amount": 4200}`

func TestTenParallelRequestsWithOneKeyRunOnce(t *testing.T) {
	t.Parallel()
	s := newShop(t, idempotency.Config{}, "")
	answered := make(chan answer, 10)
	release := make(chan struct{})
	s.after = func(http.ResponseWriter, *http.Request, pgx.Tx) bool {
		<-release // hold the key until every other request has its answer
		return false
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { answered <- s.post(t, "key-parallel", order) })
	}
	var answers []answer
	for len(answers) < 9 {
		answers = append(answers, <-answered)
	}
	close(release)
	wg.Wait()
	answers = append(answers, <-answered)

	byStatus := map[int]int{}
	for _, a := range answers {
		byStatus[a.status]++
		if a.status == http.StatusConflict {
			require.Equal(t, "idempotency_key_in_use", a.code)
			require.Equal(t, "1", a.header.Get("Retry-After"))
		}
	}
	require.Equal(t, map[int]int{http.StatusCreated: 1, http.StatusConflict: 9}, byStatus)
	require.EqualValues(t, 1, s.runs.Load(), "one handler body ran")
	s.requireRows(t, 1, 1)
	require.Equal(t, 9, s.obs.count(idempotency.InFlight))

	// Once it committed, the same request replays.
	again := s.post(t, "key-parallel", order)
	require.Equal(t, http.StatusCreated, again.status)
	require.Equal(t, "true", again.header.Get(idempotency.ReplayedHeader))
	require.EqualValues(t, 1, s.runs.Load())
}

func TestRetryAfterCommitReplaysByteForByte(t *testing.T) {
	t.Parallel()
	s := newShop(t, idempotency.Config{}, "")
	first := s.post(t, "key-replay", order)
	require.Equal(t, http.StatusCreated, first.status, string(first.body))
	require.Empty(t, first.header.Get(idempotency.ReplayedHeader))

	second := s.post(t, "key-replay", order)
	require.Equal(t, first.status, second.status)
	require.Equal(t, first.body, second.body, "byte for byte")
	require.Equal(t, first.header.Get("Content-Type"), second.header.Get("Content-Type"))
	require.Equal(t, "/orders/ord_1", second.header.Get("Location"))
	require.Equal(t, "true", second.header.Get(idempotency.ReplayedHeader))
	require.Empty(t, second.header.Get("X-Not-Stored"), "only the selected headers are stored")
	require.EqualValues(t, 1, s.runs.Load())
	s.requireRows(t, 1, 1)
	require.Equal(t, 1, s.obs.count(idempotency.Executed))
	require.Equal(t, 1, s.obs.count(idempotency.Replayed))
}

func TestSameKeyDifferentRequestIsRefused(t *testing.T) {
	t.Parallel()
	s := newShop(t, idempotency.Config{FingerprintHeaders: []string{"X-Currency"}}, "")
	require.Equal(t, http.StatusCreated, s.post(t, "key-reused", order, "X-Currency", "eur").status)

	a := s.post(t, "key-reused", `{"order": "ord_2", "amount": 1}`, "X-Currency", "eur")
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "422, as the IETF draft asks (409 is for a key in flight)")
	require.Equal(t, "idempotency_key_reused", a.code)
	require.Contains(t, string(a.body), `"differs":["body"]`)
	require.NotContains(t, string(a.body), "ord_1", "never the old response")

	a = s.post(t, "key-reused", order, "X-Currency", "usd")
	require.Equal(t, http.StatusUnprocessableEntity, a.status)
	require.Contains(t, string(a.body), `"differs":["header X-Currency"]`)
	require.EqualValues(t, 1, s.runs.Load())
	s.requireRows(t, 1, 1)
	require.Equal(t, 2, s.obs.count(idempotency.FingerprintMismatch))
}

// TestTheFingerprintIsTheRequestAsSent: the path with its parameters, the
// query and each header's values, framed so that no two requests hash
// alike: PUT /orders/2 with the key of PUT /orders/1 is refused, not given
// order 1's response; likewise another query, or "a b" for "a", "b".
func TestTheFingerprintIsTheRequestAsSent(t *testing.T) {
	t.Parallel()
	s := newShop(t, idempotency.Config{FingerprintHeaders: []string{"X-Account"}}, "")
	require.Equal(t, http.StatusCreated, s.do(t, http.MethodPut, "/orders/ord_1", "key-path", order).status)
	a := s.do(t, http.MethodPut, "/orders/ord_2", "key-path", order)
	require.Equal(t, http.StatusUnprocessableEntity, a.status)
	require.Contains(t, string(a.body), `"differs":["path"]`)

	order3 := `{"order": "ord_3", "amount": 1}`
	require.Equal(t, http.StatusCreated, s.do(t, http.MethodPut, "/orders/ord_3?amount=1", "key-query", order3).status)
	a = s.do(t, http.MethodPut, "/orders/ord_3?amount=999999", "key-query", order3)
	require.Equal(t, http.StatusUnprocessableEntity, a.status)
	require.Contains(t, string(a.body), `"differs":["query"]`)

	send := func(key string, values ...string) int {
		req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/orders", strings.NewReader(`{"order": "ord_4", "amount": 1}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		for _, v := range values {
			req.Header.Add("X-Account", v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusCreated, send("key-framing", "a b"))
	require.Equal(t, http.StatusUnprocessableEntity, send("key-framing", "a", "b"), "two values are not one with a space")
	require.Equal(t, http.StatusCreated, send("key-framing", "a b"), "the same request is replayed")
	require.EqualValues(t, 3, s.runs.Load(), "no handler ran for another request's key")
	s.requireRows(t, 3, 3)
}

// TestTwoKeyHeadersAreRefused: a request with two Idempotency-Key headers
// is malformed (400), in the same JSON shape as other invalid keys.
func TestTwoKeyHeadersAreRefused(t *testing.T) {
	t.Parallel()
	s := newShop(t, idempotency.Config{}, "")
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/orders", strings.NewReader(order))
	require.NoError(t, err)
	req.Header.Add("Idempotency-Key", "key-a")
	req.Header.Add("Idempotency-Key", "key-b")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var body struct{ Error struct{ Code string } }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, "idempotency_key_repeated", body.Error.Code)
	require.Zero(t, s.runs.Load())
}

// TestARetentionShorterThanTheLockIsRefused: a key that could expire while
// a three-phase claim holds it would let a second request run the handler.
func TestARetentionShorterThanTheLockIsRefused(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, err := idempotency.New(db.Pool, idempotency.Config{Schema: db.Schema, Unscoped: true, Retention: 30 * time.Second})
	require.ErrorContains(t, err, "must exceed LockTimeout")
	_, err = idempotency.New(db.Pool, idempotency.Config{Schema: db.Schema, Unscoped: true, LockTimeout: 10 * time.Minute,
		RouteRetention: map[string]time.Duration{"POST /payouts": 5 * time.Minute}})
	require.ErrorContains(t, err, `RouteRetention["POST /payouts"]`)
	_, err = idempotency.New(db.Pool, idempotency.Config{Schema: db.Schema, Unscoped: true, Retention: idempotency.Forever})
	require.NoError(t, err)
}

func TestKeysAreScopedByCallerMethodAndRoute(t *testing.T) {
	t.Parallel()
	s := newShop(t, idempotency.Config{Scope: func(r *http.Request) string { return r.Header.Get("X-Tenant") }}, "")
	require.Equal(t, http.StatusCreated, s.post(t, "key-shared", order, "X-Tenant", "acme").status)
	a := s.post(t, "key-shared", `{"order": "ord_2", "amount": 1}`, "X-Tenant", "globex")
	require.Equal(t, http.StatusCreated, a.status, "another tenant's key never collides")
	require.Empty(t, a.header.Get(idempotency.ReplayedHeader))
	a = s.do(t, http.MethodPut, "/orders/ord_3", "key-shared", `{"order": "ord_3", "amount": 1}`, "X-Tenant", "acme")
	require.Equal(t, http.StatusCreated, a.status, "another route")
	s.requireRows(t, 3, 3)
}

func TestFailedRequestsStoreNothing(t *testing.T) {
	t.Parallel()
	for _, failure := range []string{"500", "panic", "503 written by the handler"} {
		t.Run(failure, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, idempotency.Config{}, "")
			var fail atomic.Bool
			fail.Store(true)
			s.after = func(w http.ResponseWriter, _ *http.Request, _ pgx.Tx) bool {
				if !fail.Load() {
					return false
				}
				switch failure {
				case "panic":
					panic("handler bug")
				case "500":
					http.Error(w, "boom", http.StatusInternalServerError)
				default:
					w.WriteHeader(http.StatusServiceUnavailable)
				}
				return true
			}
			req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/orders", strings.NewReader(order))
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", "key-fails")
			resp, err := http.DefaultClient.Do(req)
			if failure == "panic" {
				require.Error(t, err, "the server drops the connection of a panicking handler")
			} else {
				require.NoError(t, err)
				require.GreaterOrEqual(t, resp.StatusCode, 500)
				resp.Body.Close()
			}
			s.requireRows(t, 0, 0)
			require.Equal(t, 1, s.obs.count(idempotency.RolledBack))

			fail.Store(false)
			require.Equal(t, http.StatusCreated, s.post(t, "key-fails", order).status, "the retry runs")
			require.Equal(t, http.StatusCreated, s.post(t, "key-fails", order).status, "and is replayed after")
			require.EqualValues(t, 2, s.runs.Load())
			s.requireRows(t, 1, 1)
		})
	}
}

// TestValidationFailuresAreNotStoredByDefault: a request the handler
// refuses as malformed (400, 422) stores nothing, so the client corrects it
// and retries with the same key, as Stripe lets it; StoreAll keeps the
// refusal and replays it.
func TestValidationFailuresAreNotStoredByDefault(t *testing.T) {
	t.Parallel()
	s := newShop(t, idempotency.Config{}, "")
	require.Equal(t, http.StatusUnprocessableEntity, s.post(t, "key-422", `{"amount": 1}`).status)
	require.Equal(t, http.StatusUnprocessableEntity, s.post(t, "key-422", `{"amount": 1}`).status)
	require.EqualValues(t, 2, s.runs.Load(), "not stored: each retry runs")
	s.requireRows(t, 0, 0)
	require.Equal(t, http.StatusCreated, s.post(t, "key-422", order).status, "the corrected request runs, with the same key")
	require.True(t, idempotency.StoreUnlessInvalid(http.StatusPaymentRequired), "a decline is stored")
	require.False(t, idempotency.StoreUnlessInvalid(http.StatusBadRequest))

	s = newShop(t, idempotency.Config{StoreStatus: idempotency.StoreAll}, "")
	first := s.post(t, "key-422", `{"amount": 1}`)
	require.Equal(t, http.StatusUnprocessableEntity, first.status)
	again := s.post(t, "key-422", `{"amount": 1}`)
	require.Equal(t, first.body, again.body)
	require.Equal(t, "true", again.header.Get(idempotency.ReplayedHeader))
	require.EqualValues(t, 1, s.runs.Load())
}

// A crash between the handler and the commit: the connection is killed, or
// the client goes away and the request's context is cancelled. Nothing is
// stored or enqueued, and the retry runs once.
func TestCrashBeforeCommitLeavesNothing(t *testing.T) {
	t.Parallel()
	t.Run("connection killed", func(t *testing.T) {
		t.Parallel()
		s := newShop(t, idempotency.Config{}, "")
		var crash atomic.Bool
		crash.Store(true)
		s.after = func(_ http.ResponseWriter, r *http.Request, tx pgx.Tx) bool {
			if crash.Load() {
				var pid int
				require.NoError(t, tx.QueryRow(r.Context(), "SELECT pg_backend_pid()").Scan(&pid))
				_, err := s.db.Pool.Exec(r.Context(), "SELECT pg_terminate_backend($1)", pid)
				require.NoError(t, err)
			}
			return false
		}
		a := s.post(t, "key-crash", order)
		require.Equal(t, http.StatusInternalServerError, a.status)
		require.Equal(t, "idempotency_commit_failed", a.code)
		s.requireRows(t, 0, 0)
		crash.Store(false)
		require.Equal(t, http.StatusCreated, s.post(t, "key-crash", order).status)
		require.EqualValues(t, 2, s.runs.Load())
		s.requireRows(t, 1, 1)
	})
	t.Run("context cancelled", func(t *testing.T) {
		t.Parallel()
		s := newShop(t, idempotency.Config{}, "")
		var hang atomic.Bool
		hang.Store(true)
		reached := make(chan struct{})
		s.after = func(_ http.ResponseWriter, r *http.Request, _ pgx.Tx) bool {
			if hang.Load() {
				close(reached)
				<-r.Context().Done() // the client gave up
			}
			return false
		}
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.srv.URL+"/orders", strings.NewReader(order))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "key-gone")
		go func() { <-reached; cancel() }()
		_, err = http.DefaultClient.Do(req)
		require.ErrorIs(t, err, context.Canceled)
		require.Eventually(t, func() bool { return s.obs.count(idempotency.RolledBack) == 1 }, 10*time.Second, 5*time.Millisecond)
		s.requireRows(t, 0, 0)
		hang.Store(false)
		require.Equal(t, http.StatusCreated, s.post(t, "key-gone", order).status)
		s.requireRows(t, 1, 1)
	})
}

func TestExpiredKeyRunsAgain(t *testing.T) {
	t.Parallel()
	s := newShop(t, idempotency.Config{Retention: time.Hour, RouteRetention: map[string]time.Duration{"PUT /orders/{id}": idempotency.Forever}}, "")
	require.Equal(t, http.StatusCreated, s.post(t, "key-expiring", order).status)
	require.Equal(t, http.StatusCreated, s.do(t, http.MethodPut, "/orders/ord_9", "key-forever", `{"order": "ord_9", "amount": 1}`).status)
	var postExpiry, putExpiry *time.Time
	require.NoError(t, s.db.Pool.QueryRow(context.Background(), `SELECT
		(SELECT expires_at FROM `+s.db.Schema+`.idempotency_keys WHERE key = 'key-expiring'),
		(SELECT expires_at FROM `+s.db.Schema+`.idempotency_keys WHERE key = 'key-forever')`).Scan(&postExpiry, &putExpiry))
	require.NotNil(t, postExpiry)
	require.WithinDuration(t, time.Now().Add(time.Hour), *postExpiry, time.Minute)
	require.Nil(t, putExpiry, "kept forever")

	// An hour later, as far as the key is concerned.
	_, err := s.db.Pool.Exec(context.Background(), `UPDATE `+s.db.Schema+`.idempotency_keys SET expires_at = now() - interval '1 second' WHERE key = 'key-expiring'`)
	require.NoError(t, err)
	a := s.post(t, "key-expiring", `{"order": "ord_2", "amount": 1}`)
	require.Equal(t, http.StatusCreated, a.status, "an expired key is new: even another body runs")
	require.Empty(t, a.header.Get(idempotency.ReplayedHeader))
	require.EqualValues(t, 3, s.runs.Load())
	s.requireRows(t, 3, 2)
}

func TestDispatcherPurgesExpiredKeysNoRequestHolds(t *testing.T) {
	t.Parallel()
	s := newShop(t, idempotency.Config{}, "")
	for _, k := range []string{"old", "held", "fresh"} {
		require.Equal(t, http.StatusCreated, s.post(t, "key-"+k, `{"order": "ord_`+k+`", "amount": 1}`).status)
	}
	ctx := context.Background()
	_, err := s.db.Pool.Exec(ctx, `UPDATE `+s.db.Schema+`.idempotency_keys SET expires_at = now() - interval '1 second' WHERE key IN ('key-old', 'key-held')`)
	require.NoError(t, err)

	// A request is taking key-held over (it expired): its row is locked.
	release := make(chan struct{})
	reached := make(chan struct{})
	s.after = func(_ http.ResponseWriter, r *http.Request, _ pgx.Tx) bool {
		if strings.Contains(r.Header.Get("Idempotency-Key"), "held") {
			close(reached)
			<-release
		}
		return false
	}
	done := make(chan answer)
	go func() { done <- s.post(t, "key-held", `{"order": "ord_held2", "amount": 1}`) }()
	<-reached

	n, _, err := store.NewStore(s.db.Schema).PurgeExpired(ctx, s.db.Pool)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "only key-old")
	close(release)
	require.Equal(t, http.StatusCreated, (<-done).status)
	var keys []string
	rows, err := s.db.Pool.Query(ctx, `SELECT key FROM `+s.db.Schema+`.idempotency_keys ORDER BY key`)
	require.NoError(t, err)
	keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"key-fresh", "key-held"}, keys)
}

func TestBadInputIsRefusedAndStoresNothing(t *testing.T) {
	t.Parallel()
	s := newShop(t, idempotency.Config{MaxBodyBytes: 1024}, "")
	for name, c := range map[string]struct {
		key, body string
		status    int
		code      string
	}{
		"missing key":       {"", order, 400, "idempotency_key_missing"},
		"over-long key":     {strings.Repeat("k", 256), order, 400, "idempotency_key_invalid"},
		"space in key":      {"my key", order, 400, "idempotency_key_invalid"},
		"non-ASCII key":     {"clé", order, 400, "idempotency_key_invalid"},
		"body over the cap": {"key-big", `{"order": "ord_1", "pad": "` + strings.Repeat("x", 2000) + `"}`, 413, "request_too_large"},
	} {
		a := s.post(t, c.key, c.body)
		require.Equal(t, c.status, a.status, name)
		require.Equal(t, c.code, a.code, name)
		require.Equal(t, "application/json", a.header.Get("Content-Type"), name)
	}
	require.EqualValues(t, 0, s.runs.Load())
	s.requireRows(t, 0, 0)
	require.Equal(t, 5, s.obs.count(idempotency.Invalid))

	// A key of exactly the maximum length is fine; PUT does not require one.
	require.Equal(t, http.StatusCreated, s.post(t, strings.Repeat("k", 255), order).status)
	require.Equal(t, http.StatusCreated, s.do(t, http.MethodPut, "/orders/ord_2", "", `{"order": "ord_2", "amount": 1}`).status)
	s.requireRows(t, 2, 1)
}

func TestHandlerCannotCommitTheRequestTransaction(t *testing.T) {
	t.Parallel()
	s := newShop(t, idempotency.Config{}, "")
	var commitErr, rollbackErr error
	s.after = func(_ http.ResponseWriter, r *http.Request, tx pgx.Tx) bool {
		commitErr, rollbackErr = tx.Commit(r.Context()), tx.Rollback(r.Context())
		return false
	}
	require.Equal(t, http.StatusCreated, s.post(t, "key-owned", order).status)
	require.ErrorIs(t, commitErr, idempotency.ErrTxOwned)
	require.ErrorIs(t, rollbackErr, idempotency.ErrTxOwned)
	s.requireRows(t, 1, 1)
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, c := range []struct {
		cfg  idempotency.Config
		want string
	}{
		{idempotency.Config{Retention: -time.Hour}, "Retention -1h0m0s: must be positive, or idempotency.Forever"},
		{idempotency.Config{RequiredFor: []string{"GET"}}, "RequiredFor: GET is not among Methods"},
		{idempotency.Config{Schema: "Bad Schema"}, `Config.Schema: schema "Bad Schema": use one lowercase name`},
		{idempotency.Config{InFlightWait: -1}, "InFlightWait"},
		{idempotency.Config{}, "Config.Scope: required"},
		{idempotency.Config{Unscoped: true, Scope: func(*http.Request) string { return "" }}, "choose one"},
	} {
		_, err := idempotency.New(db.Pool, c.cfg)
		require.ErrorContains(t, err, c.want)
	}
}

func TestThreePhase(t *testing.T) {
	t.Parallel()
	t.Run("claim, run, store, replay", func(t *testing.T) {
		t.Parallel()
		s := newShop(t, idempotency.Config{}, threePhase)
		var deadline time.Time
		s.after = func(_ http.ResponseWriter, r *http.Request, _ pgx.Tx) bool {
			deadline, _ = r.Context().Deadline()
			return false
		}
		first := s.post(t, "key-sync", order)
		require.Equal(t, http.StatusCreated, first.status)
		require.WithinDuration(t, time.Now().Add(idempotency.DefaultLockTimeout), deadline, 10*time.Second, "the handler runs within the lock")
		second := s.post(t, "key-sync", order)
		require.Equal(t, first.body, second.body)
		require.Equal(t, "true", second.header.Get(idempotency.ReplayedHeader))
		require.EqualValues(t, 1, s.runs.Load())
		k := onlyKey(t, s)
		require.Equal(t, "completed", k.State)
	})
	t.Run("in flight: 409 at once, or wait up to the bound", func(t *testing.T) {
		t.Parallel()
		for _, wait := range []time.Duration{0, time.Minute} {
			s := newShop(t, idempotency.Config{InFlightWait: wait}, threePhase)
			reached, release := s.holdFirstRun()
			first := make(chan answer)
			go func() { first <- s.post(t, "key-busy", order) }()
			<-reached
			require.Equal(t, "in_progress", onlyKey(t, s).State, "the claim committed before the handler ran")
			if wait == 0 {
				a := s.post(t, "key-busy", order)
				require.Equal(t, http.StatusConflict, a.status)
				require.Equal(t, "idempotency_key_in_use", a.code)
				release()
				require.Equal(t, http.StatusCreated, (<-first).status)
			} else {
				second := make(chan answer)
				go func() { second <- s.post(t, "key-busy", order) }()
				require.Eventually(t, func() bool { return s.count(t, "idempotency_keys") == 1 }, time.Second, time.Millisecond)
				release()
				f, g := <-first, <-second
				require.Equal(t, http.StatusCreated, f.status)
				require.Equal(t, f.body, g.body, "the waiting request got the replay")
				require.Equal(t, "true", g.header.Get(idempotency.ReplayedHeader))
			}
			require.EqualValues(t, 1, s.runs.Load())
		}
	})
	t.Run("a 5xx marks the key failed and the retry runs", func(t *testing.T) {
		t.Parallel()
		s := newShop(t, idempotency.Config{}, threePhase)
		s.after = func(w http.ResponseWriter, _ *http.Request, _ pgx.Tx) bool {
			if s.runs.Load() == 1 {
				w.WriteHeader(http.StatusBadGateway)
				return true
			}
			return false
		}
		require.Equal(t, http.StatusBadGateway, s.post(t, "key-502", `{"order": "ord_a", "amount": 1}`).status)
		k := onlyKey(t, s)
		require.Equal(t, "failed", k.State)
		require.Contains(t, k.Error, "HTTP 502")
		require.Equal(t, http.StatusCreated, s.post(t, "key-502", `{"order": "ord_a2", "amount": 1}`).status)
		require.Equal(t, "completed", onlyKey(t, s).State)
	})
	t.Run("a claim past its lock deadline is reclaimed; the late outcome is not stored", func(t *testing.T) {
		t.Parallel()
		s := newShop(t, idempotency.Config{}, threePhase)
		reached, release := s.holdFirstRun()
		first := make(chan answer)
		go func() { first <- s.post(t, "key-stale", `{"order": "ord_a", "amount": 1}`) }()
		<-reached
		// The first request's process hangs past its lock deadline.
		_, err := s.db.Pool.Exec(context.Background(), `UPDATE `+s.db.Schema+`.idempotency_keys SET locked_until = now() - interval '1 second'`)
		require.NoError(t, err)
		// (Another order id: the first request's order is still uncommitted.)
		second := s.post(t, "key-stale", `{"order": "ord_b", "amount": 1}`)
		require.Equal(t, http.StatusCreated, second.status, "reclaimed")
		release()
		<-first
		third := s.post(t, "key-stale", `{"order": "ord_b", "amount": 1}`)
		require.Equal(t, second.body, third.body, "the stored response is the reclaimer's")
	})
}

func onlyKey(t *testing.T, s *shop) *idempotency.Key {
	t.Helper()
	keys, err := mustKeys(t, s).List(context.Background(), idempotency.Filter{})
	require.NoError(t, err)
	require.Len(t, keys, 1)
	return keys[0]
}

func mustKeys(t *testing.T, s *shop) *idempotency.Keys {
	t.Helper()
	k, err := idempotency.NewKeys(s.db.Pool, s.db.Schema)
	require.NoError(t, err)
	return k
}

func TestReleaseAStuckClaim(t *testing.T) {
	t.Parallel()
	s := newShop(t, idempotency.Config{}, threePhase)
	reached, release := s.holdFirstRun()
	first := make(chan answer)
	go func() { first <- s.post(t, "key-stuck", `{"order": "ord_a", "amount": 1}`) }()
	<-reached
	keys := mustKeys(t, s)
	k := onlyKey(t, s)
	ctx := context.Background()

	_, err := keys.Release(ctx, k.ID, idempotency.ReleaseOpts{Actor: "ada"})
	require.ErrorContains(t, err, "a reason is required")
	_, err = keys.Release(ctx, k.ID, idempotency.ReleaseOpts{Actor: "ada", Reason: "pod gone"})
	require.ErrorContains(t, err, "may still be running")
	got, err := keys.Release(ctx, k.ID, idempotency.ReleaseOpts{Actor: "ada", Reason: "pod gone", Force: true})
	require.NoError(t, err)
	require.Equal(t, "failed", got.State)
	_, audit, err := keys.Get(ctx, k.ID)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, idempotency.AuditEntry{Action: "release", Actor: "ada", Reason: "pod gone", FromState: "in_progress", ToState: "failed", CreatedAt: audit[0].CreatedAt}, audit[0])

	require.Equal(t, http.StatusCreated, s.post(t, "key-stuck", `{"order": "ord_b", "amount": 1}`).status, "a retry runs after the release")
	release()
	<-first
	_, err = keys.Release(ctx, k.ID, idempotency.ReleaseOpts{Actor: "ada", Reason: "again", Force: true})
	require.ErrorContains(t, err, "completed, not in_progress")
	_, _, err = keys.Get(ctx, uuid.New())
	require.ErrorIs(t, err, idempotency.ErrNotFound)
}

// With InFlightWait, a duplicate waits for the request holding the key
// (on the key row's lock, in Postgres) and then gets its response.
func TestInFlightDuplicateWaitsForTheFirstAndReplays(t *testing.T) {
	t.Parallel()
	s := newShop(t, idempotency.Config{InFlightWait: 30 * time.Second}, "")
	reached, release := s.holdFirstRun()
	first := make(chan answer)
	go func() { first <- s.post(t, "key-wait", order) }()
	<-reached
	second := make(chan answer)
	go func() { second <- s.post(t, "key-wait", order) }()
	// The duplicate is waiting on the first request's uncommitted key.
	require.Eventually(t, func() bool { return s.waiters(t, "advisory", 0) == 1 }, 10*time.Second, 5*time.Millisecond)
	release()
	f, g := <-first, <-second
	require.Equal(t, http.StatusCreated, f.status)
	require.Equal(t, f.body, g.body)
	require.Equal(t, "true", g.header.Get(idempotency.ReplayedHeader))
	require.EqualValues(t, 1, s.runs.Load())
	s.requireRows(t, 1, 1)
}

// waiters counts the backends waiting, for forAtLeast or longer, for a
// lock on this test's keys:
// "advisory" for a key a request of this shop holds (the holder has the
// keys' table open), "relation" for a lock on the keys' table itself.
func (s *shop) waiters(t *testing.T, locktype string, forAtLeast time.Duration) int {
	t.Helper()
	var n int
	require.NoError(t, s.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks w
		WHERE NOT w.granted AND w.locktype = $1 AND clock_timestamp() - w.waitstart >= $3::interval AND CASE $1
			WHEN 'relation' THEN w.relation = $2::regclass
			ELSE EXISTS (SELECT 1 FROM pg_locks h JOIN pg_locks r ON r.pid = h.pid AND r.relation = $2::regclass
				WHERE h.granted AND h.locktype = w.locktype AND h.classid = w.classid AND h.objid = w.objid AND h.objsubid = w.objsubid)
		END`,
		locktype, pgschema.Table(s.db.Schema, "idempotency_keys"), forAtLeast).Scan(&n))
	return n
}

// A lock on the keys' table that is not a key's (a VACUUM truncating the
// table's end, a migration, the table's extension under load) makes a
// request with a new key wait, never answer 409 "still being processed".
func TestANewKeyWaitsOutALockThatIsNotAKeys(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"transactional", threePhase} {
		t.Run(mode, func(t *testing.T) {
			// The middleware on one connection, warmed by a first request:
			// its statements are prepared, so the table's lock is met when
			// the insert runs, not when it is parsed.
			s := newShopOn(t, idempotency.Config{}, mode, func(db *testdb.DB) *pgxpool.Pool {
				cfg, err := pgxpool.ParseConfig(testdb.URL())
				require.NoError(t, err)
				cfg.MaxConns = 1
				pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
				require.NoError(t, err)
				t.Cleanup(pool.Close)
				return pool
			})
			require.Equal(t, http.StatusCreated, s.post(t, "key-warm", `{"order": "ord_0", "amount": 100}`).status)
			ctx := context.Background()
			blocker, err := s.db.Pool.Begin(ctx)
			require.NoError(t, err)
			defer blocker.Rollback(ctx) //nolint:errcheck
			_, err = blocker.Exec(ctx, "LOCK TABLE "+pgschema.Table(s.db.Schema, "idempotency_keys")+" IN SHARE MODE")
			require.NoError(t, err)

			answered := make(chan answer, 1)
			go func() { answered <- s.post(t, "key-new", order) }()
			var early *answer
			require.Eventually(t, func() bool {
				select {
				case a := <-answered:
					early = &a
					return true
				default:
					// Waiting longer than any in-flight wait would (the
					// default InFlightWait is none).
					return s.waiters(t, "relation", 100*time.Millisecond) == 1
				}
			}, 10*time.Second, 5*time.Millisecond)
			if early != nil {
				require.Failf(t, "answered while the table was locked", "HTTP %d %s: %s", early.status, early.code, early.body)
			}
			require.NoError(t, blocker.Rollback(ctx))
			a := <-answered
			require.Equal(t, http.StatusCreated, a.status, string(a.body))
			require.EqualValues(t, 2, s.runs.Load())
			require.Zero(t, s.obs.count(idempotency.InFlight))
		})
	}
}
