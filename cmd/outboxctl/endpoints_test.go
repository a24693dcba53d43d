package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/outboxtype"
	"github.com/outboxd/outboxd/providers/endpoint"
)

// TestEndpointsFromTheCommandLine walks an endpoint's life: created with
// its secret shown once, listed, edited (a dry run first), reached by a
// fan-out, disabled with its delivery held, enabled dropping what it held,
// rotated and sent a test event; every change audited.
func TestEndpointsFromTheCommandLine(t *testing.T) {
	t.Parallel()
	b := newTestBundle(t)
	ctx := context.Background()
	key := endpoint.NewKey()

	_, err := b.run(t, "", "endpoints", "create", "--url", "https://hooks.partner.example/in", "--types", "order.*")
	require.ErrorAs(t, err, new(cli.UsageError))
	require.ErrorContains(t, err, "OUTBOXD_ENDPOINT_KEY", "creating needs the key")
	_, err = b.run(t, "", "endpoints", "create", "--endpoint-key", key, "--url", "http://10.1.2.3/in", "--types", "order.*")
	require.ErrorContains(t, err, "--url", "a private address is refused, naming the flag")

	out, err := b.run(t, "", "endpoints", "create", "--endpoint-key", key, "--url", "https://hooks.partner.example/in",
		"--types", "order.*,invoice.paid", "--header", "Authorization=Bearer partner-token", "--rate", "20", "--reason", "partner onboarding", "--json")
	require.NoError(t, err, out)
	var created struct {
		Endpoint endpoint.Endpoint
		Secret   string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &created))
	id := created.Endpoint.ID.String()
	require.Regexp(t, `^whsec_`, created.Secret)
	require.NotContains(t, out, "partner-token", "header values may be credentials: not in --json either")
	require.Equal(t, map[string]string{"Authorization": "(set)"}, created.Endpoint.Headers)

	out, err = b.run(t, "", "endpoints")
	require.NoError(t, err)
	require.Regexp(t, id+`\s+https://hooks.partner.example/in\s+-\s+order\.\*,invoice\.paid\s+enabled\s+1`, out)
	out, err = b.run(t, "", "limits")
	require.NoError(t, err)
	require.Regexp(t, `endpoint:`+id+`\s+20/s\s+operator:oncall@example.com`, out, "its rate, for every replica")
	out, err = b.run(t, "", "endpoints", "show", id)
	require.NoError(t, err)
	require.Contains(t, out, "header      Authorization: (set)")
	require.NotContains(t, out, "partner-token", "header values may be credentials: not shown")
	require.NotContains(t, out, created.Secret)

	out, err = b.run(t, "", "endpoints", "edit", id, "--url", "https://new.partner.example/in", "--dry-run")
	require.NoError(t, err, out)
	require.Contains(t, out, "dry run: would become: https://new.partner.example/in")
	out, err = b.run(t, "", "endpoints", "show", id, "--json")
	require.NoError(t, err)
	require.Contains(t, out, "https://hooks.partner.example/in", "a dry run changes nothing")
	require.NotContains(t, out, "partner-token")
	out, err = b.run(t, "", "endpoints", "--json")
	require.NoError(t, err)
	require.Contains(t, out, id)
	require.NotContains(t, out, "partner-token")
	_, err = b.run(t, "", "endpoints", "edit", id, "--url", "https://new.partner.example/in", "--reason", "partner moved")
	require.NoError(t, err)

	ob, err := outbox.New(outbox.Config{Jobs: outbox.JobsInTransaction, Schema: b.db.Schema})
	require.NoError(t, err)
	var res *outbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		res, err = ob.Enqueue(ctx, tx, outbox.Event{ID: uuid.New(), Type: "order.paid"}, outbox.ToSubscribers())
		return err
	}))
	require.Len(t, res.Effects, 1)

	_, err = b.run(t, "", "endpoints", "disable", id)
	require.ErrorContains(t, err, "--reason")
	_, err = b.run(t, "", "endpoints", "disable", id, "--reason", "partner's receiver returns 500s")
	require.NoError(t, err)
	out, err = b.run(t, "", "endpoints", "enable", id, "--reason", "fixed", "--drop-held", "--dry-run")
	require.NoError(t, err)
	require.Contains(t, out, "its 1 held deliveries cancelled, recorded ")
	require.Contains(t, out, res.Effects[0].ID.String()+"  event ", "the dry run lists what it would drop")
	require.Contains(t, out, "order.paid")
	out, err = b.run(t, "", "endpoints", "enable", id, "--reason", "partner asked us to drop the backlog", "--drop-held")
	require.NoError(t, err, out)
	require.Contains(t, out, "1 held deliveries cancelled")
	e, err := b.store.Get(ctx, b.db.Pool, res.Effects[0].ID)
	require.NoError(t, err)
	require.Equal(t, outboxtype.StateCancelled, e.State)

	out, err = b.run(t, "", "endpoints", "rotate", id, "--endpoint-key", key, "--overlap", "2h", "--reason", "yearly rotation")
	require.NoError(t, err)
	require.Regexp(t, `new signing secret \(shown once\): whsec_`, out)
	require.NotContains(t, out, created.Secret)

	out, err = b.run(t, "", "endpoints", "test", id, "--json")
	require.NoError(t, err, out)
	var test struct {
		EffectID uuid.UUID `json:"effect_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &test))
	e, err = b.store.Get(ctx, b.db.Pool, test.EffectID)
	require.NoError(t, err)
	require.Equal(t, "endpoint:"+id, e.Kind)

	out, err = b.run(t, "", "endpoints", "show", id)
	require.NoError(t, err)
	for _, action := range []string{"create", "edit", "disable", "enable", "rotate"} {
		require.Regexp(t, `\s`+action+`\s+oncall@example.com`, out)
	}
	require.Regexp(t, `\srotate\s+oncall@example.com\s+yearly rotation`, out, "rotate takes --reason, audited")
	require.Regexp(t, `\screate\s+oncall@example.com\s+partner onboarding`, out, "so does create")

	acme, err := b.run(t, "", "endpoints", "create", "--endpoint-key", key, "--url", "https://acme.partner.example/in", "--types", "order.*", "--tenant", "acme")
	require.NoError(t, err, acme)
	require.Contains(t, acme, "created (tenant acme's): https://acme.partner.example/in receives order.*", "the output says whose it is")
	require.Contains(t, out, "secret      rotated, signs until")

	// After a leak: no overlap, every earlier secret retired.
	_, err = b.run(t, "", "endpoints", "rotate", id, "--endpoint-key", key, "--overlap", "720h")
	require.Equal(t, 2, cli.ExitCode(err), "over the week's cap: %v", err)
	out, err = b.run(t, "", "endpoints", "rotate", id, "--endpoint-key", key, "--retire-old")
	require.NoError(t, err, out)
	require.Contains(t, out, "every earlier secret stopped signing")
	out, err = b.run(t, "", "endpoints", "show", id)
	require.NoError(t, err)
	require.NotContains(t, out, "secret      rotated", "no earlier secret signs any more")
}

// TestChangingTheEndpointKey: with the list "NEW,OLD", reseal seals every
// secret again with NEW, audited, after which NEW alone opens them all and
// OLD none; a second reseal has nothing to do.
func TestChangingTheEndpointKey(t *testing.T) {
	t.Parallel()
	b := newTestBundle(t)
	ctx := context.Background()
	oldKey, newKey := endpoint.NewKey(), endpoint.NewKey()
	out, err := b.run(t, "", "endpoints", "create", "--endpoint-key", oldKey, "--url", "https://hooks.partner.example/in",
		"--types", "order.*", "--reason", "partner onboarding", "--json")
	require.NoError(t, err, out)
	var created struct{ Endpoint endpoint.Endpoint }
	require.NoError(t, json.Unmarshal([]byte(out), &created))

	unopenable := func(key string) int {
		k, err := endpoint.ParseKey(key)
		require.NoError(t, err)
		reg, err := endpoint.NewRegistry(endpoint.RegistryConfig{Schema: b.db.Schema, Key: k})
		require.NoError(t, err)
		n, err := reg.Unopenable(ctx, b.db.Pool)
		require.NoError(t, err)
		return n
	}
	require.Equal(t, 1, unopenable(newKey), "the new key alone opens nothing yet")

	_, err = b.run(t, "", "endpoints", "reseal", "--endpoint-key", newKey+","+oldKey)
	require.Equal(t, 2, cli.ExitCode(err), "a reason is required")
	out, err = b.run(t, "", "endpoints", "reseal", "--endpoint-key", newKey+","+oldKey, "--reason", "yearly key change")
	require.NoError(t, err, out)
	require.Contains(t, out, "resealed 1 secrets and 0 client certificate keys of 1 endpoints")
	require.Zero(t, unopenable(newKey), "the new key alone opens every secret")
	require.Equal(t, 1, unopenable(oldKey), "the old key none")

	out, err = b.run(t, "", "endpoints", "reseal", "--endpoint-key", newKey+","+oldKey, "--reason", "again")
	require.NoError(t, err, out)
	require.Contains(t, out, "resealed 0 secrets")
	out, err = b.run(t, "", "endpoints", "show", created.Endpoint.ID.String())
	require.NoError(t, err, out)
	require.Contains(t, out, "reseal")
	require.Contains(t, out, "yearly key change")
}
