package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers/endpoint"
	"github.com/outboxd/outboxd/sideeffects"
)

// TestRunDeliversToEndpoints: with --endpoint-key, outboxd run delivers an
// event fanned out to two endpoints, each signed with its own secret only,
// beside a plain webhook signed with --webhook-secret; neither the key nor
// a secret reaches the logs.
func TestRunDeliversToEndpoints(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	keyText := endpoint.NewKey()
	key, err := endpoint.ParseKey(keyText)
	require.NoError(t, err)
	reg, err := endpoint.NewRegistry(endpoint.RegistryConfig{Schema: db.Schema, Key: key,
		AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	require.NoError(t, err)

	srv := newPathRecorder(t)
	secrets := map[string]string{}
	for _, name := range []string{"/a", "/b"} {
		_, secret, err := reg.Create(ctx, db.Pool, endpoint.Endpoint{URL: srv.URL + name, EventTypes: []string{"order.*"}},
			endpoint.Change{Actor: "test"})
		require.NoError(t, err)
		secrets[name] = secret
	}

	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema, WebhookAllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	require.NoError(t, err)
	var res *outbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		res, err = ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid", Payload: []byte(`{"order":"o_1"}`)},
			outbox.ToSubscribers(),
			outbox.Effect{Kind: "webhook.audit", Provider: "webhook", Payload: []byte(`{"url":"` + srv.URL + `/plain","body":{"n":1}}`)})
		return err
	}))
	require.Len(t, res.Effects, 3)

	runCtx, cancel := context.WithCancel(ctx)
	var logs lockedBuffer
	done := make(chan error, 1)
	go func() {
		cmd := newRootCmd()
		cmd.SetOut(&logs)
		cmd.SetErr(&logs)
		cmd.SetArgs([]string{"run", "--database-url", testdb.URL(), "--schema", db.Schema, "--http-addr", "", "--log-level", "debug",
			"--webhook-secret", testSecret, "--webhook-allow-cidrs", "127.0.0.0/8", "--endpoint-key", keyText})
		done <- cmd.ExecuteContext(runCtx)
	}()
	op, err := sideeffects.NewOperator(db.Pool, sideeffects.OperatorConfig{Schema: db.Schema})
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for _, e := range res.Effects {
		for {
			g, err := op.Get(ctx, e.ID)
			require.NoError(t, err)
			if g.State == outboxtype.StateConfirmed {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s is %s: %s", e.Kind, g.State, logs.String())
			time.Sleep(20 * time.Millisecond)
		}
	}
	cancel()
	require.NoError(t, <-done, logs.String())

	got := srv.byPath()
	for name, secret := range secrets {
		require.Len(t, got[name], 1, name)
		wh, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		require.NoError(t, wh.Verify(got[name][0].body, got[name][0].header), "%s verifies with its own secret", name)
		other := secrets["/a"]
		if name == "/a" {
			other = secrets["/b"]
		}
		ow, err := standardwebhooks.NewWebhook(other)
		require.NoError(t, err)
		require.Error(t, ow.Verify(got[name][0].body, got[name][0].header), "%s's request does not verify with the other endpoint's secret", name)
		require.NotContains(t, logs.String(), secret)
	}
	plain, err := standardwebhooks.NewWebhook(testSecret)
	require.NoError(t, err)
	require.NoError(t, plain.Verify(got["/plain"][0].body, got["/plain"][0].header), "a webhook with a URL keeps --webhook-secret")
	require.NotContains(t, logs.String(), keyText)
}

func TestRunRefusesABadEndpointKey(t *testing.T) {
	t.Parallel()
	_, err := execute(context.Background(), "run", "--database-url", testdb.URL(), "--http-addr", "", "--endpoint-key", "c2hvcnQ=")
	require.Equal(t, 2, cli.ExitCode(err), "a usage error: %v", err)
	require.ErrorContains(t, err, "OUTBOXD_ENDPOINT_KEY")
	require.ErrorContains(t, err, "32")
}

// TestRunRefusesAnEndpointKeyThatSealedNoSecret: outboxd run given a key
// that did not seal the registered endpoints' secrets does not start (a
// replica with the wrong key would hold their deliveries); given the list
// "new,old" it starts.
func TestRunRefusesAnEndpointKeyThatSealedNoSecret(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	oldKey := endpoint.NewKey()
	key, err := endpoint.ParseKey(oldKey)
	require.NoError(t, err)
	reg, err := endpoint.NewRegistry(endpoint.RegistryConfig{Schema: db.Schema, Key: key})
	require.NoError(t, err)
	_, _, err = reg.Create(ctx, db.Pool, endpoint.Endpoint{URL: "https://hooks.partner.example/in", EventTypes: []string{"order.*"}},
		endpoint.Change{Actor: "test"})
	require.NoError(t, err)

	newKey := endpoint.NewKey()
	_, err = execute(ctx, "run", "--database-url", testdb.URL(), "--schema", db.Schema, "--http-addr", "",
		"--webhook-secret", testSecret, "--endpoint-key", newKey)
	require.Equal(t, 2, cli.ExitCode(err), "%v", err)
	require.ErrorContains(t, err, "is not the key 1 sealed endpoint secrets were sealed with")
	require.ErrorContains(t, err, "outboxctl endpoints reseal")

	runCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = execute(runCtx, "run", "--database-url", testdb.URL(), "--schema", db.Schema, "--http-addr", "",
		"--webhook-secret", testSecret, "--endpoint-key", newKey+","+oldKey)
	require.NoError(t, err, "with the list it starts (and stops when its context ends)")
}

// seen is a request a pathRecorder received.
type seen struct {
	header http.Header
	body   []byte
}

// pathRecorder is a receiver that answers 204 and keeps every request by
// path.
type pathRecorder struct {
	*httptest.Server
	mu  sync.Mutex
	got map[string][]seen
}

func newPathRecorder(t *testing.T) *pathRecorder {
	t.Helper()
	p := &pathRecorder{got: map[string][]seen{}}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		p.got[r.URL.Path] = append(p.got[r.URL.Path], seen{r.Header.Clone(), body})
		p.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(p.Close)
	return p
}

// byPath returns a copy of the requests received so far, by path.
func (p *pathRecorder) byPath() map[string][]seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][]seen, len(p.got))
	for k, v := range p.got {
		out[k] = append([]seen(nil), v...)
	}
	return out
}
