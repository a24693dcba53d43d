package sideeffects_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testdb"
	"github.com/outboxd/outboxd/providers"
	"github.com/outboxd/outboxd/providers/webhook"
	"github.com/outboxd/outboxd/sideeffects"
)

// TestNewDispatcherEnforcesWhatOutboxdRunEnforces: a dispatcher started in
// an application's process refuses the settings `outboxd run` refuses,
// naming the setting and the reason.
func TestNewDispatcherEnforcesWhatOutboxdRunEnforces(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	wh, err := webhook.New(webhook.Config{Secret: "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", Timeout: 20 * time.Second})
	require.NoError(t, err)
	base := func() sideeffects.Config {
		return sideeffects.Config{Schema: db.Schema, Providers: []providers.Provider{wh}}
	}
	for _, tc := range []struct {
		name   string
		change func(*sideeffects.Config)
		want   string
	}{
		{"job timeout not above the provider's", func(c *sideeffects.Config) { c.JobTimeout = 20 * time.Second },
			"job timeout (20s) must exceed the webhook provider's timeout (20s)"},
		{"retry max delay below the base", func(c *sideeffects.Config) {
			c.Retry = sideeffects.RetryPolicy{BaseDelay: time.Minute, MaxDelay: time.Second}
		}, "retry max delay (1s) must not be shorter than the retry base delay (1m0s)"},
		{"rescue not after the job timeout", func(c *sideeffects.Config) { c.JobTimeout, c.RescueAfter = time.Minute, time.Minute },
			"rescue-after (1m0s) must exceed job-timeout (1m0s)"},
		{"retention inside a key window", func(c *sideeffects.Config) { c.Retention = time.Hour },
			"must exceed the webhook key window"},
		{"concurrency of an unknown provider", func(c *sideeffects.Config) { c.Concurrency = map[string]int{"stripe": 2} },
			`concurrency set for unknown provider "stripe"`},
		{"no provider", func(c *sideeffects.Config) { c.Providers = nil }, "no providers configured"},
		{"a schema that needs quoting", func(c *sideeffects.Config) { c.Schema = `Out"boxd` }, "use one lowercase name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.change(&cfg)
			_, err := sideeffects.NewDispatcher(db.Pool, cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
	d, err := sideeffects.NewDispatcher(db.Pool, base())
	require.NoError(t, err, "the defaults pass every check")
	require.NotNil(t, d)
}

// TestDispatcherRecordsItsSettings: a dispatcher started in-process with
// Settings is listed, as outboxd run is, by Operator.Dispatchers (what
// outboxctl dispatchers prints), and Stop marks it stopped.
func TestDispatcherRecordsItsSettings(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	wh, err := webhook.New(webhook.Config{Secret: "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
	require.NoError(t, err)
	d, err := sideeffects.NewDispatcher(db.Pool, sideeffects.Config{Schema: db.Schema, Providers: []providers.Provider{wh},
		Settings: map[string]any{"providers": []string{"webhook"}, "rescue_after": "2m0s"}, TestOnly: true})
	require.NoError(t, err)
	op, err := sideeffects.NewOperator(db.Pool, sideeffects.OperatorConfig{Schema: db.Schema})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	recs, err := op.Dispatchers(ctx, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	host, _ := os.Hostname()
	require.Equal(t, host, recs[0].Host)
	require.Equal(t, os.Getpid(), recs[0].PID)
	require.Nil(t, recs[0].StoppedAt)
	require.JSONEq(t, `{"providers": ["webhook"], "rescue_after": "2m0s"}`, string(recs[0].Settings))

	require.NoError(t, d.Stop(ctx))
	recs, err = op.Dispatchers(ctx, 10)
	require.NoError(t, err)
	require.NotNil(t, recs[0].StoppedAt, "Stop marks the record stopped")
}
