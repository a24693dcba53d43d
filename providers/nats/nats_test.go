package nats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testbrokers"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/nats"
	"github.com/outboxd/outboxd/providers/nats/natsschema"
	"github.com/outboxd/outboxd/sideeffects"
)

// startJetStream runs a real NATS server with JetStream in the test's
// process, with stream ORDERS on orders.> (max message 4 KiB) keeping
// message ids for window.
func startJetStream(t *testing.T, window time.Duration) (string, jetstream.JetStream) {
	t.Helper()
	j, err := testbrokers.StartJetStream(context.Background(), window)
	require.NoError(t, err)
	t.Cleanup(j.Close)
	cfg := j.Stream.CachedInfo().Config
	cfg.MaxMsgSize = 4096
	_, err = j.JS.UpdateStream(context.Background(), cfg)
	require.NoError(t, err)
	return j.URL, j.JS
}

func newProvider(t *testing.T, url string) *nats.Provider {
	t.Helper()
	p, err := nats.New(context.Background(), nats.Config{URL: url, Streams: []string{"ORDERS"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func request(key, payload string) providers.Request {
	return providers.Request{
		EffectID: "0190c3a0-7b1e-8c3d-9f00-0000000000e1", Kind: "nats.order_paid", Key: key, Attempt: 1,
		Payload: json.RawMessage(payload), EventID: "0190c3a0-7b1e-7c3d-9f00-000000000001",
		Event: &providers.SourceEvent{ID: "0190c3a0-7b1e-7c3d-9f00-000000000001", Type: "order.paid", AggregateType: "order", AggregateID: "o_42", Payload: json.RawMessage(`{"order":"o_42","amount":500}`)},
	}
}

func TestAPublishIsStoredOnceWithItsKeyAndEvent(t *testing.T) {
	t.Parallel()
	url, js := startJetStream(t, time.Hour)
	p := newProvider(t, url)
	require.Equal(t, time.Hour, p.Guarantees().KeyWindow, "the stream's duplicate window is the key window")
	require.True(t, p.Guarantees().WindowCoversRetries)

	key := strings.Repeat("ab", 32)
	res, err := p.Send(context.Background(), request(key, `{"subject":"orders.paid","headers":{"Tenant":"acme"}}`))
	require.NoError(t, err)
	require.Equal(t, "ORDERS/1", res.Ref)
	require.False(t, res.Replayed)

	// An in-doubt re-publish of the same effect: JetStream answers with
	// the sequence it stored first, and stores nothing.
	again, err := p.Send(context.Background(), request(key, `{"subject":"orders.paid","headers":{"Tenant":"acme"}}`))
	require.NoError(t, err)
	require.Equal(t, "ORDERS/1", again.Ref)
	require.True(t, again.Replayed)

	stream, err := js.Stream(context.Background(), "ORDERS")
	require.NoError(t, err)
	info, err := stream.Info(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, info.State.Msgs)
	msg, err := stream.GetMsg(context.Background(), 1)
	require.NoError(t, err)
	require.JSONEq(t, `{"order":"o_42","amount":500}`, string(msg.Data), "the event's payload is the body by default")
	require.Equal(t, key, msg.Header.Get(natsschema.HeaderMsgID))
	require.Equal(t, key, msg.Header.Get(natsschema.HeaderKey))
	require.Equal(t, "0190c3a0-7b1e-7c3d-9f00-000000000001", msg.Header.Get(natsschema.HeaderEventID))
	require.Equal(t, "order.paid", msg.Header.Get(natsschema.HeaderEventType))
	require.Equal(t, "o_42", msg.Header.Get(natsschema.HeaderAggregateID))
	require.Equal(t, "nats.order_paid", msg.Header.Get(natsschema.HeaderKind))
	require.Equal(t, "acme", msg.Header.Get("Tenant"))

	// Another effect's key is another message; data given is the body.
	other, err := p.Send(context.Background(), request(strings.Repeat("cd", 32), `{"subject":"orders.paid","data":{"custom":true}}`))
	require.NoError(t, err)
	require.Equal(t, "ORDERS/2", other.Ref)
	msg, err = stream.GetMsg(context.Background(), 2)
	require.NoError(t, err)
	require.JSONEq(t, `{"custom":true}`, string(msg.Data))
}

func TestAPublishNoStreamTakesIsRetriedAndOneTooLargeRefused(t *testing.T) {
	t.Parallel()
	url, _ := startJetStream(t, time.Hour)
	p := newProvider(t, url)

	_, err := p.Send(context.Background(), request(strings.Repeat("ab", 32), `{"subject":"invoices.sent"}`))
	class, _ := providers.Classify(err)
	require.Equal(t, providers.ClassRetryable, class, "nothing was stored: %v", err)
	require.ErrorContains(t, err, `no stream of --nats-streams (ORDERS) captures subject "invoices.sent"`)

	big := `{"subject":"orders.paid","data":"` + strings.Repeat("x", 5000) + `"}`
	_, err = p.Send(context.Background(), request(strings.Repeat("cd", 32), big))
	require.True(t, providers.IsRefused(err), "over the stream's max message size: %v", err)
	prof := nats.Schema{}.Profile()
	require.True(t, prof.RefusedWithoutActing(err.Error()), "an operator's edit may follow a refusal: %v", err)
}

func TestNewNamesWhatIsWrongWithTheStreams(t *testing.T) {
	t.Parallel()
	url, js := startJetStream(t, time.Hour)
	ctx := context.Background()
	_, err := nats.New(ctx, nats.Config{URL: url})
	require.ErrorContains(t, err, "name the streams")
	_, err = nats.New(ctx, nats.Config{URL: url, Streams: []string{"NOPE"}})
	require.ErrorContains(t, err, `stream "NOPE"`)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "SHORT", Subjects: []string{"short.>"}, Duplicates: 5 * time.Second})
	require.NoError(t, err)
	_, err = nats.New(ctx, nats.Config{URL: url, Streams: []string{"ORDERS", "SHORT"}})
	require.ErrorContains(t, err, "duplicate window (5s) must exceed the key window margin")
	p, err := nats.New(ctx, nats.Config{URL: url, Streams: []string{"ORDERS", "SHORT"}, KeyWindowMargin: time.Second})
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, 5*time.Second, p.Guarantees().KeyWindow, "the shortest window of the streams")
}

func TestThePayloadNamesTheFieldAtFault(t *testing.T) {
	t.Parallel()
	for payload, want := range map[string]string{
		`{}`:                                             "payload.subject: required",
		`{"subject":"orders.*"}`:                         "wildcards",
		`{"subject":"orders..paid"}`:                     "empty token",
		`{"subject":"orders paid"}`:                      "no whitespace",
		`{"subject":"orders.paid","x":1}`:                "unknown field",
		`{"subject":"o","headers":{"Nats-Msg-Id":"k"}}`:  "payload.headers.Nats-Msg-Id",
		`{"subject":"o","headers":{"outboxd-kind":"k"}}`: "set by outboxd",
	} {
		err := natsschema.Schema{}.ValidatePayload("nats.x", json.RawMessage(payload))
		require.ErrorContains(t, err, want, payload)
	}
	require.NoError(t, natsschema.Schema{}.ValidatePayload("nats.x", json.RawMessage(`{"subject":"orders.paid","data":[1,2]}`)))
}

// TestADispatcherRefusesAWindowShorterThanItsRetries: JetStream's default
// duplicate window (2 minutes) cannot cover outboxd's default retries (20
// attempts over hours): a re-publish after it would be a second message,
// so the dispatcher refuses to start and says what to change.
func TestADispatcherRefusesAWindowShorterThanItsRetries(t *testing.T) {
	t.Parallel()
	url, _ := startJetStream(t, 2*time.Minute)
	p := newProvider(t, url)
	db := testdb.New(t)
	_, err := sideeffects.NewDispatcher(db.Pool, sideeffects.Config{Schema: db.Schema, Providers: []providers.Provider{p}})
	require.ErrorContains(t, err, "the nats key window (2m0s, less its 10s margin) is shorter than the retry schedule")
	// It names the stream, JetStream's word for the window and the
	// command that widens it, and the flags that retry less.
	require.ErrorContains(t, err, "the key window is the duplicate window of JetStream stream ORDERS")
	require.ErrorContains(t, err, "nats stream edit ORDERS --dupe-window 5h")
	require.ErrorContains(t, err, "--max-attempts, --retry-max-delay, --job-timeout")
	_, err = sideeffects.NewDispatcher(db.Pool, sideeffects.Config{Schema: db.Schema, Providers: []providers.Provider{p},
		Retry: sideeffects.RetryPolicy{MaxAttempts: 5, BaseDelay: time.Second, MaxDelay: 10 * time.Second}, JobTimeout: 15 * time.Second})
	require.NoError(t, err, "5 attempts: at most 15s of delays and 4 calls of 15s fit in 2 minutes")
}

// TestLookupFindsAPublishByItsKeyWithinTheWindow: an operator asking
// JetStream whether an effect was stored (the web view's "Ask the
// provider") gets the message's stream and sequence, or a clear "none".
func TestLookupFindsAPublishByItsKeyWithinTheWindow(t *testing.T) {
	t.Parallel()
	url, _ := startJetStream(t, time.Hour)
	p := newProvider(t, url)
	ctx := context.Background()
	for i := range 1200 {
		_, err := p.Send(ctx, request(fmt.Sprintf("%064x", i), `{"subject":"orders.paid"}`))
		require.NoError(t, err)
	}
	found, how, err := p.Lookup(ctx, json.RawMessage(`{"subject":"orders.paid"}`), fmt.Sprintf("%064x", 1100))
	require.NoError(t, err)
	require.Len(t, found, 1, how)
	require.Equal(t, "ORDERS/1101", found[0].ID)
	require.Contains(t, how, "duplicate window")

	found, how, err = p.Lookup(ctx, json.RawMessage(`{"subject":"orders.paid"}`), strings.Repeat("f", 64))
	require.NoError(t, err)
	require.Empty(t, found)
	require.Contains(t, how, "1200 read, none carries it")
}

// TestABrokerOutageSpendsNoAttempts: while the NATS server cannot be
// reached, an effect is not published (no request waits in the client's
// reconnect buffer, its outcome unknown): the server's limit key waits, as
// after a 429, and when the server is back the effect is published once,
// its first attempt counted alone.
func TestABrokerOutageSpendsNoAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	dir := t.TempDir()
	start := func() *server.Server {
		s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoSigs: true})
		require.NoError(t, err)
		go s.Start()
		require.True(t, s.ReadyForConnections(10*time.Second))
		return s
	}
	srv := start()
	nc, err := natsgo.Connect(srv.ClientURL())
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Duplicates: 6 * time.Hour})
	require.NoError(t, err)
	nc.Close()
	// A short timeout: a publish made before the client notices the
	// server is gone waits for no answer that long.
	p, err := nats.New(ctx, nats.Config{URL: srv.ClientURL(), Streams: []string{"ORDERS"}, Timeout: 200 * time.Millisecond,
		Options: []natsgo.Option{natsgo.ReconnectWait(50 * time.Millisecond), natsgo.MaxReconnects(-1)}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	require.Equal(t, "nats:"+srv.ClientURL(), p.Limit(nil).Key)

	srv.Shutdown()
	srv.WaitForShutdown()
	require.Eventually(t, func() bool {
		_, err := p.Send(ctx, request(strings.Repeat("ab", 32), `{"subject":"orders.paid"}`))
		return providers.IsUnreachable(err)
	}, 10*time.Second, 10*time.Millisecond, "a disconnected provider publishes nothing and says the server is out of reach")

	db := testdb.New(t)
	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	var res *outbox.Result
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		res, err = ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("outage", "o_1"), Type: "order.paid", Payload: []byte(`{"order": "o_1"}`)},
			outbox.EffectOf("nats.order_paid", natsschema.Publish{Subject: "orders.paid"}))
		return err
	})
	require.NoError(t, err)
	id := res.Effects[0].ID
	d, err := sideeffects.NewDispatcher(db.Pool, sideeffects.Config{Schema: db.Schema, Providers: []providers.Provider{p}, Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	defer d.Stop(ctx)
	op, err := sideeffects.NewOperator(db.Pool, sideeffects.OperatorConfig{Schema: db.Schema})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, err := op.Get(ctx, id)
		return err == nil && e.WaitingFor != nil && *e.WaitingFor == p.Limit(nil).Key
	}, 20*time.Second, 20*time.Millisecond, "the effect waits for the server's key")

	srv = start()
	defer srv.Shutdown()
	require.Eventually(t, func() bool {
		e, err := op.Get(ctx, id)
		return err == nil && e.State == sideeffects.StateConfirmed
	}, 30*time.Second, 20*time.Millisecond, "published once the server is back")
	e, err := op.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 1, e.Attempts, "the outage spent no attempt")
	require.Equal(t, "ORDERS/1", *e.ProviderRef)
	limits, err := op.Limits(ctx)
	require.NoError(t, err)
	for _, l := range limits {
		if l.Key == p.Limit(nil).Key {
			require.Zero(t, l.Throttles, "an unreachable server said nothing about rate: no 429 is counted")
			require.Zero(t, l.CurrentRate, "nor is its rate lowered (none was learnt)")
		}
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestAPublishWhileReconnectingIsNotBuffered: the client keeps no
// reconnect buffer, so a publish made as the connection drops fails at
// once, as nothing published, instead of being sent on reconnection after
// its attempt ended (a message stored that its attempt never saw).
func TestAPublishWhileReconnectingIsNotBuffered(t *testing.T) {
	t.Parallel()
	url, _ := startJetStream(t, time.Hour)
	require.Equal(t, -1, nats.ReconnectBuf(newProvider(t, url)), "no reconnect buffer")
	err := nats.Classify(natsgo.ErrReconnectBufExceeded)
	require.True(t, providers.IsUnreachable(err), "%v", err)
	require.ErrorContains(t, err, "nothing was published")
}

// TestNoURLFormLeaksItsPassword: every form of URL nats.go accepts has its
// password hidden wherever outboxd shows the URL (the limit key, errors,
// the dispatcher's settings): with a scheme, without one (nats.go reads
// it as nats://), in a list, and a URL that does not parse, whose error
// nats.go would quote.
func TestNoURLFormLeaksItsPassword(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"nats://alice:s3cret@nats.internal:4222",
		"alice:s3cret@nats.internal:4222",
		"nats://bob:other@a:4222, alice:s3cret@b:4222",
		"tls://alice:s3cret@nats.internal:4222",
		"nats://alice:s3cr%zzet@nats.internal:4222",
	} {
		got := nats.Redacted(u)
		require.NotContains(t, got, "s3cr", u)
		require.NotContains(t, got, "other", u)
		require.Contains(t, got, "redacted@", u)
	}
	require.Equal(t, "nats://nats.internal:4222", nats.Redacted("nats://nats.internal:4222"), "no user information: as it was")

	_, err := nats.NewAsker("nats://alice:s3cr%zzet@127.0.0.1:1")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cr")
	require.NotContains(t, err.Error(), "zzet")
	require.Contains(t, err.Error(), "does not parse")
}

