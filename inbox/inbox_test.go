package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/outboxd/outboxd/inbox"
	"github.com/outboxd/outboxd/internal/store"
	"github.com/outboxd/outboxd/internal/testdb"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// An application's own incoming webhook (a partner signing with Standard
// Webhooks): each message changes the application's rows once, however
// often it is delivered; a failure records nothing so the retry runs it.
func TestHandlerRunsEachMessageOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, "CREATE TABLE "+db.Schema+".credits (account text PRIMARY KEY, amount int NOT NULL)")
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "INSERT INTO "+db.Schema+".credits VALUES ('acct_1', 0)")
	require.NoError(t, err)

	ib, err := inbox.New(db.Pool, inbox.Config{Schema: db.Schema, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	v, err := inbox.StandardWebhooks(secret, 5*24*time.Hour)
	require.NoError(t, err)
	var fail atomic.Bool
	var runs atomic.Int32
	h, err := ib.Handler("partner", v, func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		runs.Add(1)
		if _, err := tx.Exec(ctx, "UPDATE "+db.Schema+".credits SET amount = amount + 100 WHERE account = 'acct_1'"); err != nil {
			return err
		}
		if fail.Load() {
			return errors.New("downstream table locked")
		}
		require.Equal(t, "credit.granted", m.Type)
		return nil
	})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	body := []byte(`{"type": "credit.granted", "account": "acct_1", "amount": 100}`)
	deliver := func(id string, body []byte, tamper bool) int {
		now := time.Now()
		sig, err := wh.Sign(id, now, body)
		require.NoError(t, err)
		if tamper {
			body = append(bytes.Clone(body), ' ')
		}
		req, err := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	credits := func() (amount, recorded int) {
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT (SELECT amount FROM "+db.Schema+".credits), (SELECT count(*) FROM "+db.Schema+".inbox_messages)").Scan(&amount, &recorded))
		return
	}

	require.Equal(t, http.StatusBadRequest, deliver("msg_1", body, true), "tampered body")
	a, n := credits()
	require.Equal(t, [2]int{0, 0}, [2]int{a, n}, "nothing stored for a bad signature")

	fail.Store(true)
	require.Equal(t, http.StatusInternalServerError, deliver("msg_1", body, false))
	a, n = credits()
	require.Equal(t, [2]int{0, 0}, [2]int{a, n}, "a failure records nothing: the sender retries")

	fail.Store(false)
	var wg sync.WaitGroup
	codes := make(chan int, 5)
	for range 5 {
		wg.Go(func() { codes <- deliver("msg_1", body, false) })
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		require.Equal(t, http.StatusOK, c, "redeliveries answer 2xx")
	}
	a, n = credits()
	require.Equal(t, 100, a, "credited once over five concurrent deliveries")
	require.Equal(t, 1, n)
	require.EqualValues(t, 2, runs.Load(), "the failed attempt and one success")

	var expires time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT expires_at FROM "+db.Schema+".inbox_messages").Scan(&expires))
	require.WithinDuration(t, time.Now().Add(inbox.DefaultRetention), expires, time.Minute)
}

func TestClaimReportsWhetherAMessageIsNew(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	ib, err := inbox.New(db.Pool, inbox.Config{Schema: db.Schema, Retention: map[string]time.Duration{"apple": 30 * 24 * time.Hour}})
	require.NoError(t, err)
	claim := func(source, id string) bool {
		var isNew bool
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			var err error
			isNew, err = ib.Claim(ctx, tx, source, id)
			return err
		}))
		return isNew
	}
	require.True(t, claim("apple", "n_1"))
	require.False(t, claim("apple", "n_1"))
	require.True(t, claim("google", "n_1"), "ids are per source")

	// A claim rolled back with its transaction is new again.
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		isNew, err := ib.Claim(ctx, tx, "apple", "n_2")
		require.True(t, isNew)
		require.NoError(t, err)
		return errors.New("the work failed")
	})
	require.ErrorContains(t, err, "the work failed")
	require.True(t, claim("apple", "n_2"))

	// Past its retention an id is purged by outboxd's maintenance.
	_, err = db.Pool.Exec(ctx, "UPDATE "+db.Schema+".inbox_messages SET expires_at = now() - interval '1 second' WHERE source = 'google'")
	require.NoError(t, err)
	_, purged, err := store.NewStore(db.Schema).PurgeExpired(ctx, db.Pool)
	require.NoError(t, err)
	require.EqualValues(t, 1, purged)
	require.True(t, claim("google", "n_1"), "a redelivery after the retention is new")

	_, err = ib.Claim(ctx, nil, "", "x")
	require.ErrorContains(t, err, "needs a source and a message id")
	require.Equal(t, 30*24*time.Hour, ib.Retention("apple"))
	require.Equal(t, inbox.DefaultRetention, ib.Retention("google"))
}

func TestRetentionShorterThanTheRetryWindowIsRefused(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ib, err := inbox.New(db.Pool, inbox.Config{Schema: db.Schema, Retention: map[string]time.Duration{"partner": time.Hour}})
	require.NoError(t, err)
	v, err := inbox.StandardWebhooks(secret, 5*24*time.Hour)
	require.NoError(t, err)
	_, err = ib.Handler("partner", v, nil)
	require.ErrorContains(t, err, "retention of partner (1h0m0s) is shorter than the sender's retry window (120h0m0s)")
	_, err = inbox.New(db.Pool, inbox.Config{Retention: map[string]time.Duration{"x": -time.Second}})
	require.ErrorContains(t, err, `Retention["x"]`)
	_, err = inbox.StandardWebhooks("whsec_%%% not base64", time.Hour)
	require.ErrorContains(t, err, "whsec_")
}
