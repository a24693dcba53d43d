package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/testbrokers"
	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers/kafka/kafkaschema"
	"github.com/outboxd/outboxd/providers/nats/natsschema"
	"github.com/outboxd/outboxd/sideeffects"
)

// startJetStream runs a NATS server with JetStream in the test's process,
// with stream ORDERS on orders.> keeping message ids for window.
func startJetStream(t *testing.T, window time.Duration) string {
	t.Helper()
	j, err := testbrokers.StartJetStream(context.Background(), window)
	require.NoError(t, err)
	t.Cleanup(j.Close)
	return j.URL
}

func TestRunRelaysEventsToJetStreamAndKafka(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	natsURL := startJetStream(t, 6*time.Hour)
	cluster, brokers, err := testbrokers.StartKafka(1)
	require.NoError(t, err)
	t.Cleanup(cluster.Close)

	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: db.Schema})
	require.NoError(t, err)
	var effects []outbox.EffectResult
	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		res, err := ob.Enqueue(ctx, tx, outbox.Event{ID: outbox.EventID("orders", "o_42", "paid"), Type: "order.paid", AggregateType: "order", AggregateID: "o_42",
			Payload: []byte(`{"order":"o_42"}`)},
			outbox.EffectOf("nats.order_paid", natsschema.Publish{Subject: "orders.paid"}),
			outbox.EffectOf("kafka.order_paid", kafkaschema.Record{Topic: "orders"}))
		effects = res.Effects
		return err
	})
	require.NoError(t, err)
	// The same relay from SQL, as a trigger or a migration would write it:
	// the event's payload is the body.
	var sqlEffect uuid.UUID
	err = db.Pool.QueryRow(ctx, `SELECT effect_id FROM `+db.Schema+`.outboxd_enqueue($1::jsonb, $2::jsonb)`,
		`{"id": "0190c3a0-7b1e-7c3d-9f00-0000000000a1", "type": "order.shipped", "aggregate_type": "order", "aggregate_id": "o_43", "payload": {"order": "o_43"}}`,
		`[{"kind": "nats.order_shipped", "provider": "nats", "payload": {"subject": "orders.shipped"}}]`).Scan(&sqlEffect)
	require.NoError(t, err)
	effects = append(effects, outbox.EffectResult{ID: sqlEffect, Kind: "nats.order_shipped"})
	err = db.Pool.QueryRow(ctx, `SELECT effect_id FROM `+db.Schema+`.outboxd_enqueue($1::jsonb, $2::jsonb)`,
		`{"id": "0190c3a0-7b1e-7c3d-9f00-0000000000a2", "type": "order.shipped", "aggregate_type": "order", "aggregate_id": "o_44", "payload": {"order": "o_44"}}`,
		`[{"kind": "kafka.order_shipped", "provider": "kafka", "payload": {"topic": "orders"}}]`).Scan(&sqlEffect)
	require.NoError(t, err)
	effects = append(effects, outbox.EffectResult{ID: sqlEffect, Kind: "kafka.order_shipped"})

	runCtx, cancel := context.WithCancel(ctx)
	var logs lockedBuffer
	done := make(chan error, 1)
	go func() {
		cmd := newRootCmd()
		cmd.SetOut(&logs)
		cmd.SetErr(&logs)
		cmd.SetArgs([]string{"run", "--database-url", testdb.URL(), "--schema", db.Schema, "--http-addr", "",
			"--nats-url", natsURL, "--nats-streams", "ORDERS", "--kafka-brokers", strings.Join(brokers, ",")})
		done <- cmd.ExecuteContext(runCtx)
	}()
	defer func() {
		cancel()
		require.NoError(t, <-done, logs.String())
	}()

	op, err := sideeffects.NewOperator(db.Pool, sideeffects.OperatorConfig{Schema: db.Schema})
	require.NoError(t, err)
	refs := map[string]string{}
	deadline := time.Now().Add(30 * time.Second)
	for _, e := range effects {
		for {
			got, err := op.Get(ctx, e.ID)
			require.NoError(t, err)
			if got.State == outboxtype.StateConfirmed {
				refs[e.Kind] = deref(got.ProviderRef)
				break
			}
			require.True(t, time.Now().Before(deadline), "%s is %s: %s", e.Kind, got.State, logs.String())
			time.Sleep(20 * time.Millisecond)
		}
	}
	require.Regexp(t, `^ORDERS/[12]$`, refs["nats.order_paid"], "the stream and sequence JetStream acknowledged")
	require.Regexp(t, `^ORDERS/[12]$`, refs["nats.order_shipped"])
	require.NotEqual(t, refs["nats.order_paid"], refs["nats.order_shipped"])
	require.Regexp(t, `^orders/0/[01]$`, refs["kafka.order_paid"], "the topic, partition and offset Kafka acknowledged")
	require.Regexp(t, `^orders/0/[01]$`, refs["kafka.order_shipped"])
	require.NotEqual(t, refs["kafka.order_paid"], refs["kafka.order_shipped"])
}

// TestRunRefusesAStreamWindowShorterThanTheRetries: JetStream's default
// duplicate window (2 minutes) would let a late re-publish through as a
// second message; outboxd run says so at start, with the fix.
func TestRunRefusesAStreamWindowShorterThanTheRetries(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	natsURL := startJetStream(t, 2*time.Minute)
	_, err := execute(context.Background(), "run", "--database-url", testdb.URL(), "--schema", db.Schema, "--http-addr", "",
		"--nats-url", natsURL, "--nats-streams", "ORDERS")
	require.Error(t, err)
	require.Equal(t, 2, cli.ExitCode(err), "a usage error: %v", err)
	require.ErrorContains(t, err, "nats key window (2m0s, less its 10s margin) is shorter than the retry schedule")

	_, err = execute(context.Background(), "run", "--database-url", testdb.URL(), "--schema", db.Schema, "--http-addr", "",
		"--nats-url", natsURL, "--nats-streams", "INVOICES")
	require.Equal(t, 2, cli.ExitCode(err), "a usage error: %v", err)
	require.ErrorContains(t, err, `--nats-streams`)
	require.ErrorContains(t, err, `stream "INVOICES"`)
}