// TestAnEffectCannotDriveTheJetStreamAPI: a subject of JetStream's own API
// is refused when enqueued and when dispatched (an effect written by SQL),
// and a subject only a stream outside --nats-streams captures is not
// published to: the configured stream keeps its messages, the other
// stream gets none.
func TestAnEffectCannotDriveTheJetStreamAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, js := startJetStream(t, time.Hour)
	p := newProvider(t, url)
	_, err := p.Send(ctx, request(strings.Repeat("ab", 32), `{"subject":"orders.paid"}`))
	require.NoError(t, err)

	for _, subject := range []string{"$JS.API.STREAM.PURGE.ORDERS", "$KV.config.key", "_INBOX.abc"} {
		payload := `{"subject":"` + subject + `"}`
		require.ErrorContains(t, natsschema.Schema{}.ValidatePayload("nats.relay", json.RawMessage(payload)), "payload.subject", subject)
		_, err := p.Send(ctx, request(strings.Repeat("cd", 32), payload))
		require.True(t, providers.IsRefused(err), "%s: %v", subject, err)
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "INVOICES", Subjects: []string{"invoices.>"}})
	require.NoError(t, err)
	_, err = p.Send(ctx, request(strings.Repeat("ef", 32), `{"subject":"invoices.sent"}`))
	class, _ := providers.Classify(err)
	require.Equal(t, providers.ClassRetryable, class, "%v", err)

	for name, want := range map[string]uint64{"ORDERS": 1, "INVOICES": 0} {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		require.Equal(t, want, info.State.Msgs, name)
	}
}

// TestAShortenedWindowHoldsEveryPublish: the stream's duplicate window is
// the key window outboxd started with and promised. Shortened afterwards,
// a re-publish could be stored twice: nothing is published, the
// provider's effects wait (held, no attempt spent) with the command that
// mends it, and go again once the window is as long again.
func TestAShortenedWindowHoldsEveryPublish(t *testing.T) {
	t.Parallel()
	url, js := startJetStream(t, time.Hour)
	p := newProvider(t, url)
	ctx := context.Background()
	_, err := p.Send(ctx, request(strings.Repeat("a1", 32), `{"subject":"orders.paid"}`))
	require.NoError(t, err)

	setWindow := func(w time.Duration) {
		stream, err := js.Stream(ctx, "ORDERS")
		require.NoError(t, err)
		cfg := stream.CachedInfo().Config
		cfg.Duplicates = w
		_, err = js.UpdateStream(ctx, cfg)
		require.NoError(t, err)
		require.NoError(t, nats.ReadStreams(p))
	}
	stored := func() uint64 {
		stream, err := js.Stream(ctx, "ORDERS")
		require.NoError(t, err)
		info, err := stream.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}

	setWindow(time.Second)
	_, err = p.Send(ctx, request(strings.Repeat("b2", 32), `{"subject":"orders.paid"}`))
	require.Error(t, err)
	require.True(t, providers.IsHeld(err), "held, spending no attempt: %v", err)
	require.ErrorContains(t, err, "duplicate window is now 1s, shorter than the 1h0m0s outboxd started with")
	require.ErrorContains(t, err, "nats stream edit ORDERS --dupe-window 1h0m0s")
	require.EqualValues(t, 1, stored(), "nothing published")

	setWindow(time.Hour)
	_, err = p.Send(ctx, request(strings.Repeat("b2", 32), `{"subject":"orders.paid"}`))
	require.NoError(t, err)
	require.EqualValues(t, 2, stored())
}

// TestOnePublishAtATimeReadsTheStreams: once the streams are due to be
// read again, one publish reads them while the others go on with what was
// read last, and a read that failed is tried again a second later, not by
// every publish: each waiting for a JetStream API that had not answered
// yet once held a relay's batches for tens of seconds after the broker
// was back.
func TestOnePublishAtATimeReadsTheStreams(t *testing.T) {
	t.Parallel()
	url, js := startJetStream(t, time.Hour)
	ctx := context.Background()
	// A second stream, deleted once the provider has read it: every read
	// of the streams fails from then on.
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "AUDIT", Subjects: []string{"audit.>"}, Duplicates: time.Hour})
	require.NoError(t, err)
	p, err := nats.New(ctx, nats.Config{URL: url, Streams: []string{"ORDERS", "AUDIT"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	require.NoError(t, js.DeleteStream(ctx, "AUDIT"))

	// Every request to read a stream, seen by a subscriber of the API's
	// subject (which gets a copy of each).
	nc, err := natsgo.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	sub, err := nc.SubscribeSync("$JS.API.STREAM.INFO.>")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	reads := func() int {
		require.NoError(t, nc.Flush())
		n, _, err := sub.Pending()
		require.NoError(t, err)
		return n
	}

	publish := func(from, n int) {
		var wg sync.WaitGroup
		for i := from; i < from+n; i++ {
			wg.Go(func() {
				_, err := p.Send(ctx, request(fmt.Sprintf("%064x", i), `{"subject":"orders.paid"}`))
				assert.NoError(t, err, "what was read last still holds")
			})
		}
		wg.Wait()
	}
	nats.AgeStreams(p)
	publish(0, 20)
	require.Equal(t, 2, reads(), "one read of the streams for 20 publishes at once: ORDERS, then AUDIT, which failed")
	publish(20, 20)
	require.Equal(t, 2, reads(), "a failed read is not tried again by the next publishes")
	nats.AgeStreams(p)
	publish(40, 1)
	require.Equal(t, 4, reads(), "and is tried again once it is due")

	stream, err := js.Stream(ctx, "ORDERS")
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 41, info.State.Msgs, "every publish stored")
}
